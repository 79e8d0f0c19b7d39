"""QUERY (INA version 7): before a worker sends a chunk's values again, it asks the node
that holds its bit whether it holds them. HELD: the node has them, in a round waiting
for others (the worker waits); SEND: it lacks them, or the round is complete (the
worker sends them). So a round that lost one contribution gets one copy of values,
from that contribution's worker, not one from every worker."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ina.host.config import WorkerConfig
from ina.host.flow import Flow
from ina.host.window import ReductionWindow
from ina.model.harness import run_sessions
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, InaPacket, ina_payload
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import ETHERTYPE_BIER, QUERY, Flag, JobStat, Op, QueryVerdict
from ina.spec.job import Job

from inatest import ModelLab, assert_exact, int_arrays, open_call

S1_IP = "10.0.100.1"  # s1: the VAT node of w1 and w2 in Figure 1's job


def _query(seq: int, bfr_id: int = 1, count: int = 1) -> bytes:
    return InaHeader(job_id=1, seq=seq, pbm=bit_of(bfr_id), count=count,
                     flags=QUERY).pack()


def _answers(lab: ModelLab, host: str) -> list[InaHeader]:
    return [InaHeader.unpack(p) for p in lab.net.received_payloads(host)]


QUERY_STATS = (JobStat.QUERIED, JobStat.QUERY_HELD, JobStat.QUERY_UP)


def _query_stats(lab: ModelLab, wanted: tuple[JobStat, ...] = QUERY_STATS
                 ) -> dict[str, dict[JobStat, int]]:
    """Job 1's ``wanted`` counters (the query counters) that are not zero, per switch."""
    status = asyncio.run(lab.ctl.status())
    out = {sw: {k: v.packets for k, v in s.job_stats[1].items() if k in wanted
                and v.packets} for sw, s in status.items() if 1 in s.job_stats}
    return {sw: stats for sw, stats in out.items() if stats}


def _ask_after(lab: ModelLab, contributors: tuple[str, ...]) -> InaHeader:
    """A call opened, ``contributors``' contributions to its first round, then w1's
    QUERY about that round: the one answer w1 got."""
    job = lab.deploy_figure1()
    seq = open_call(lab, job)
    _contribute(lab, job, seq, contributors)
    lab.net.host_send_payload("w1", S1_IP, _query(seq))
    (answer,) = _answers(lab, "w1")
    assert answer.flags == QUERY | Flag.REPLY and answer.seq == seq
    return answer


def _contribute(lab: ModelLab, job: Job, seq: int, workers: tuple[str, ...]) -> None:
    for w in workers:
        lab.net.host_send_payload(w, job.target_of(w, lab.topology),
                                  ina_payload(1, seq, job.worker_bit[w], [5]))
    for w in job.workers:
        lab.net.received_payloads(w)  # the results, if the round completed


def test_a_query_for_a_held_contribution_is_answered_held(model_lab: ModelLab) -> None:
    answer = _ask_after(model_lab, ("w1",))
    assert answer.count == QueryVerdict.HELD
    assert _query_stats(model_lab) == {"s1": {JobStat.QUERIED: 1, JobStat.QUERY_HELD: 1}}


def test_a_query_for_a_missing_contribution_is_answered_send(model_lab: ModelLab) -> None:
    answer = _ask_after(model_lab, ("w2",))
    assert answer.count == QueryVerdict.SEND
    assert _query_stats(model_lab) == {"s1": {JobStat.QUERIED: 1}}


def test_a_round_complete_below_the_root_is_asked_of_the_parent(model_lab: ModelLab) -> None:
    answer = _ask_after(model_lab, ("w1", "w2"))  # s1's partial is at the root s6
    assert answer.count == QueryVerdict.HELD
    assert _query_stats(model_lab) == {
        "s1": {JobStat.QUERY_UP: 1}, "s6": {JobStat.QUERIED: 1, JobStat.QUERY_HELD: 1}}


def test_a_round_whose_result_passed_its_node_is_answered_send_there(
        model_lab: ModelLab) -> None:
    answer = _ask_after(model_lab, ("w1", "w2", "w3", "w4"))  # the result kept at s1
    assert answer.count == QueryVerdict.SEND
    assert _query_stats(model_lab) == {"s1": {JobStat.QUERIED: 1}}


