"""The compiled window (ina.host._window) fuzzed: any bytes, as a result, a QUERY's
answer or an owner's values, to windows of any plan, between sends at any time. The
parser must refuse what is not whole, never read past a payload, and keep the
window's invariants: what it counts stays within its chunks, a chunk's result is
taken once, every packet it sends is a header or a whole packet.

Bounded: FUZZ_EXAMPLES examples a test (INA_FUZZ_EXAMPLES=N for a longer run). The
sanitizers' tier (tests/test_window_sanitizers.py) runs these under AddressSanitizer
and UndefinedBehaviorSanitizer."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ina.host.config import WorkerConfig
from ina.host.flow import Flow
from ina.host.results import Lead
from ina.host.window import ReductionWindow, RtoEstimator
from ina.protocol.bitmaps import bit_of
from ina.protocol.constants import (
    ARRAY_BYTES,
    ELEMS_PER_PACKET,
    INA_HEADER_BYTES,
    OP_COPY,
    QUERY,
    WIDTH16,
    WIDTH32,
    Flag,
    Op,
)

FUZZ_EXAMPLES = int(os.environ.get("INA_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
WHOLE = INA_HEADER_BYTES + ARRAY_BYTES


@dataclass(frozen=True)
class Plan:
    slots: int
    bfr_id: int
    width: int
    chunks: int
    lead: bool
    kind: str  # "all", "some" (data and dest per chunk), "owners"
    seq_base: int


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    width = draw(st.sampled_from([WIDTH32, WIDTH16]))
    return Plan(slots=draw(st.sampled_from([1, 2, 4, 16])), bfr_id=draw(st.integers(1, 3)),
                width=width, chunks=draw(st.integers(0, 12)), lead=draw(st.booleans()),
                kind=draw(st.sampled_from(["all", "some"] + (["owners"] if width == WIDTH32
                                                             else []))),
                seq_base=draw(st.sampled_from([0, 7, (1 << 32) - 2])))


def _window(plan: Plan, data: st.DataObject) -> ReductionWindow | None:
    per = ELEMS_PER_PACKET * (2 if plan.width == WIDTH16 else 1)
    if plan.chunks == 0 and not plan.lead:
        return None
    size = 0 if plan.chunks == 0 else (plan.chunks - 1) * per + data.draw(st.integers(1, per))
    values = np.arange(size, dtype=np.int32) % 100
    flow = Flow(width=plan.width)
    if plan.chunks and plan.kind == "some":
        flow = Flow(width=plan.width,
                    data=np.array(data.draw(st.lists(st.booleans(), min_size=plan.chunks,
                                                     max_size=plan.chunks))),
                    dest=np.array(data.draw(st.lists(st.integers(0, 3), min_size=plan.chunks,
                                                     max_size=plan.chunks))))
    elif plan.chunks and plan.kind == "owners":
        flow = Flow(width=WIDTH32, owners=np.array(data.draw(
            st.lists(st.integers(1, 3), min_size=plan.chunks, max_size=plan.chunks))))
    config = WorkerConfig(job_id=4, op=Op.SUM, pbm=bit_of(plan.bfr_id), target="10.0.0.1",
                          window=plan.slots)
    lead = (Lead(np.arange(3, dtype=np.int32), lambda result: None) if plan.lead else None)
    return ReductionWindow(config, values, plan.seq_base, RtoEstimator(initial=0.01, floor=0.001),
                           flow=flow, lead=lead, joined=data.draw(st.booleans()))


def _mutated(data: st.DataObject, seeds: list[bytes]) -> bytes:
    """Bytes to feed the window: one it sent, turned into a result or an answer and
    mutated (flags, counts, widths, lengths), or anything at all."""
    if not seeds or data.draw(st.integers(0, 9)) == 0:
        return data.draw(st.binary(max_size=WHOLE + 8))
    raw = bytearray(data.draw(st.sampled_from(seeds)))
    raw[1] = data.draw(st.sampled_from([int(Flag.RESULT), int(Flag.RESULT | Flag.NODATA),
                                        int(Flag.RESULT | Flag.OVERFLOW),
                                        int(QUERY | Flag.REPLY), raw[1],
                                        data.draw(st.integers(0, 255))]))
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw[0] = (raw[0] & 0xF0) | data.draw(st.sampled_from([OP_COPY, int(Op.SUM)]))
    cut = data.draw(st.integers(0, len(raw)))
    return bytes(raw[:cut]) if data.draw(st.integers(0, 4)) == 0 else bytes(raw)


def _check(window: ReductionWindow, sent: list[bytes]) -> None:
    chunks = window.plan.chunks
    assert 0 <= window.base <= window.next <= chunks
    assert 0 <= window.results <= chunks and window.in_flight <= window.next
    assert window.results == sum(window.received)
    assert window.done == (window.missing() == [])
    assert all(len(p) in (INA_HEADER_BYTES, WHOLE) for p in sent)


@FUZZ
@given(plans(), st.data())
def test_any_bytes_to_a_window_keep_its_invariants(plan: Plan, data: st.DataObject) -> None:
    window = _window(plan, data)
    if window is None:
        return
    now, seeds = 0.0, []
    for _ in range(data.draw(st.integers(1, 60))):
        now += data.draw(st.sampled_from([0.0, 0.0005, 0.003, 0.02, 0.2]))
        action = data.draw(st.integers(0, 3))
        if action == 0:
            sent = window.packets_to_send(now)
            _check(window, sent)
            seeds += sent
            continue
        payload = _mutated(data, seeds)
        if action == 1:
            window.accept(payload, now)
        elif action == 2:
            window.answer(payload, now)
        else:
            window.hold(payload)
        _check(window, [])


@FUZZ
@given(plans(), st.data())
def test_a_result_is_taken_once(plan: Plan, data: st.DataObject) -> None:
    window = _window(plan, data)
    if window is None:
        return
    for payload in window.packets_to_send(0.0):
        if payload[0] & 0xF == OP_COPY:
            continue
        result = bytearray(payload)
        result[1] = int(Flag.RESULT | Flag.NODATA) if len(payload) == INA_HEADER_BYTES \
            else int(Flag.RESULT)
        chunk = (int.from_bytes(result[4:8], "big") - window.plan.seq_base) % (1 << 32)
        first = window.accept(bytes(result), 0.01)
        assert first == bool(window.received[chunk])
        assert not window.accept(bytes(result), 0.02)  # a duplicate
