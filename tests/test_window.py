"""The window a job can be in (reference model, real Worker objects in threads): one
packet from a member must not freeze its job. The root takes a contribution only
within what a call can have sent (its progress P: from P - 2W to P + 3W, a call's
first W packets going together) and an ABORT no further than P + 3W, both only once
a call of the plan has started; a
node below the root replaces a stray round with the job's next round in that
cell; a count or op foreign to a round is refused. After each, the job's next
call is exact."""

from __future__ import annotations

import asyncio
import time
from functools import partial

from ina.host.config import WorkerConfig
from ina.host.results import AllreduceResult
from ina.host.sync import sync_answer, sync_request
from ina.host.worker import Worker
from ina.protocol.arith import seq_add
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, InaPacket, ina_payload
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import Flag, JobStat, Op
from ina.spec.job import Job

from inatest import (
    ModelLab,
    assert_exact,
    in_threads,
    int_arrays,
    model_workers,
    open_call,
)

ROOT_IP = "10.0.100.6"  # s6, the root of the jobs below
#: Figure 1 with w1 and w2 sending to the root s6 directly (s7 aggregates w3, w4).
ROOT_PARENT = {"aggregators": {"s7": ["w3", "w4"]}}


def _call(lab: ModelLab, job: Job, workers: dict[str, Worker], seed: int,
          size: int = P * 3) -> None:
    """A call of every worker, exact at each."""
    arrays = int_arrays(job, size, seed=seed)
    outcomes = in_threads({w: partial(workers[w].allreduce, arrays[w]) for w in job.workers})
    results = {}
    for w, outcome in outcomes.items():
        assert isinstance(outcome, AllreduceResult), (w, outcome)
        results[w] = outcome.values
    assert_exact(job, arrays, results)


def _progress(workers: dict[str, Worker]) -> int:
    """The root's progress after a completed call: its last sequence number."""
    (after,) = {w.continuation for w in workers.values()}
    assert after is not None
    return seq_add(after, -1)


def _from_w1(lab: ModelLab, dst: str, header: InaHeader, values: tuple[int, ...] = ()) -> None:
    payload = InaPacket(header, values).pack() if values else header.pack()
    lab.net.host_send_payload("w1", dst, payload)


def _abort(seq: int) -> InaHeader:
    return InaHeader(job_id=1, seq=seq, pbm=bit_of(1), count=0, flags=Flag.SYNC | Flag.ABORT)


def _contribution(seq: int, count: int = 1, op: Op = Op.SUM, pbm: int = bit_of(1)) -> InaHeader:
    return InaHeader(job_id=1, seq=seq, pbm=pbm, count=count, op=op)


def _stat(lab: ModelLab, switch: str, stat: JobStat) -> int:
    stats = asyncio.run(lab.ctl.status())[switch].job_stats[1]
    return stats[stat].packets if stat in stats else 0