def _losing_results_at(lab: ModelLab, switch: str) -> None:
    """``switch`` loses every result that comes down to it (BIER, on its port 1)."""
    model = lab.net.switches[switch]
    process = model.process

    def lossy(port: int, raw: bytes) -> list[tuple[int, bytes]]:
        if port == 1 and raw[12:14] == ETHERTYPE_BIER.to_bytes(2, "big"):
            return []
        return process(port, raw)

    model.process = lossy  # type: ignore[method-assign,assignment]


def test_a_round_whose_result_was_lost_above_its_node_is_asked_of_the_root(
        model_lab: ModelLab) -> None:
    _losing_results_at(model_lab, "s1")
    answer = _ask_after(model_lab, ("w1", "w2", "w3", "w4"))
    assert answer.count == QueryVerdict.SEND
    assert _query_stats(model_lab) == {"s1": {JobStat.QUERY_UP: 1}, "s6": {JobStat.QUERIED: 1}}


RESEND_STATS = (JobStat.RESENT, JobStat.MULTICAST, JobStat.EMITTED)


def test_values_sent_again_for_a_kept_result_are_answered_by_the_node_alone(
        model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    seq = open_call(model_lab, job)
    _contribute(model_lab, job, seq, job.workers)  # complete: s1 and s7 keep the result
    before = _query_stats(model_lab, RESEND_STATS)
    model_lab.net.host_send_payload("w1", S1_IP, ina_payload(1, seq, job.worker_bit["w1"], [5]))
    (result,) = _answers(model_lab, "w1")
    assert result.flags & Flag.RESULT and result.seq == seq
    assert all(_answers(model_lab, w) == [] for w in ("w2", "w3", "w4"))
    after = _query_stats(model_lab, RESEND_STATS)
    assert after["s1"] == {**before["s1"], JobStat.RESENT: 1,
                           JobStat.MULTICAST: before["s1"].get(JobStat.MULTICAST, 0) + 1}
    assert after["s6"] == before["s6"]  # the root was not asked


def test_a_kept_result_is_the_roots_result(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    seq = open_call(model_lab, job)
    for w in job.workers:
        model_lab.net.host_send_payload(w, job.target_of(w, model_lab.topology),
                                        ina_payload(1, seq, job.worker_bit[w], [5, -2, 7]))
    (first,) = model_lab.net.received_payloads("w2")
    model_lab.net.received_payloads("w1")
    model_lab.net.host_send_payload("w1", S1_IP,
                                    ina_payload(1, seq, job.worker_bit["w1"], [5, -2, 7]))
    (again,) = model_lab.net.received_payloads("w1")
    assert InaPacket.unpack(again).values[:3] == InaPacket.unpack(first).values[:3] == \
        (20, -8, 28)


def test_a_query_writes_nothing_and_the_round_completes_as_before(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    seq = open_call(model_lab, job)
    model_lab.net.host_send_payload("w1", S1_IP, _query(seq))  # before any contribution
    model_lab.net.received_payloads("w1")
    arrays = int_arrays(job, P)
    sessions = {w: ReductionWindow(WorkerConfig.for_job(job, model_lab.topology, w),
                                   arrays[w], seq) for w in job.workers}
    run_sessions(model_lab.net, sessions)
    assert_exact(job, arrays, {w: s.result for w, s in sessions.items()})


def test_a_query_as_another_worker_is_dropped_at_the_edge(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    seq = open_call(model_lab, job)
    model_lab.net.host_send_payload("w1", S1_IP, _query(seq, bfr_id=2))
    assert _answers(model_lab, "w1") == [] and _answers(model_lab, "w2") == []


def test_only_the_worker_whose_contribution_was_lost_sends_its_values_again(
        model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    seq = open_call(model_lab, job)
    arrays = int_arrays(job, 8 * P)
    sessions = {w: ReductionWindow(WorkerConfig.for_job(job, model_lab.topology, w),
                                   arrays[w], seq) for w in job.workers}
    net, send = model_lab.net, model_lab.net.host_send_payload
    lost: list[int] = []

    def lossy(host: str, dst: str, payload: bytes) -> None:
        header = InaHeader.unpack(payload)
        if host == "w3" and header.seq == seq and not header.flags and not lost:
            lost.append(header.seq)  # w3's first contribution to the first round
            return
        send(host, dst, payload)

    net.host_send_payload = lossy  # type: ignore[method-assign,assignment]
    run_sessions(net, sessions)
    assert lost == [seq]
    assert_exact(job, arrays, {w: s.result for w, s in sessions.items()})
    assert {w: s.retransmissions for w, s in sessions.items()} == {
        "w1": 0, "w2": 0, "w3": 1, "w4": 0}
    assert all(s.queries >= 1 for s in sessions.values())
    assert sum(s.held_answers for s in sessions.values()) >= 3


# --- the window, without a network ---------------------------------------------------


def _window(flow: Flow | None = None, chunks: int = 2) -> ReductionWindow:
    config = WorkerConfig(job_id=1, op=Op.SUM, pbm=bit_of(1), target=S1_IP, window=8,
                          root="10.0.100.6")
    return ReductionWindow(config, np.arange(chunks * P, dtype=np.int32), seq_base=10,
                           rto=0.1, flow=flow)


def _answer(seq: int, verdict: QueryVerdict) -> bytes:
    return InaHeader(job_id=1, seq=seq, pbm=bit_of(1), count=int(verdict),
                     flags=QUERY | Flag.REPLY).pack()


def _timed_out(window: ReductionWindow) -> list[bytes]:
    """What the window sends once its oldest chunk's RTO has passed."""
    window.packets_to_send(0.0)
    due = window.next_timer()
    assert due is not None
    return window.packets_to_send(due)


def test_a_chunk_with_values_goes_again_as_a_query_first() -> None:
    window = _window()
    (again,) = _timed_out(window)
    header = InaHeader.unpack(again)
    assert len(again) == len(header.pack()) and header.flags == QUERY
    assert (header.seq, header.count, header.pbm) == (10, P, bit_of(1))
    assert window.queries == 1 and window.retransmissions == 0


def test_held_the_chunk_waits_a_full_rto_and_sends_nothing() -> None:
    window = _window()
    _timed_out(window)
    now = window.sent_at(0) + 0.01
    assert window.answer(_answer(10, QueryVerdict.HELD), now)
    assert window.packets_to_send(now) == []
    due = window.next_timer()
    assert due is not None and due >= now + 0.1
    assert window.held_answers == 1


def test_send_the_values_go_at_once() -> None:
    window = _window()
    _timed_out(window)
    now = window.sent_at(0) + 0.01
    assert window.answer(_answer(10, QueryVerdict.SEND), now)
    (again,) = window.packets_to_send(now)
    assert InaHeader.unpack(again).flags == Flag.NONE and len(again) > 100
    assert window.retransmissions == 1


def test_an_unanswered_query_is_followed_by_the_values() -> None:
    window = _window()
    _timed_out(window)
    due = window.next_timer()
    assert due is not None
    (again,) = window.packets_to_send(due)
    assert InaHeader.unpack(again).flags == Flag.NONE and window.retransmissions == 1


def test_another_jobs_or_a_notices_answer_is_not_taken() -> None:
    window = _window()
    _timed_out(window)
    other_job = InaHeader(job_id=2, seq=10, pbm=bit_of(1), count=1,
                          flags=QUERY | Flag.REPLY).pack()
    replan = InaHeader(job_id=1, seq=10, pbm=bit_of(1), count=1,
                       flags=QUERY | Flag.REPLY | Flag.REPLAN).pack()
    assert not window.answer(other_job, 0.2) and not window.answer(replan, 0.2)


@pytest.mark.parametrize("flow", [
    Flow(counts=np.full(2, P), data=np.zeros(2, dtype=bool)),  # NODATA contributions
    Flow(counts=np.full(2, P), owners=np.full(2, 1, dtype=np.int64)),  # owned chunks
], ids=["nodata", "owned"])
def test_a_chunk_without_values_of_this_worker_goes_again_as_it_was(flow: Flow) -> None:
    window = _window(flow)
    first = window.packets_to_send(0.0)
    due = window.next_timer()
    assert due is not None
    again = window.packets_to_send(due)
    assert again and all(not InaHeader.unpack(p).flags & Flag.SYNC for p in again)
    assert again[-1] == first[len(first) // 2 - 1] or again[-1] in first
    assert window.queries == 0
