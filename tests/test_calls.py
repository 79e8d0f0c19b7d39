"""A deployed job serves any number of AllReduce calls (reference model, real
Worker objects in threads): each call starts with a SYNC to the root, which
tells every worker the same first sequence number, and a descriptor barrier
that fails every worker clearly when they do not make the same call."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from functools import partial

import numpy as np
import pytest

from ina.errors import AllreduceError, AllreduceTimeout, CallMismatch
from ina.host.config import WorkerConfig
from ina.host.results import AllreduceResult
from ina.host.sync import SyncReply
from ina.host.worker import Worker
from ina.model.network import ModelTransport
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import Flag, JobStat, Op
from ina.protocol.frames import ina_frame
from ina.spec.job import Job

from inatest import ModelLab, assert_exact, figure1_job, in_threads, int_arrays, model_workers


def _call(lab: ModelLab, job: Job, arrays: dict[str, np.ndarray], timeout: float = 5.0,
          workers: dict[str, Worker] | None = None) -> dict[str, AllreduceResult | Exception]:
    workers = workers if workers is not None else model_workers(lab, job, timeout)
    return in_threads({w: partial(workers[w].allreduce, arrays[w]) for w in arrays})


def _starts(workers: dict[str, Worker]) -> set[int | Exception]:
    """The starts the workers' SYNCs, sent at once, are told."""
    replies = in_threads({w: workers[w]._start for w in workers})
    return {r.seq if isinstance(r, SyncReply) else r for r in replies.values()}


def _exact(outcomes: dict[str, AllreduceResult | Exception], job: Job,
           arrays: dict[str, np.ndarray]) -> None:
    results = {}
    for w, outcome in outcomes.items():
        assert isinstance(outcome, AllreduceResult), (w, outcome)
        results[w] = outcome.values
    assert_exact(job, arrays, results)


