"""A worker under a changing plan: the generation it stamps, the start it proposes,
a re-plan in the middle of a call (REPLAN), and a job that no switch aggregates
(ON_HOSTS: a TCP ring among the workers on 127.0.0.x). The network is a fake: an
edge switch and a root in memory (``Fabric``)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from ina.errors import AllreduceError
from ina.host.config import RING_JOBS, RING_RANKS, WorkerConfig, ring_port
from ina.host.results import AllreduceResult
from ina.host.worker import Worker
from ina.model.harness import reduce_arrays
from ina.protocol.arith import INT32_MAX, INT32_MIN, seq_add, wrap_int32
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, array_bytes, payload_values
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import INA_HEADER_BYTES, INA_UDP_PORT, QUERY, Flag, Op

from inatest import ROOT, in_threads

SLOTS = 4
JOB = 9
EDGE = "10.0.100.1"


class Fabric:
    """A job's edge switch and root for ``n`` workers, as the data plane behaves: the
    root answers the first SYNC of a plan with its proposal and later ones with the
    highest completed sequence number + 2 x SLOTS + 1, in the plan's generation; a
    contribution of the plan's generation is aggregated (SUM wraps and flags an
    overflow, MIN/MAX signed) and its result multicast; one of another generation
    comes back as a REPLAN notice; with ``on_hosts``, every packet (an ABORT aside)
    comes back as an ON_HOSTS notice. ``hook(header)`` sees each contribution first
    and may change the plan."""

    def __init__(self, n: int, gen: int = 0):
        self.n = n
        self.lock = threading.Condition()
        self.inbox: dict[int, deque[bytes]] = {r: deque() for r in range(n)}
        self.gen = gen
        self.first = True  # the next SYNC is the first of the plan
        self.done = 0  # highest completed sequence number (once not first)
        self.cells: dict[int, tuple[int, npt.NDArray[np.int64], bool]] = {}
        self.on_hosts = False
        self.hook: Callable[[InaHeader], None] = lambda h: None
        self.sent: list[tuple[int, InaHeader]] = []  # every packet a worker sent
        #: Drop contributions until a SYNC of the plan (a root's DROP_AHEAD).
        self.drop_until_sync = False

    def replan(self, progress: int | None = None) -> None:
        """A new plan: a new generation and epoch; ``progress``: the root's state as if
        other workers had completed calls up to it in the new plan already."""
        self.gen = (self.gen + 1) % 256
        self.cells.clear()
        self.first = progress is None
        if progress is not None:
            self.done = progress

    def transport(self, rank: int) -> FakeTransport:
        return FakeTransport(self, rank)

    def _to(self, rank: int, payload: bytes) -> None:
        self.inbox[rank].append(payload)

    def _back(self, rank: int, h: InaHeader, payload: bytes, flags: Flag, seq: int) -> None:
        reply = InaHeader(job_id=h.job_id, seq=seq, pbm=h.pbm, count=h.count, op=h.op,
                          flags=flags, si=h.si, gen=self.gen)
        self._to(rank, reply.pack() + payload[INA_HEADER_BYTES:])

    def handle(self, rank: int, payload: bytes) -> None:
        h = InaHeader.unpack(payload)
        self.sent.append((rank, h))
        if h.flags & QUERY == QUERY:
            return  # not answered: the values follow when the chunk is due again
        if not h.flags & Flag.SYNC:
            self.hook(h)
        told = Flag.SYNC | Flag.REPLY
        if self.on_hosts:
            if not h.flags & Flag.ABORT:
                self._back(rank, h, payload, told | Flag.ON_HOSTS, h.seq)
        elif h.flags & Flag.ABORT:
            self.done = h.seq
        elif h.flags & Flag.SYNC:
            if self.first:
                self.first, self.done = False, seq_add(h.seq, -(2 * SLOTS + 1))
                self.drop_until_sync = False
            self._back(rank, h, payload, told, seq_add(self.done, 2 * SLOTS + 1))
        elif h.gen != self.gen:
            self._back(rank, h, payload, told | Flag.REPLAN, h.seq)
        elif not self.drop_until_sync:
            self._absorb(rank, h, payload_values(payload).astype(np.int64))

    def _absorb(self, rank: int, h: InaHeader, values: npt.NDArray[np.int64]) -> None:
        everyone = (1 << self.n) - 1
        bitmap, cell, overflow = self.cells.get(h.seq, (0, values, False))
        if bitmap == everyone:
            self._to(rank, self._result(h, cell, overflow))  # a resend
            return
        if bitmap & bit_of(rank + 1):
            return  # a duplicate
        if bitmap:
            if h.op == Op.SUM:
                total = cell + values
                cell = wrap_int32(total)
                overflow |= bool(np.any(total != cell))
            else:
                cell = np.minimum(cell, values) if h.op == Op.MIN else np.maximum(cell, values)
        bitmap |= bit_of(rank + 1)
        self.cells[h.seq] = (bitmap, cell, overflow)
        if bitmap == everyone:
            self.done = h.seq
            for r in range(self.n):
                self._to(r, self._result(h, cell, overflow))

    def _result(self, h: InaHeader, cell: npt.NDArray[np.int64], overflow: bool) -> bytes:
        flags = Flag.RESULT | (Flag.OVERFLOW if overflow else Flag.NONE)
        header = InaHeader(job_id=h.job_id, seq=h.seq, pbm=(1 << self.n) - 1, count=h.count,
                           op=h.op, flags=flags, gen=self.gen)
        return header.pack() + array_bytes(cell)


class FakeTransport:
    def __init__(self, fabric: Fabric, rank: int):
        self.fabric, self.rank = fabric, rank

    def send(self, payload: bytes, dst: str | None = None) -> None:
        assert dst in (None, EDGE), "a worker sends everything to its edge switch"
        with self.fabric.lock:
            self.fabric.handle(self.rank, payload)
            self.fabric.lock.notify_all()

    def recv(self, timeout: float) -> bytes | None:
        inbox = self.fabric.inbox[self.rank]
        with self.fabric.lock:
            self.fabric.lock.wait_for(lambda: bool(inbox), max(timeout, 0.0))
            return inbox.popleft() if inbox else None


def _ring_base(n: int) -> int:
    """A port base with ``n`` free ports after it on 127.0.0.x (likely)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1]) % 20000 + 20000


