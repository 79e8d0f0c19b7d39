"""The collectives on the host side, without a network: the layout of parts, the
window's chunks of data or NODATA and its results of data or completions, the
descriptor the workers agree on, and every collective's body on an in-memory
fabric that reduces as the data plane does (tests/colltest.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest

from ina.errors import CallMismatch
from ina.host.collective import unwords, words
from ina.host.congestion import CongestionWindow
from ina.host.descriptor import KIND_INT, CallDescriptor, Collective
from ina.host.flow import Flow, Layout
from ina.host.results import AllreduceResult, Lead
from ina.host.window import ReductionWindow
from ina.host.worker import Worker
from ina.protocol.codec import InaHeader, InaPacket
from ina.protocol.constants import ARRAY_BYTES, INA_HEADER_BYTES, WIDTH16, Flag, Op
from ina.protocol.constants import ELEMS16_PER_PACKET as P16
from ina.protocol.constants import ELEMS_PER_PACKET as P

from colltest import COLLECTIVES, LocalFabric, Outcome, body_of, check, configs, run_bodies

# --- layout ----------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "parts"), [(1, 1), (P, 1), (P + 1, 1), (4 * P, 4),
                                             (4 * P + 5, 4), (3, 4), (10 * P + 7, 3)])
def test_parts_are_padded_to_whole_packets_and_each_chunk_has_one_owner(
        size: int, parts: int) -> None:
    layout = Layout(size, parts=parts)
    part = -(-size // parts)
    assert layout.part == part and layout.chunks == parts * -(-part // P)
    assert layout.slots == layout.chunks * P
    counts, owners = layout.counts(), layout.owner()
    assert len(counts) == len(owners) == layout.chunks
    assert counts.min() >= 1 and counts.max() <= P
    assert counts.sum() == parts * part  # every part's values, padding at its end
    values = np.arange(1, size + 1)
    wire = layout.spread(values)
    for c in range(layout.chunks):  # a chunk holds only its owner's values
        chunk = wire[c * P: (c + 1) * P]
        lo, hi = layout.part_range(int(owners[c]))
        assert set(chunk[chunk > 0]) <= set(range(lo + 1, hi + 1))
    assert np.array_equal(layout.gather(wire), values)
    assert np.array_equal(np.concatenate([layout.take_part(wire, r) for r in range(parts)]),
                          values)


def test_16_bit_elements_put_twice_as_many_values_in_a_packet() -> None:
    assert Layout(P16, width=WIDTH16).chunks == 1
    assert Layout(P16 + 1, width=WIDTH16).chunks == 2
    assert Layout(P16, width=32).chunks == 2


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int8", "uint16", "int64",
                                   "bool"])
def test_any_type_travels_as_its_bytes_in_words(dtype: str) -> None:
    x = (np.random.default_rng(1).standard_normal(7) * 100).astype(dtype)
    assert np.array_equal(unwords(words(x), x.dtype, x.size), x)


# --- the window's chunks -------------------------------------------------------------


def _result(seq: int, count: int, values: list[int] | None = None, width: int = 32,
            flags: Flag = Flag.RESULT, dest: int = 0) -> bytes:
    header = InaHeader(job_id=4, seq=seq, pbm=0b11, count=count, dest=dest, width=width,
                       flags=flags if values is not None else flags | Flag.NODATA)
    return InaPacket(header, tuple(values or ())).pack()


def test_a_nodata_chunk_is_a_header_alone_with_the_count_op_and_width_of_the_data() -> None:
    config = configs(4)[1]
    flow = Flow(data=np.array([True, False]), dest=np.array([0, 3]))
    window = ReductionWindow(config, np.arange(P + 10), 100, op=Op.MAX, flow=flow)
    first, second = window.packets_to_send()
    head = InaHeader.unpack(first)
    assert len(first) > INA_HEADER_BYTES and head.flags == Flag.NONE and head.dest == 0
    assert len(second) == INA_HEADER_BYTES
    head = InaHeader.unpack(second)
    assert (head.seq, head.count, head.op, head.width, head.dest, head.flags) == \
           (101, 10, Op.MAX, 32, 3, Flag.NODATA)
    assert head.pbm == config.pbm


def test_a_chunk_sent_elsewhere_completes_with_a_completion() -> None:
    config = configs(4)[1]  # BFR-id 2
    flow = Flow(dest=np.array([2, 3]))
    window = ReductionWindow(config, np.arange(2 * P), 0, flow=flow)
    window.packets_to_send()
    assert not window.accept(_result(0, P))  # chunk 0's data is ours: no completion ends it
    assert window.unexpected == 1 and not window.received[0]
    assert window.accept(_result(0, P, list(range(P))))
    assert window.accept(_result(1, P))  # chunk 1 goes to BFR-id 3
    assert window.done and window.completions == 1
    out = window.outcome().values
    assert out[:P].tolist() == list(range(P)) and not out[P:].any()


def test_a_16_bit_window_carries_int16_values() -> None:
    config = configs(4)[0]
    values = np.arange(-P16 // 2, P16 // 2 + 3, dtype=np.int16)
    window = ReductionWindow(config, values, 0, flow=Flow(width=WIDTH16))
    packets = window.packets_to_send()
    assert len(packets) == 2
    assert np.array_equal(np.frombuffer(packets[0], ">i2", P16, INA_HEADER_BYTES),
                          values[:P16])
    window.accept(_result(0, P16, [7] * P16, width=16))
    assert not window.accept(_result(1, 3, [1, 2, 3], width=32))  # not 16-bit elements
    window.accept(_result(1, 3, [-1, 2, 3], width=16))
    out = window.outcome().values
    assert out.dtype == np.int16 and out[-3:].tolist() == [-1, 2, 3]


def test_16_bit_values_must_fit() -> None:
    with pytest.raises(ValueError, match="signed 16 bits"):
        ReductionWindow(configs(2)[0], np.array([40000]), flow=Flow(width=WIDTH16))


def test_a_nodata_chunk_is_sent_again_as_nodata() -> None:
    window = ReductionWindow(configs(2)[0], np.arange(5), 0, rto=0.1,
                             flow=Flow(data=np.array([False])))
    first = window.packets_to_send(now=0.0)
    assert window.packets_to_send(now=0.1) == first


# --- the descriptor ------------------------------------------------------------------


def test_the_descriptor_names_every_field_the_workers_disagree_on() -> None:
    a = CallDescriptor(10, KIND_INT, Op.SUM, Collective.BROADCAST, 1, 32).values()
    b = CallDescriptor(10, KIND_INT, Op.SUM, Collective.ALLGATHER, 2, 16).values()
    problems = CallDescriptor.disagreement(np.maximum(a, b))
    assert problems == ["collective from broadcast to allgather", "root rank from 1 to 2",
                        "element width from 16 to 32"]


# --- every collective's body on an in-memory fabric --------------------------------


def _ints(n: int, size: int, seed: int, dtype: str = "int32", high: int = 2**20
          ) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-high, high, size).astype(dtype) for _ in range(n)]


def _run(collective: str, arrays: list[np.ndarray], op: Op = Op.SUM, root: int = 0,
         width: int | None = None, n: int = 4, owned: bool = False
         ) -> tuple[list[Outcome], LocalFabric]:
    cfgs = [replace(c, owned=owned) for c in configs(n, bfr_ids=[3, 9, 1, 40][:n])]
    fabric = LocalFabric(cfgs)
    outcomes = run_bodies(fabric, [body_of(collective, cfgs[r], arrays[r], op, root, width)
                                   for r in range(n)])
    return outcomes, fabric


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("size", [1, 5, P, 3 * P + 17])
def test_every_collective_of_integers_is_exact(collective: str, size: int) -> None:
    arrays = _ints(4, size, seed=size)
    outcomes, _ = _run(collective, arrays, root=2)
    check(collective, arrays, outcomes, root=2)


@pytest.mark.parametrize("op", [Op.SUM, Op.MIN, Op.MAX])
@pytest.mark.parametrize("collective", ["allreduce", "reduce", "reduce_scatter"])
def test_float_reductions_are_within_their_bound(collective: str, op: Op) -> None:
    rng = np.random.default_rng(3)
    arrays = [(rng.standard_normal(2 * P + 9) * 1000).astype(np.float32) for _ in range(4)]
    outcomes, _ = _run(collective, arrays, op, root=1)
    check(collective, arrays, outcomes, op, root=1)


@pytest.mark.parametrize("collective", ["allreduce", "reduce", "reduce_scatter"])
def test_float16_travels_in_16_bit_elements_within_its_bound_when_asked(collective: str
                                                                         ) -> None:
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(P16 + 3).astype(np.float16) for _ in range(4)]
    outcomes, fabric = _run(collective, arrays, root=3, width=16)
    check(collective, arrays, outcomes, root=3, width=16)
    widths = [flow.width for _, flow in fabric.flows]
    assert widths == [32, 16]  # the exponents (the descriptor their lead), the values


def test_a_float16_sum_travels_in_32_bit_elements_by_default() -> None:
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(P16 + 3).astype(np.float16) for _ in range(4)]
    outcomes, fabric = _run("allreduce", arrays)
    check("allreduce", arrays, outcomes)
    assert [flow.width for _, flow in fabric.flows] == [32, 32]


@pytest.mark.parametrize("op", [Op.MIN, Op.MAX])
def test_a_float_min_or_max_travels_as_exact_32_bit_keys_whatever_the_width(op: Op) -> None:
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(P16 + 3).astype(np.float16) for _ in range(4)]
    outcomes, fabric = _run("allreduce", arrays, op, width=16)
    expected = (np.minimum if op == Op.MIN else np.maximum).reduce(np.stack(arrays))
    for outcome in outcomes:
        assert isinstance(outcome, AllreduceResult)
        assert np.array_equal(outcome.values, expected.astype(np.float32))
    assert [flow.width for _, flow in fabric.flows] == [32, 32]  # the descriptor, the keys


@pytest.mark.parametrize("op", [Op.SUM, Op.MIN, Op.MAX])
def test_int16_arrays_are_exact_in_16_bits_a_sum_wrapping_with_the_flag(op: Op) -> None:
    arrays = _ints(4, P16 + 9, seed=5, dtype="int16", high=2**15)
    outcomes, _ = _run("allreduce", arrays, op)
    check("allreduce", arrays, outcomes, op, width=16)
    if op == Op.SUM:
        assert all(isinstance(o, AllreduceResult) and o.overflow for o in outcomes)


@pytest.mark.parametrize("dtype", ["float64", "float16", "int64", "uint8"])
@pytest.mark.parametrize("collective", ["broadcast", "allgather"])
def test_movements_give_any_type_back_bit_for_bit(collective: str, dtype: str) -> None:
    rng = np.random.default_rng(6)
    arrays = [(rng.standard_normal(301) * 1e4).astype(dtype) for _ in range(4)]
    outcomes, _ = _run(collective, arrays, root=3)
    check(collective, arrays, outcomes, root=3)


def test_chunks_carry_data_and_dest_as_the_design_says() -> None:
    # Figure out, from rank 0's flows, who sends data and where it goes.
    arrays = _ints(4, 4 * P, seed=7)
    _, fabric = _run("reduce_scatter", arrays)
    (_, flow), = [f for f in fabric.flows if f[1].dest is not None]
    assert flow.dest is not None and flow.data is None
    assert flow.dest.tolist() == [3, 9, 1, 40]  # one packet per part, to its owner
    # Movements: data from every worker (zeros outside its own part), no NODATA.
    for collective in ("allgather", "broadcast"):
        _, fabric = _run(collective, arrays, root=1)
        assert all(f.data is None and f.dest is None for _, f in fabric.flows), collective
    _, fabric = _run("barrier", arrays)
    assert fabric.flows[-1][1].empty


@pytest.mark.parametrize(("what", "kwargs", "message"), [
    ("collective", {"collective": "broadcast"}, "collective from allreduce to broadcast"),
    ("root", {"root": 3}, "root rank from 1 to 3"),
    ("width", {"width": 16}, "element width from 16 to 32"),
])
def test_workers_that_disagree_are_all_told(what: str, kwargs: dict[str, object],
                                            message: str) -> None:
    cfgs = configs(4)
    fabric = LocalFabric(cfgs)
    arrays = _ints(4, P, seed=8, dtype="int16", high=100)
    bodies = []
    for r in range(4):
        collective, root, width = "allreduce", 1, 32
        if what == "root":
            collective = "reduce"
        if r == 2:
            collective = str(kwargs.get("collective", collective))
            root = int(kwargs.get("root", root))  # type: ignore[call-overload]
            width = int(kwargs.get("width", width))  # type: ignore[call-overload]
        bodies.append(body_of(collective, cfgs[r], arrays[r], Op.SUM, root, width))
    for outcome in run_bodies(fabric, bodies):
        assert isinstance(outcome, CallMismatch) and message in str(outcome), outcome


@pytest.mark.parametrize("collective", ["broadcast", "allgather"])
@pytest.mark.parametrize("size", [1, 3 * P + 17])
def test_a_movement_from_its_chunks_owners_is_exact(collective: str, size: int) -> None:
    arrays = _ints(4, size, seed=size)
    outcomes, fabric = _run(collective, arrays, root=2, owned=True)
    check(collective, arrays, outcomes, root=2)
    assert fabric.flows[-1][1].owners is not None  # after the descriptor's round


def test_an_allgather_from_its_owners_interleaves_the_parts_chunks() -> None:
    # A window contributes in order: every owner's first chunk comes first.
    arrays = _ints(4, 2 * P, seed=5)
    outcomes, fabric = _run("allgather", arrays, owned=True)
    check("allgather", arrays, outcomes)
    assert fabric.flows[-1][1].owners.tolist() == [3, 9, 1, 40] * 2  # type: ignore[union-attr]


def test_workers_that_disagree_on_owners_are_all_told() -> None:
    cfgs = configs(4, bfr_ids=[3, 9, 1, 40])
    cfgs[2] = replace(cfgs[2], owned=True)
    arrays = _ints(4, P, seed=8)
    outcomes = run_bodies(LocalFabric(cfgs), [body_of("allgather", c, a)
                                              for c, a in zip(cfgs, arrays, strict=True)])
    for outcome in outcomes:
        assert isinstance(outcome, CallMismatch) and "COPY" in str(outcome), outcome


class _Silent:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, payload: bytes, dst: str | None = None) -> None:
        self.sent.append(payload)

    def recv(self, timeout: float) -> bytes | None:
        return None


@pytest.mark.parametrize(("call", "message"), [
    (lambda w: w.broadcast(np.arange(3), root=4), "rank 4 is not a rank of job 4"),
    (lambda w: w.reduce(np.arange(3), root=-1), "rank -1 is not a rank"),
    (lambda w: w.allreduce(np.array([1, 2]), width=8), "32 or 16 bits wide"),
    (lambda w: w.reduce_scatter(np.zeros((2, 2))), "one-dimensional"),
    (lambda w: w.allgather(np.zeros(0)), "non-empty"),
])
def test_bad_input_is_refused_before_anything_is_sent(call: object, message: str) -> None:
    transport = _Silent()
    worker = Worker(configs(4)[0], transport)
    with pytest.raises(ValueError, match=message):
        call(worker)  # type: ignore[operator]
    assert transport.sent == []


@pytest.mark.parametrize("collective", ["allreduce", "reduce", "broadcast"])
def test_a_packets_count_is_the_values_its_chunk_carries(collective: str) -> None:
    # The array is padded to whole packets on the wire; `count` says what is meaningful.
    _, fabric = _run(collective, _ints(4, P + 3, seed=8))
    seq, flow = fabric.flows[-1]
    assert flow.counts is not None and flow.counts.tolist() == [P, 3]


@pytest.mark.parametrize("width", [32, 16])
def test_every_chunks_packet_is_its_header_and_values_as_its_flow_says(width: int) -> None:
    # Built at once for the whole array: each must be what a header built for the
    # chunk alone and its slice of the array make, across the sequence numbers' wrap.
    config = dataclasses.replace(configs(4)[1], window=100)  # every chunk sent at once
    layout = Layout(5 * (P if width == 32 else P16) - 7, width, parts=3)
    values = (np.arange(layout.size) % 30000 - 15000).astype(np.int16)
    data = np.array([c % 4 != 1 for c in range(layout.chunks)])
    dest = np.array([c % 3 for c in range(layout.chunks)])
    flow = Flow.of(layout, data, dest)
    lead = Lead(np.arange(6, dtype=np.int32), lambda _: None)
    seq_base = 2**32 - 3
    window = ReductionWindow(config, layout.spread(values), seq_base, op=Op.MIN, gen=5,
                             flow=flow, cc=CongestionWindow(100), lead=lead)
    packets = window.packets_to_send()
    assert len(packets) == layout.chunks + 1
    wire = layout.spread(values).astype(">i4" if width == 32 else ">i2").tobytes()
    for c, packet in enumerate(packets[1:]):
        expected = InaHeader(job_id=config.job_id, seq=(seq_base + 1 + c) % 2**32,
                             pbm=config.pbm, count=int(layout.counts()[c]), op=Op.MIN,
                             flags=Flag.NONE if data[c] else Flag.NODATA, gen=5,
                             dest=int(dest[c]), width=width).pack()
        if data[c]:
            expected += wire[c * ARRAY_BYTES: (c + 1) * ARRAY_BYTES]
        assert packet == expected, c
    assert InaHeader.unpack(packets[0]).seq == seq_base  # the lead first


def test_the_last_chunks_packet_is_padded_with_zeros() -> None:
    config = dataclasses.replace(configs(4)[0], window=100)
    values = np.arange(1, 3 * P + 6, dtype=np.int32)
    window = ReductionWindow(config, values, 7, cc=CongestionWindow(100))
    packets = window.packets_to_send()
    assert len(packets) == 4
    tail = np.frombuffer(packets[-1], ">i4", P, INA_HEADER_BYTES)
    assert tail[:5].tolist() == values[3 * P:].tolist() and not tail[5:].any()
    assert InaHeader.unpack(packets[-1]).count == 5