def test_an_abort_far_ahead_is_dropped_and_the_next_call_is_exact(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    workers = model_workers(model_lab, job, timeout=2.0)
    _call(model_lab, job, workers, seed=1)
    _from_w1(model_lab, ROOT_IP, _abort(seq_add(_progress(workers), 2**31 - 1)))
    _call(model_lab, job, workers, seed=2)
    assert _stat(model_lab, "s6", JobStat.DROP_ABORT_AHEAD) == 1
    assert _stat(model_lab, "s6", JobStat.ABORTED) == 0


def test_an_abort_moves_the_next_call_no_further_than_a_call_reaches(
        model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    workers = model_workers(model_lab, job)
    _call(model_lab, job, workers, seed=3)
    progress = _progress(workers)
    _from_w1(model_lab, ROOT_IP, _abort(seq_add(progress, 3 * job.slots + 1)))  # one too far
    _from_w1(model_lab, ROOT_IP, _abort(seq_add(progress, 3 * job.slots)))  # as far as it goes
    assert _stat(model_lab, "s6", JobStat.DROP_ABORT_AHEAD) == 1
    assert _stat(model_lab, "s6", JobStat.ABORTED) == 1
    replies = in_threads({w: workers[w]._start for w in job.workers})
    assert {r.seq for r in replies.values() if not isinstance(r, Exception)} == {
        seq_add(progress, 3 * job.slots + 2 * job.slots + 1)}


def test_an_abort_before_any_call_of_the_plan_is_dropped(model_lab: ModelLab) -> None:
    # It would make the first SYNC of the plan look like a later one.
    job = model_lab.deploy_figure1()
    _from_w1(model_lab, ROOT_IP, _abort(12345))
    assert _stat(model_lab, "s6", JobStat.DROP_ABORT_AHEAD) == 1
    workers = model_workers(model_lab, job)
    _call(model_lab, job, workers, seed=4)
    assert _progress(workers) == 3  # the call started at the first SYNC's proposal, 0


def test_a_contribution_far_ahead_at_the_root_is_dropped_and_the_next_call_is_exact(
        model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1(**ROOT_PARENT)
    workers = model_workers(model_lab, job, timeout=2.0)
    _call(model_lab, job, workers, seed=5)
    # In the cell of the next call's first packet, many laps ahead.
    start = seq_add(_progress(workers), 2 * job.slots + 1)
    _from_w1(model_lab, "10.0.100.6", _contribution(seq_add(start, 2 * job.slots * 2**20)), (7,))
    _call(model_lab, job, workers, seed=6)
    assert _stat(model_lab, "s6", JobStat.DROP_AHEAD) == 1
    # Two calls of four rounds (the descriptor, three packets): w1, w2 and s7 each.
    assert _stat(model_lab, "s6", JobStat.ABSORBED) == 2 * 4 * 3


def test_the_root_takes_what_a_call_can_reach_and_nothing_past_it(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1(**ROOT_PARENT)
    workers = model_workers(model_lab, job)
    _call(model_lab, job, workers, seed=7)
    progress = _progress(workers)
    # A call's first W packets, from P + 2W + 1 to P + 3W, may be sent together.
    _from_w1(model_lab, ROOT_IP, _contribution(seq_add(progress, 3 * job.slots)), (1,))
    _from_w1(model_lab, ROOT_IP, _contribution(seq_add(progress, 3 * job.slots + 1)), (1,))
    assert _stat(model_lab, "s6", JobStat.ABSORBED) == 4 * 3 + 1
    assert _stat(model_lab, "s6", JobStat.DROP_AHEAD) == 1


def test_a_contribution_before_the_window_at_the_root_is_stale(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1(**ROOT_PARENT)
    workers = model_workers(model_lab, job)
    _call(model_lab, job, workers, seed=8, size=P * 40)
    progress = _progress(workers)
    _from_w1(model_lab, ROOT_IP, _contribution(seq_add(progress, -2 * job.slots - 1)), (1,))
    assert _stat(model_lab, "s6", JobStat.DROP_STALE) == 1


def test_a_contribution_before_any_call_of_the_plan_is_dropped(model_lab: ModelLab) -> None:
    model_lab.deploy_figure1(**ROOT_PARENT)
    _from_w1(model_lab, ROOT_IP, _contribution(0), (1,))
    assert _stat(model_lab, "s6", JobStat.DROP_AHEAD) == 1
    assert _stat(model_lab, "s6", JobStat.ABSORBED) == 0


def test_a_round_far_ahead_below_the_root_gives_way_to_the_next_call(
        model_lab: ModelLab) -> None:
    # s1 aggregates w1 and w2 and cannot know the root's progress: w1's stray round
    # stays in s1's cell until the next call's round there replaces it.
    job = model_lab.deploy_figure1()
    workers = model_workers(model_lab, job, timeout=2.0)
    _call(model_lab, job, workers, seed=9)
    start = seq_add(_progress(workers), 2 * job.slots + 1)
    _from_w1(model_lab, "10.0.100.1", _contribution(seq_add(start, 2 * job.slots * 2**20)), (7,))
    assert _stat(model_lab, "s1", JobStat.ABSORBED) == 2 * (1 + 3) + 1
    _call(model_lab, job, workers, seed=10)
    assert _stat(model_lab, "s1", JobStat.DROP_STALE) == 0


def test_a_late_duplicate_a_lap_behind_below_the_root_is_stale(model_lab: ModelLab) -> None:
    model_lab.deploy_figure1(slots=1)
    _from_w1(model_lab, "10.0.100.1", _contribution(4), (1,))  # cell 0
    _from_w1(model_lab, "10.0.100.1", _contribution(2), (1,))  # a lap behind: stale
    _from_w1(model_lab, "10.0.100.1", _contribution(0), (1,))  # two laps: a new round
    assert _stat(model_lab, "s1", JobStat.DROP_STALE) == 1
    assert _stat(model_lab, "s1", JobStat.ABSORBED) == 2


def test_a_foreign_op_in_an_incomplete_cell_is_dropped_and_the_next_call_is_exact(
        model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1(**ROOT_PARENT)
    workers = model_workers(model_lab, job, timeout=2.0)
    _call(model_lab, job, workers, seed=11)
    seq = seq_add(_progress(workers), 1)  # w2 starts a round there: incomplete
    model_lab.net.host_send_payload("w2", ROOT_IP, InaPacket(
        _contribution(seq, count=2, pbm=bit_of(2)), (1, 2)).pack())
    _from_w1(model_lab, ROOT_IP, _contribution(seq, count=2, op=Op.MAX), (1, 2))
    assert _stat(model_lab, "s6", JobStat.DROP_OP_MISMATCH) == 1
    _call(model_lab, job, workers, seed=12)


def test_a_members_frame_with_a_corrupted_count_does_not_hold_up_the_call(
        model_lab: ModelLab) -> None:
    # w1's first chunk of the next call, its count byte corrupted, reaches s1 first:
    # the round it starts takes the others' chunks (a round takes no count), and the
    # call completes exact with no retransmission beyond the lost-result kind.
    job = model_lab.deploy_figure1()
    workers = model_workers(model_lab, job, timeout=30.0)
    _call(model_lab, job, workers, seed=13)
    (start,) = {w.next_start for w in workers.values()}
    assert start is not None
    arrays = int_arrays(job, P * 3, seed=14)
    own = tuple(int(v) for v in arrays["w1"][:P])
    _from_w1(model_lab, "10.0.100.1", _contribution(seq_add(start, 1), count=7), own)
    began = time.monotonic()
    outcomes = in_threads({w: partial(workers[w].allreduce, arrays[w]) for w in job.workers})
    assert time.monotonic() - began < 5.0  # not the call's 30 s timeout
    results = {}
    for w, outcome in outcomes.items():
        assert isinstance(outcome, AllreduceResult), (w, outcome)
        results[w] = outcome.values
    assert_exact(job, arrays, results)


def test_a_server_root_keeps_the_same_window() -> None:
    from ina.host.serverroot import ServerRoot
    from ina.spec.topology import Topology

    from inatest import FIGURE1, job_from

    topology = Topology.load(FIGURE1)
    job = job_from(topology, job_id=1, op="sum", workers=["w1", "w2"], root="w5",
                   aggregators={})
    root = ServerRoot(job, topology)

    def send(header: InaHeader, values: tuple[int, ...] = ()) -> None:
        root.accept(InaPacket(header, values).pack() if values else header.pack(), "10.0.0.1")

    send(_abort(7))  # before any call
    send(_contribution(0), (1,))
    assert (root.stats["abort_ahead"], root.stats["ahead"]) == (1, 1)
    send(InaHeader(job_id=1, seq=0, pbm=bit_of(1), count=1, flags=Flag.SYNC))  # a call at 0
    send(_contribution(0), (1,))  # the call's first packet
    send(_contribution(job.slots - 1), (1,))  # its W-th: the window's last
    send(_contribution(job.slots), (1,))
    send(_abort(2**30))
    send(_abort(0))
    assert (root.stats["absorbed"], root.stats["ahead"]) == (2, 2)
    assert (root.stats["aborted"], root.stats["abort_ahead"]) == (1, 2)
    assert root.completed == 0


def test_a_worker_that_lost_a_calls_last_results_gets_them_after_others_started_the_next(
        model_lab: ModelLab) -> None:
    # w4 lost the result of a call's round S (the first of its last W rounds); the
    # other workers got every result and started the next call at once. The next
    # call's rounds must not take the cells of rounds a worker may still lack, so
    # w4's retransmission of S still gets S's result back.
    job = model_lab.deploy_figure1()
    w = job.slots
    configs = {h: WorkerConfig.for_job(job, model_lab.topology, h) for h in job.workers}
    start = open_call(model_lab, job, proposal=1000)

    def contribute(host: str, seq: int) -> None:
        model_lab.net.host_send_payload(host, configs[host].target, ina_payload(
            1, seq, configs[host].pbm, [seq & 0xFF]))

    for seq in range(start, start + w):
        for host in job.workers:
            contribute(host, seq)
    for host in job.workers:
        model_lab.net.received_payloads(host)  # w4's result of `start` is "lost" here
    for host in ("w1", "w2", "w3"):  # the next call: its start, then its first round
        model_lab.net.host_send_payload(host, configs[host].sync_target,
                                        sync_request(configs[host], 2, 0))
        (nxt,) = [s for p in model_lab.net.received_payloads(host)
                  if (s := sync_answer(p, configs[host], 2)) is not None]
        contribute(host, nxt)
    contribute("w4", start)  # w4 retransmits
    results = [InaPacket.unpack(p) for p in model_lab.net.received_payloads("w4")]
    assert [(r.header.seq, r.meaningful) for r in results] == [(start, (4 * (start & 0xFF),))]
