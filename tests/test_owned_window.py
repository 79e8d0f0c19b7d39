"""A window whose chunks have owners (a Broadcast's, an Allgather's): the owner sends
its values once (OP_COPY) with its NODATA contribution; every other worker
contributes NODATA to a chunk only once its owner's values are held; a chunk ends
with its completion; the owner sends its values again with each retransmission."""

import dataclasses

import numpy as np
import pytest

from ina.host.call import Caller
from ina.host.config import WorkerConfig
from ina.host.flow import Flow
from ina.host.window import ReductionWindow, RtoEstimator
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, InaPacket
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import OP_COPY, Ecn, Flag, Op

OWNER, OTHER = 1, 2  # BFR-ids
CHUNKS = 3


def _config(bfr_id: int) -> WorkerConfig:
    return WorkerConfig(job_id=4, op=Op.SUM, pbm=bit_of(bfr_id), target="10.0.100.1",
                        window=2 * CHUNKS, root="10.0.100.6")


def _window(bfr_id: int, values: np.ndarray, rto: float = 0.25) -> ReductionWindow:
    owners = np.full(CHUNKS, OWNER, dtype=np.int64)
    return ReductionWindow(_config(bfr_id), values, seq_base=10, rto=rto,
                           flow=Flow(counts=np.full(CHUNKS, P), owners=owners))


def _completion(seq: int) -> bytes:
    return InaHeader(job_id=4, seq=seq, pbm=0b11, count=P,
                     flags=Flag.RESULT | Flag.NODATA).pack()


def _kinds(payloads: list[bytes]) -> list[tuple[int, str]]:
    """(seq, what) of each payload: an owner's values, or a NODATA contribution."""
    out = []
    for p in payloads:
        h = InaHeader.unpack(p)
        if h.op == OP_COPY:
            assert h.flags == Flag.RESULT and len(p) > len(h.pack())
            out.append((h.seq, "values"))
        else:
            assert h.flags == Flag.NODATA and len(p) == len(h.pack())
            out.append((h.seq, "nodata"))
    return out


VALUES = np.arange(CHUNKS * P, dtype=np.int32)


def _copies() -> list[bytes]:
    """The owner's values of every chunk, as its edge switch sends them on."""
    return [p for p in _window(OWNER, VALUES).packets_to_send(0.0)
            if InaHeader.unpack(p).op == OP_COPY]


def test_an_owner_sends_each_chunks_values_once_with_its_nodata_contribution() -> None:
    window = _window(OWNER, VALUES)
    sent = window.packets_to_send(0.0)
    assert _kinds(sent) == [(10 + c, k) for c in range(CHUNKS) for k in ("values", "nodata")]
    values = InaPacket.unpack(sent[0])
    assert values.header.pbm == bit_of(OWNER) and values.meaningful == tuple(range(P))


def test_an_owner_ends_its_chunks_with_their_completions() -> None:
    window = _window(OWNER, VALUES)
    window.packets_to_send(0.0)
    assert all(window.accept(_completion(10 + c), 0.01) for c in range(CHUNKS))
    assert window.done and window.outcome().values.tolist() == VALUES.tolist()


def test_a_worker_contributes_to_a_chunk_only_once_its_owners_values_are_held() -> None:
    window = _window(OTHER, np.zeros(CHUNKS * P, dtype=np.int32))
    assert window.packets_to_send(0.0) == [] and window.next_timer() is None
    values = _copies()
    assert not window.accept(values[0], 0.01)  # held: not a result
    assert _kinds(window.packets_to_send(0.01)) == [(10, "nodata")]
    assert not window.accept(values[2], 0.01)  # held, out of order: waits for chunk 1's
    assert window.packets_to_send(0.01) == []
    window.accept(values[1], 0.02)
    assert _kinds(window.packets_to_send(0.02)) == [(11, "nodata"), (12, "nodata")]
    assert all(window.accept(_completion(10 + c), 0.03) for c in range(CHUNKS))
    assert window.done and window.outcome().values.tolist() == VALUES.tolist()


def test_a_copy_of_held_values_changes_nothing() -> None:
    window = _window(OTHER, np.zeros(CHUNKS * P, dtype=np.int32))
    owner = _window(OWNER, VALUES)
    first = owner.packets_to_send(0.0)[0]
    assert window.hold(first) and window.hold(first)
    assert _kinds(window.packets_to_send(0.0)) == [(10, "nodata")]