def _workers(fabric: Fabric, op: Op = Op.SUM, timeout: float = 5.0) -> list[Worker]:
    base = _ring_base(fabric.n)
    names = tuple(f"w{r + 1}" for r in range(fabric.n))
    addresses = tuple(f"127.0.0.{r + 10}" for r in range(fabric.n))
    return [Worker(WorkerConfig(JOB, op, bit_of(r + 1), EDGE, SLOTS, fabric.n, "", names[r],
                                names, addresses, r, base), fabric.transport(r),
                   timeout=timeout)
            for r in range(fabric.n)]


def _call_all(workers: list[Worker], arrays: Sequence[npt.NDArray[Any]],
              op: Op | None = None) -> list[AllreduceResult | Exception]:
    def call(r: int) -> Callable[[], AllreduceResult]:
        return lambda: workers[r].allreduce(arrays[r], op)

    outcomes = in_threads({str(r): call(r) for r in range(len(workers))})
    return [outcomes[str(r)] for r in range(len(workers))]


def _results(outcomes: list[AllreduceResult | Exception]) -> list[AllreduceResult]:
    for o in outcomes:
        assert isinstance(o, AllreduceResult), o
    return [o for o in outcomes if isinstance(o, AllreduceResult)]


def _arrays(n: int, size: int, seed: int = 0) -> list[npt.NDArray[np.int32]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-(2**20), 2**20, size, dtype=np.int32) for _ in range(n)]


def _exact(outcomes: list[AllreduceResult | Exception], op: Op,
           arrays: Sequence[npt.NDArray[Any]]) -> list[AllreduceResult]:
    results = _results(outcomes)
    expected = reduce_arrays(op, arrays)
    for r in results:
        assert np.array_equal(r.values, expected)
    return results


# --- generations and proposals -------------------------------------------------------


def test_every_packet_carries_the_generation_the_root_answered_with() -> None:
    fabric = Fabric(2, gen=5)
    workers = _workers(fabric)
    _exact(_call_all(workers, _arrays(2, 3 * P)), Op.SUM, _arrays(2, 3 * P))
    _call_all(workers, _arrays(2, P))
    for rank in range(2):
        first_sync, *later = [h for r, h in fabric.sent if r == rank]
        assert first_sync.flags == Flag.SYNC and first_sync.gen == 0  # a fresh worker
        assert {h.gen for h in later} == {5}