def test_the_same_workers_make_many_calls_without_a_redeploy(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    workers = model_workers(model_lab, job)
    for call in range(4):
        arrays = int_arrays(job, P * 3 + call, seed=call)
        _exact(_call(model_lab, job, arrays, workers=workers), job, arrays)


def test_new_worker_processes_make_the_next_call(model_lab: ModelLab) -> None:
    # As with one inaworker run per training step: nothing is kept between calls.
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    for call in range(3):
        arrays = int_arrays(job, P * 2 + 1, seed=10 + call)
        _exact(_call(model_lab, job, arrays), job, arrays)


def test_each_call_starts_past_every_sequence_number_of_the_last(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    workers = model_workers(model_lab, job)
    arrays = int_arrays(job, P * 40, seed=1)  # 41 packets, the descriptor included
    _call(model_lab, job, arrays, workers=workers)
    # Every worker is told the same start, twice the slots (16) + 1 past the last of 41.
    assert _starts(workers) == {40 + 2 * job.slots + 1}


def test_workers_that_disagree_on_the_call_all_fail_saying_so(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    arrays = int_arrays(job, P * 2, seed=2)
    arrays["w4"] = arrays["w4"][:P]
    outcomes = _call(model_lab, job, arrays)
    for w, outcome in outcomes.items():
        assert isinstance(outcome, CallMismatch), (w, outcome)
        assert f"array length from {P} to {2 * P}" in str(outcome)


def test_a_call_after_an_interrupted_one_is_exact(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    workers = model_workers(model_lab, job, timeout=0.5)
    # w4 never comes: the others give up on a call that could not start ...
    first = int_arrays(job, P * 5, seed=3)
    del first["w4"]
    assert all(isinstance(o, AllreduceTimeout) for o in _call(model_lab, job, first,
                                                               workers=workers).values())
    # ... and the next call, with everyone, is exact.
    arrays = int_arrays(job, P * 5, seed=4)
    _exact(_call(model_lab, job, arrays, workers=model_workers(model_lab, job)), job, arrays)


def test_a_worker_that_gives_up_tells_the_root_how_far_it_went(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    workers = model_workers(model_lab, job, timeout=0.3)
    first = int_arrays(job, P * 5, seed=3)
    del first["w4"]  # the call cannot start: w1..w3 give up at its barrier, seq 0
    _call(model_lab, job, first, workers=workers)
    stats = asyncio.run(model_lab.ctl.status())["s6"].job_stats[1]
    assert stats[JobStat.ABORTED].packets == 3 * 3  # three copies from each
    assert _starts(model_workers(model_lab, job)) == {0 + 2 * job.slots + 1}  # past the barrier


def _dead_call(lab: ModelLab, monkeypatch: pytest.MonkeyPatch,
               continuing: bool = False) -> Job:
    """Figure 1's job deployed, and a call of it that w1..w3 start, w4 never joins,
    and whose workers die without an ABORT (SIGKILL): their descriptors stay in the
    barrier's cells. ``continuing``: they completed a call before, so they sent the
    dead call's arrays with its descriptor, and those stay in the cells too."""
    job = figure1_job(lab.topology)
    lab.deploy(job)
    workers = model_workers(lab, job, timeout=0.3)
    if continuing:
        done = int_arrays(job, P * 5, seed=45)
        _exact(_call(lab, job, done, workers=workers), job, done)
    for w in workers.values():
        monkeypatch.setattr(w, "_abort", lambda: None)  # killed: no ABORT
    dead = int_arrays(job, P * 5, seed=30)
    del dead["w4"]
    assert all(isinstance(o, AllreduceTimeout)
               for o in _call(lab, job, dead, workers=workers).values())
    return job


def _new_processes_never_mix(lab: ModelLab, job: Job, seed: int) -> None:
    """A call of new processes after a dead one, from the same start: exact; or,
    where the dead descriptors completed its barrier without one of its workers',
    every worker fails, and the call after it is exact."""
    arrays = int_arrays(job, P * 5, seed=seed)
    outcomes = _call(lab, job, arrays)
    if not all(isinstance(o, AllreduceResult) for o in outcomes.values()):
        assert all(isinstance(o, AllreduceError) for o in outcomes.values()), outcomes
        arrays = int_arrays(job, P * 5, seed=seed + 1)
        outcomes = _call(lab, job, arrays)
    _exact(outcomes, job, arrays)


def test_a_call_after_one_whose_workers_were_killed_before_all_joined_never_mixes_in_its_array(
        model_lab: ModelLab, monkeypatch: pytest.MonkeyPatch) -> None:
    # New processes make a call of the dead call's shape from the same start: none of
    # the dead call's array may be in the cells they use (a fresh worker sends its
    # array only once its descriptor's result is back).
    # The dead call's descriptors may also complete the new call's barrier before
    # its last worker has asked where the call starts; that worker is then told a
    # later start, and the call fails at every worker, which gives it up with an
    # ABORT (docs/limits.md, "Workers and calls": one run in 15 to 25 here). Never a
    # wrong value, and the call after it is exact.
    _new_processes_never_mix(model_lab, _dead_call(model_lab, monkeypatch), seed=31)


def test_a_worker_that_asks_for_the_start_after_a_dead_calls_barrier_completed_fails_cleanly(
        model_lab: ModelLab, monkeypatch: pytest.MonkeyPatch) -> None:
    # The race of the test above, made certain: w3 asks where the new call starts
    # only once w1 sends its array (the barrier at seq 0 completed with the dead
    # call's descriptors of w1..w3 and the new one of w4).
    job = _dead_call(model_lab, monkeypatch)
    workers = model_workers(model_lab, job, timeout=1.0)
    array_sent = threading.Event()
    send = workers["w1"].transport.send

    def watched(payload: bytes, dst: str | None = None) -> None:
        header = InaHeader.unpack(payload)
        if not header.flags & Flag.SYNC and header.seq > 0:  # past the descriptor
            array_sent.set()
        send(payload, dst)

    monkeypatch.setattr(workers["w1"].transport, "send", watched)
    arrays = int_arrays(job, P * 5, seed=31)

    def late() -> AllreduceResult:
        assert array_sent.wait(5.0)
        return workers["w3"].allreduce(arrays["w3"])

    calls: dict[str, Callable[[], AllreduceResult]] = {
        w: partial(workers[w].allreduce, arrays[w]) for w in ("w1", "w2", "w4")}
    calls["w3"] = late
    outcomes = in_threads(calls)
    assert all(isinstance(o, AllreduceTimeout) for o in outcomes.values()), outcomes
    arrays = int_arrays(job, P * 5, seed=32)
    _exact(_call(model_lab, job, arrays), job, arrays)


def test_a_call_after_one_interrupted_mid_array_is_exact(
        model_lab: ModelLab, monkeypatch: pytest.MonkeyPatch) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    arrays = int_arrays(job, P * 60, seed=5)
    workers = model_workers(model_lab, job, timeout=0.5)
    sent = {"count": 0}
    transport = workers["w4"].transport
    send = transport.send

    def send_a_few(payload: bytes, dst: str | None = None) -> None:
        # w4 stops after its SYNC, the descriptor and 20 packets: cells below
        # the root keep partial sums of the interrupted call.
        if sent["count"] < 22:
            sent["count"] += 1
            send(payload, dst)

    monkeypatch.setattr(transport, "send", send_a_few)
    outcomes = _call(model_lab, job, arrays, workers=workers)
    assert all(isinstance(o, AllreduceTimeout) for o in outcomes.values())
    again = int_arrays(job, P * 60, seed=6)
    _exact(_call(model_lab, job, again, workers=model_workers(model_lab, job)), job, again)


def test_a_worker_alone_in_a_call_times_out_saying_the_call_did_not_start(
        model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    arrays = int_arrays(job, P, seed=7)
    _exact(_call(model_lab, job, arrays), job, arrays)
    (outcome,) = _call(model_lab, job, {"w1": arrays["w1"]}, timeout=0.3).values()
    assert isinstance(outcome, AllreduceTimeout)
    assert "the call did not start: not every worker of the job (w1, w2, w3, w4)" in str(outcome)


def test_a_float_call_follows_an_integer_call(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    workers = model_workers(model_lab, job)
    ints = int_arrays(job, P + 3, seed=8)
    _exact(_call(model_lab, job, ints, workers=workers), job, ints)
    rng = np.random.default_rng(9)
    floats = {w: rng.standard_normal(P + 3).astype(np.float32) for w in job.workers}
    outcomes = _call(model_lab, job, floats, workers=workers)
    exact = np.sum([floats[w].astype(np.float64) for w in job.workers], axis=0)
    for w, outcome in outcomes.items():
        assert isinstance(outcome, AllreduceResult) and outcome.error_bound is not None, w
        assert np.all(np.abs(outcome.values - exact) <= outcome.error_bound), w


def _sync(job_id: int, worker_bit: int, flags: Flag = Flag.SYNC) -> bytes:
    return InaHeader(job_id=job_id, seq=0, pbm=worker_bit, count=1234, op=Op.SUM,
                     flags=flags).pack()


def test_a_sync_crosses_the_vat_nodes_below_the_root_unabsorbed(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    model_lab.net.host_send_payload("w1", "10.0.100.6", _sync(1, bit_of(1)))
    stats = asyncio.run(model_lab.ctl.status())
    assert stats["s1"].job_stats[1][JobStat.PASSED].packets == 2  # there and back
    assert stats["s6"].job_stats[1][JobStat.SYNCED].packets == 1
    ((src, reply),) = model_lab.net.received_datagrams("w1")
    header = InaHeader.unpack(reply)
    assert src == "10.0.100.6" and header.flags == Flag.SYNC | Flag.REPLY and header.seq == 0


@pytest.mark.parametrize("node", ["s1", "s7"])
def test_a_sync_for_a_node_that_is_not_the_root_is_refused(model_lab: ModelLab,
                                                           node: str) -> None:
    # From a switch port: a worker's own SYNC is steered to the root by its edge.
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    topo = model_lab.topology
    nb = topo.ports(node)[1].node
    model_lab.net.inject(node, 1, ina_frame(topo.mac(nb), topo.switches[node].mac,
                                            topo.address(nb), topo.address(node),
                                            _sync(1, bit_of(1))))
    stats = asyncio.run(model_lab.ctl.status())
    assert stats[node].job_stats[1][JobStat.DROP_FOREIGN_PBM].packets == 1
    assert not model_lab.net.inbox["w1"]


def test_a_workers_sync_to_another_node_is_steered_to_the_root(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    model_lab.net.host_send_payload("w1", "10.0.100.7", _sync(1, bit_of(1)))
    stats = asyncio.run(model_lab.ctl.status())
    assert stats["s6"].job_stats[1][JobStat.SYNCED].packets == 1
    assert stats["s7"].job_stats[1][JobStat.DROP_FOREIGN_PBM].packets == 0
    ((src, _),) = model_lab.net.received_datagrams("w1")
    assert src == "10.0.100.6"


def test_a_reply_forged_by_a_worker_is_dropped_at_its_edge(model_lab: ModelLab) -> None:
    from ina.protocol.constants import SwitchStat

    from inatest import switch_stat

    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    model_lab.net.host_send_payload("w1", "10.0.0.2", _sync(1, bit_of(1),
                                                            Flag.SYNC | Flag.REPLY))
    assert switch_stat(model_lab, "s1", SwitchStat.DROP_FORGED_PBM) == 1
    assert not model_lab.net.inbox["w2"]


# --- a call's array with its descriptor (a worker that completed the call before) ----


def _packets(workers: dict[str, Worker]) -> dict[str, int]:
    return {w: worker.stats.packets for w, worker in workers.items()}


def _sent_in_exact_call(lab: ModelLab, job: Job, workers: dict[str, Worker],
                        arrays: dict[str, np.ndarray]) -> set[int]:
    """The packets each worker sent in the call (SYNCs aside), once it is exact."""
    before = _packets(workers)
    _exact(_call(lab, job, arrays, workers=workers), job, arrays)
    return {workers[w].stats.packets - before[w] for w in workers}


def _agreeing(workers: dict[str, Worker]) -> dict[str, float]:
    return {w: worker.stats.seconds.get("agreeing on the call", 0.0)
            for w, worker in workers.items()}


def test_a_call_after_a_completed_one_sends_its_array_with_its_descriptor(
        model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    workers = model_workers(model_lab, job)
    assert _sent_in_exact_call(model_lab, job, workers, int_arrays(job, P * 3, seed=40)) \
        == {1 + 3}  # the descriptor's round trip, then the array
    waited = _agreeing(workers)
    assert all(waited.values())
    assert _sent_in_exact_call(model_lab, job, workers, int_arrays(job, P * 3, seed=41)) \
        == {1 + 3}  # one window
    assert _agreeing(workers) == waited


def test_a_restarted_worker_among_continuing_ones_makes_the_call_exactly(
        model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    workers = model_workers(model_lab, job)
    _sent_in_exact_call(model_lab, job, workers, int_arrays(job, P * 3, seed=42))
    config = WorkerConfig.for_job(job, model_lab.topology, "w2")
    workers["w2"] = Worker(config, ModelTransport(model_lab.net, "w2", config.target))
    # The others' arrays went with the descriptor; w2 fills their chunks with zeros,
    # then every worker sends its array after them.
    assert _sent_in_exact_call(model_lab, job, workers, int_arrays(job, P * 3, seed=43)) \
        == {1 + 2 * 3}
    assert _sent_in_exact_call(model_lab, job, workers, int_arrays(job, P * 3, seed=44)) \
        == {1 + 3}


def test_a_call_of_new_processes_after_a_continuing_call_killed_before_all_joined_never_mixes(
        model_lab: ModelLab, monkeypatch: pytest.MonkeyPatch) -> None:
    # w1..w3 completed a call, so they send their next call's array with its
    # descriptor; w4 never joins it and they die without an ABORT: their arrays stay
    # in the cells. New processes start where they did; the descriptor's result
    # shows that some worker sent its array early, so the arrays go past the dead
    # call's chunks.
    job = _dead_call(model_lab, monkeypatch, continuing=True)
    _new_processes_never_mix(model_lab, job, seed=47)