def test_values_of_no_chunk_of_the_window_are_not_taken() -> None:
    window = _window(OTHER, np.zeros(CHUNKS * P, dtype=np.int32))
    later = ReductionWindow(_config(OWNER), VALUES, seq_base=10 + CHUNKS, flow=Flow(
        counts=np.full(CHUNKS, P), owners=np.full(CHUNKS, OWNER, dtype=np.int64)))
    assert not window.hold(later.packets_to_send(0.0)[0])  # the caller keeps it for later
    assert window.packets_to_send(0.0) == []


def test_an_owner_sends_its_values_again_with_each_retransmission() -> None:
    window = ReductionWindow(_config(OWNER), VALUES[:P], seq_base=10, rto=0.25,
                             flow=Flow(counts=np.full(1, P),
                                       owners=np.full(1, OWNER, dtype=np.int64)))
    assert _kinds(window.packets_to_send(0.0)) == [(10, "values"), (10, "nodata")]
    assert window.packets_to_send(0.1) == []
    assert _kinds(window.packets_to_send(0.3)) == [(10, "values"), (10, "nodata")]


def test_a_worker_waiting_for_its_next_chunks_values_does_not_probe_its_oldest() -> None:
    # Its oldest chunk's result waits for the slowest worker's copy, which no probe
    # speeds up; the next chunk goes once its values come. On the fat-tree at
    # 2 Mbit/s such probes sent 375-547 packets of a 409-chunk Allgather.
    rto = RtoEstimator(initial=1.0, floor=0.005)
    rto.sample(0.02)  # probe after 2 x 20 ms; the RTO is 20 ms + 4 x 10 ms
    window = ReductionWindow(_config(OTHER), np.zeros(CHUNKS * P, dtype=np.int32),
                             seq_base=10, rto=rto, joined=True,
                             flow=Flow(counts=np.full(CHUNKS, P),
                                       owners=np.full(CHUNKS, OWNER, dtype=np.int64)))
    window.hold(_copies()[0])
    first = window.packets_to_send(0.0)
    assert window.next_timer() == pytest.approx(0.06)  # the RTO, not the probe's 0.04
    assert window.packets_to_send(0.05) == []
    assert window.packets_to_send(0.06) == first and window.probes == 0


def test_a_marked_copy_marks_the_chunks_contribution() -> None:
    # Nothing answers a copy: its mark reaches its owner through the chunk's round.
    window = _window(OTHER, np.zeros(CHUNKS * P, dtype=np.int32))
    copies = _copies()
    head = InaHeader.unpack(copies[0])
    window.hold(dataclasses.replace(head, ecn=Ecn.CE).pack() + copies[0][len(head.pack()):])
    window.hold(copies[1])
    sent = [InaHeader.unpack(p) for p in window.packets_to_send(0.0)]
    assert [(h.seq, h.ecn) for h in sent] == [(10, Ecn.CE), (11, Ecn.NONE)]


def test_a_window_without_owners_takes_no_owners_values_as_a_result() -> None:
    window = ReductionWindow(_config(OTHER), np.zeros(P, dtype=np.int32), seq_base=10)
    window.packets_to_send(0.0)
    owner = _window(OWNER, VALUES)
    assert not window.accept(owner.packets_to_send(0.0)[0], 0.01)
    assert not window.done


class _Switch:
    """A transport whose network answers each NODATA contribution with the chunk's
    completion at once, and records what the worker sent."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.queued: list[bytes] = []

    def send(self, payload: bytes, dst: str | None = None) -> None:
        self.sent.append(payload)
        h = InaHeader.unpack(payload)
        if h.flags & Flag.NODATA:
            self.queued.append(_completion(h.seq))

    def recv(self, timeout: float) -> bytes | None:
        return self.queued.pop(0) if self.queued else None


def test_an_owners_values_that_came_before_their_window_are_kept_for_it() -> None:
    # The owner started the call while this worker was still in its last one (or
    # asking the root for this one's start): its values came to that window.
    early = _copies()
    switch = _Switch()
    caller = Caller(_config(OTHER), switch, timeout=1.0)
    last_call = ReductionWindow(_config(OTHER), np.zeros(P, dtype=np.int32), seq_base=0)
    for payload in early:
        assert not last_call.hold(payload)
        caller._keep_early(payload)
    flow = Flow(counts=np.full(CHUNKS, P), owners=np.full(CHUNKS, OWNER, dtype=np.int64))
    result = caller.reduce_in_network(np.zeros(CHUNKS * P, dtype=np.int32), Op.SUM, 10,
                                      "broadcasting", flow)
    assert result.values.tolist() == VALUES.tolist()
    assert _kinds(switch.sent) == [(10 + c, "nodata") for c in range(CHUNKS)]