def test_a_sync_proposes_the_sequence_number_after_the_last_call() -> None:
    fabric = Fabric(2)
    workers = _workers(fabric)
    for w in workers:
        w.pipelined_start = False  # every call asks the root
    _call_all(workers, _arrays(2, 3 * P))  # the descriptor and 3 packets: seq 0..3
    assert [w.continuation for w in workers] == [4, 4]
    fabric.replan()  # a new epoch: the first SYNC's proposal is the start
    _exact(_call_all(workers, _arrays(2, P, seed=1)), Op.SUM, _arrays(2, P, seed=1))
    syncs = [h.seq for _, h in fabric.sent if h.flags == Flag.SYNC]
    assert syncs[:2] == [0, 0] and syncs[-2:] == [4, 4]
    assert [w.continuation for w in workers] == [6, 6]


def test_a_start_behind_the_last_call_fails_saying_the_root_lost_progress() -> None:
    fabric = Fabric(1)
    (worker,) = _workers(fabric)
    worker.pipelined_start = False
    worker.allreduce(np.arange(3 * P))
    fabric.replan(progress=seq_add(0, -(2 * SLOTS + 1)))  # the root would start calls at 0
    sent = len(fabric.sent)
    with pytest.raises(AllreduceError, match="root has lost the progress of earlier calls"):
        worker.allreduce(np.arange(P))
    assert [h.flags for _, h in fabric.sent[sent:]] == [Flag.SYNC]  # nothing but the SYNC


def test_a_call_after_a_completed_one_starts_without_a_sync_where_the_root_would() -> None:
    fabric = Fabric(2)
    workers = _workers(fabric)
    _call_all(workers, _arrays(2, 3 * P))  # seq 0..3
    sent = len(fabric.sent)
    arrays = _arrays(2, P, seed=1)
    _exact(_call_all(workers, arrays), Op.SUM, arrays)
    later = [h for _, h in fabric.sent[sent:]]
    assert not any(h.flags & Flag.SYNC for h in later)
    assert min(h.seq for h in later) == 4 + 2 * SLOTS  # the root's answer to a SYNC
    assert [w.continuation for w in workers] == [4 + 2 * SLOTS + 2] * 2


def test_a_call_without_a_sync_at_a_root_that_lost_the_progress_asks_it_and_is_exact() -> None:
    # The job redeployed between two calls: the root takes the first SYNC's proposal.
    fabric = Fabric(2)
    workers = _workers(fabric, timeout=5.0)
    _call_all(workers, _arrays(2, P))
    fabric.first, fabric.cells = True, {}
    fabric.drop_until_sync = True  # contributions before a SYNC of the epoch are dropped
    arrays = _arrays(2, 2 * P, seed=2)
    _exact(_call_all(workers, arrays), Op.SUM, arrays)
    syncs = [h.seq for _, h in fabric.sent if h.flags == Flag.SYNC]
    assert syncs[-1] == 2 + 2 * SLOTS  # its proposal: the start it took


# --- REPLAN ------------------------------------------------------------------------------


def _replan_once_at(fabric: Fabric, seq: int, progress: int | None = None) -> None:
    def hook(h: InaHeader) -> None:
        if h.seq == seq and fabric.hook is hook:
            fabric.hook = lambda h: None
            fabric.replan(progress)

    fabric.hook = hook


def test_a_replan_mid_call_runs_the_call_again_and_is_exact() -> None:
    fabric = Fabric(3)
    workers = _workers(fabric)
    _replan_once_at(fabric, seq=5)  # in the array, past the descriptor at 0
    arrays = _arrays(3, 8 * P)
    results = _exact(_call_all(workers, arrays), Op.SUM, arrays)
    assert [w.stats.replans for w in workers] == [1, 1, 1]
    assert [w.gen for w in workers] == [1, 1, 1]
    assert not any(r.on_hosts for r in results)
    # Every chunk was sent again under the new plan.
    resent = {h.seq for _, h in fabric.sent if h.gen == 1 and not h.flags & Flag.SYNC}
    assert resent == set(range(9))


def test_a_replan_during_a_float_call_is_exact() -> None:
    fabric = Fabric(2)
    workers = _workers(fabric)
    _replan_once_at(fabric, seq=1)  # the exponents
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(2 * P).astype(np.float32) for _ in range(2)]
    results = _results(_call_all(workers, arrays))
    assert np.array_equal(results[0].values, results[1].values)
    assert results[0].error_bound is not None
    exact = arrays[0].astype(np.float64) + arrays[1]
    assert np.all(np.abs(results[0].values - exact) <= results[0].error_bound)
    # The worker that saw the new plan first ran its call again; the other, if it
    # started the call after that, under the new plan already.
    assert max(w.stats.replans for w in workers) == 1


def test_a_replan_after_other_workers_finished_the_call_fails_saying_so() -> None:
    fabric = Fabric(1)
    (worker,) = _workers(fabric)
    _replan_once_at(fabric, seq=2, progress=100)  # the root is past the call already
    with pytest.raises(AllreduceError, match="other workers had already finished this call"):
        worker.allreduce(np.arange(3 * P))


def test_a_call_replanned_too_often_fails_saying_so() -> None:
    fabric = Fabric(1)
    (worker,) = _workers(fabric)
    worker.max_replans = 2

    def hook(h: InaHeader) -> None:
        if h.gen == fabric.gen:
            fabric.replan()

    fabric.hook = hook
    with pytest.raises(AllreduceError, match="re-planned 3 times"):
        worker.allreduce(np.arange(P))
    assert worker.stats.replans == 3


# --- ON_HOSTS -------------------------------------------------------------------------


@pytest.mark.parametrize("op", [Op.SUM, Op.MIN, Op.MAX])
def test_a_job_on_hosts_is_reduced_on_a_ring_with_the_switches_semantics(op: Op) -> None:
    fabric = Fabric(3)
    fabric.on_hosts = True
    workers = _workers(fabric, op)
    arrays = [np.array([INT32_MAX, INT32_MIN, -1, 7] * 200, dtype=np.int32) * (r % 2)
              + np.arange(800, dtype=np.int32) * r for r in range(3)]
    results = _exact(_call_all(workers, arrays), op, arrays)
    assert all(r.on_hosts for r in results)
    assert [w.stats.on_hosts for w in workers] == [1, 1, 1]
    assert not any(r.overflow for r in results) or op == Op.SUM


def test_an_impostor_at_a_workers_ring_port_is_refused_counted_and_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    fabric = Fabric(3)
    fabric.on_hosts = True
    workers = _workers(fabric)
    arrays = _arrays(3, 2 * P)
    outcomes: dict[int, AllreduceResult | Exception] = {}

    def call(rank: int) -> None:
        try:
            outcomes[rank] = workers[rank].allreduce(arrays[rank])
        except Exception as exc:  # noqa: BLE001 (checked below)
            outcomes[rank] = exc

    threads = [threading.Thread(target=call, args=(r,)) for r in range(3)]
    threads[1].start()  # w2 first: the impostor reaches its ring port before w1 does
    address = workers[1].config.ring_address(1)
    deadline = time.monotonic() + 10
    while True:
        try:
            impostor = socket.create_connection(address, 10, ("127.0.0.99", 0))
            break
        except ConnectionRefusedError:  # w2 is still starting its call
            assert time.monotonic() < deadline, f"w2 never listened on {address}"
            time.sleep(0.01)
    with impostor:
        impostor.sendall(struct.pack("!IH", JOB, 0) + b"\0" * 64)  # "job 9, rank 0 (w1)"
        for r in (0, 2):
            threads[r].start()
        for t in threads:
            t.join(30)
    _exact([outcomes[r] for r in range(3)], Op.SUM, arrays)
    assert [w.stats.ring_refused for w in workers] == [0, 1, 0]
    assert "w2: the ring on hosts refused a connection (127.0.0.99" in caplog.text


def test_a_sum_on_hosts_flags_an_overflow_as_the_switches_do() -> None:
    fabric = Fabric(3)
    fabric.on_hosts = True
    workers = _workers(fabric)
    wraps = [np.full(2 * P, INT32_MAX, dtype=np.int32)] * 3  # every partial sum wraps
    assert all(r.overflow for r in _exact(_call_all(workers, wraps), Op.SUM, wraps))
    fits = [np.full(2 * P, 2**29, dtype=np.int32)] * 3  # no partial sum does
    assert not any(r.overflow for r in _exact(_call_all(workers, fits), Op.SUM, fits))


def test_a_float_call_on_hosts_is_within_its_bound() -> None:
    fabric = Fabric(3)
    fabric.on_hosts = True
    workers = _workers(fabric)
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(P + 5).astype(np.float32) for _ in range(3)]
    results = _results(_call_all(workers, arrays))
    exact = arrays[0].astype(np.float64) + arrays[1] + arrays[2]
    for r in results:
        assert r.on_hosts and r.error_bound is not None
        assert np.array_equal(r.values, results[0].values)
        assert np.all(np.abs(r.values - exact) <= r.error_bound)


def test_on_hosts_mid_call_the_call_runs_again_on_hosts_and_the_next_syncs_again() -> None:
    fabric = Fabric(3)
    workers = _workers(fabric)

    def hook(h: InaHeader) -> None:
        if h.seq == 3:
            fabric.on_hosts = True

    fabric.hook = hook
    arrays = _arrays(3, 6 * P)
    results = _exact(_call_all(workers, arrays), Op.SUM, arrays)
    assert all(r.on_hosts for r in results)
    assert [w.continuation for w in workers] == [7, 7, 7]  # as on switches: 0..6
    # Back on switches (a new plan): the next call SYNCs and runs in the network.
    fabric.hook, fabric.on_hosts = (lambda h: None), False
    fabric.replan()
    arrays = _arrays(3, P, seed=2)
    results = _exact(_call_all(workers, arrays), Op.SUM, arrays)
    assert not any(r.on_hosts for r in results)
    assert [h.seq for _, h in fabric.sent if h.flags == Flag.SYNC][-3:] == [7, 7, 7]


def test_workers_on_hosts_in_different_calls_fail_saying_so() -> None:
    fabric = Fabric(2)
    fabric.on_hosts = True
    workers = _workers(fabric, timeout=2.0)
    workers[0].continuation, workers[1].continuation = 10, 20
    outcomes = _call_all(workers, _arrays(2, P))
    for o in outcomes:
        assert isinstance(o, AllreduceError) and "in different calls" in str(o)


def test_a_worker_alone_on_hosts_times_out_saying_which_peers_to_check() -> None:
    fabric = Fabric(2)
    fabric.on_hosts = True
    worker = _workers(fabric, timeout=0.3)[0]
    with pytest.raises(AllreduceError, match="could not join the ring on hosts.*w1, w2"):
        worker.allreduce(np.arange(P))


# --- the config from job files -------------------------------------------------------


def test_a_planned_job_file_configures_a_worker_that_sends_to_its_edge_switch() -> None:
    config = WorkerConfig.from_files(ROOT / "topologies/figure1.yaml",
                                     ROOT / "jobs/figure1-planned.yaml", "w3")
    assert (config.job_id, config.op, config.target, config.sync_target) == (
        2, Op.SUM, "10.0.100.2", "10.0.100.2")  # s2's loopback, w3's edge switch
    assert (config.window, config.workers, config.rank) == (32, 4, 2)  # the file's slots
    assert config.peers == ("w1", "w2", "w3", "w4")
    assert config.addresses == ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4")
    assert config.pbm == bit_of(3)
    assert config.ring_address(1) == ("10.0.0.2", ring_port(2, 1))


def test_a_job_file_with_its_vat_also_sends_to_the_edge_switch() -> None:
    config = WorkerConfig.from_files(ROOT / "topologies/figure1.yaml",
                                     ROOT / "jobs/figure1-sum.yaml", "w3", ring_port=30000)
    assert config.target == "10.0.100.2"  # s2, not its parent s7
    assert config.ring_address(3) == ("10.0.0.4", 30003)


def test_ring_ports_are_one_per_rank_and_apart_for_other_jobs() -> None:
    ports = {ring_port(job, rank) for job in range(RING_JOBS) for rank in range(RING_RANKS)}
    assert len(ports) == RING_JOBS * RING_RANKS
    assert min(ports) == INA_UDP_PORT + 1000 and max(ports) < 32768  # below ephemeral ports
