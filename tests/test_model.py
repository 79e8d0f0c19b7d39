"""Figure 1 on the reference model: results, counters, and bad packets.

The model runs the same plan the controller installs on BMv2, so these tests
pin the data plane's semantics without BMv2; tests/bmv2 checks BMv2 agrees.
"""

import asyncio
from functools import partial

import numpy as np
import pytest

from ina.errors import AllreduceError
from ina.host.config import WorkerConfig
from ina.host.results import AllreduceResult
from ina.host.window import ReductionWindow
from ina.model.harness import allreduce_on_model, reduce_arrays, run_sessions
from ina.model.network import Impairment
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, InaPacket, ina_payload
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import Flag, JobStat, Op, SwitchStat
from ina.protocol.frames import Bier, bier_frame, ina_frame
from ina.spec.job import Job

from inatest import (
    ModelLab,
    assert_exact,
    figure1_job,
    in_threads,
    int_arrays,
    model_workers,
    open_call,
    session_results,
    switch_stat,
)


def _allreduce(lab: ModelLab, job: Job, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return session_results(allreduce_on_model(lab.net, job, arrays))


def _job_stats(lab: ModelLab, job_id: int) -> dict[str, dict[JobStat, int]]:
    status = asyncio.run(lab.ctl.status())
    return {sw: {k: v.packets for k, v in s.job_stats[job_id].items() if v.packets}
            for sw, s in status.items() if job_id in s.job_stats}


@pytest.mark.parametrize("op", ["sum", "min", "max"])
def test_figure1_result_is_exact_at_every_worker(model_lab: ModelLab, op: str) -> None:
    job = model_lab.deploy_figure1(op=op)
    arrays = int_arrays(job, 200)
    results = _allreduce(model_lab, job, arrays)
    assert_exact(job, arrays, results)


def test_hosts_outside_the_job_receive_nothing(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    _allreduce(model_lab, job, int_arrays(job, 100))
    assert {h: len(model_lab.net.inbox[h]) for h in ("w5", "w6", "w7", "w8")} == {
        "w5": 0, "w6": 0, "w7": 0, "w8": 0}


def test_counters_show_the_drafts_walkthrough(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    _allreduce(model_lab, job, int_arrays(job, P * 3))  # three packets per worker
    stats = _job_stats(model_lab, job.job_id)
    rounds = 1 + 3  # the call's descriptor, then the array
    assert stats["s1"][JobStat.ABSORBED] == 2 * rounds
    assert stats["s1"][JobStat.EMITTED] == rounds
    assert stats["s7"][JobStat.ABSORBED] == 2 * rounds
    assert stats["s7"][JobStat.EMITTED] == rounds
    # s1's partial results on their way to s6, and the four SYNCs to s6 and back.
    assert stats["s7"][JobStat.PASSED] == rounds + 4 * 2
    assert stats["s6"][JobStat.ABSORBED] == 2 * rounds
    assert stats["s6"][JobStat.MULTICAST] == rounds
    assert stats["s6"][JobStat.SYNCED] == 4
    assert stats["s5"][JobStat.TRANSIT] == 3 * rounds + 4 * 2
    assert stats["s2"][JobStat.TRANSIT] == 2 * rounds + 2 * 2
    assert stats["s1"][JobStat.DELIVERED] == 2 * rounds
    assert stats["s2"][JobStat.DELIVERED] == 2 * rounds


def test_results_are_copied_only_toward_the_jobs_workers(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    _allreduce(model_lab, job, int_arrays(job, P * 3))
    pruned = {sw: switch_stat(model_lab, sw, SwitchStat.BIER_COPY_PRUNED)
              for sw in model_lab.topology.switches}
    assert pruned == {sw: 0 for sw in model_lab.topology.switches}


def _second_job(lab: ModelLab) -> Job:
    """Workers w2, w5, w7 rooted at s7, with s6 aggregating w5 and w7."""
    return figure1_job(lab.topology, job_id=2, workers=["w2", "w5", "w7"], root="s7",
                       aggregators={"s6": ["w5", "w7"]})


def _assert_exact(lab: ModelLab, job: Job) -> None:
    arrays = int_arrays(job, 130, seed=3)
    assert_exact(job, arrays, _allreduce(lab, job, arrays))


def test_a_second_job_is_exact_while_the_first_is_deployed(model_lab: ModelLab) -> None:
    model_lab.deploy_figure1()
    second = _second_job(model_lab)
    model_lab.deploy(second)
    _assert_exact(model_lab, second)
    _assert_exact(model_lab, figure1_job(model_lab.topology))


def test_a_second_job_is_exact_after_the_first_is_torn_down(model_lab: ModelLab) -> None:
    model_lab.deploy_figure1()
    asyncio.run(model_lab.ctl.teardown(1))
    second = _second_job(model_lab)
    model_lab.deploy(second)
    _assert_exact(model_lab, second)


def _send(lab: ModelLab, host: str, dst: str, payload: bytes) -> None:
    lab.net.host_send_payload(host, dst, payload)


def _from_switch(lab: ModelLab, switch: str, port: int, dst: str, payload: bytes) -> None:
    """An INA packet arriving from the neighbour switch on ``port`` (hosts cannot
    reach the VAT checks with such packets: their edge switch stops them first)."""
    me = lab.topology.switches[switch]
    neighbour = lab.topology.ports(switch)[port].node
    lab.net.inject(switch, port, ina_frame(lab.topology.mac(neighbour), me.mac,
                                           lab.topology.address(neighbour), dst, payload))


def test_unknown_job_addressed_to_a_switch_is_dropped_and_counted(model_lab: ModelLab) -> None:
    _from_switch(model_lab, "s6", 1, "10.0.100.6", ina_payload(99, 0, bit_of(1), [1]))
    assert switch_stat(model_lab, "s6", SwitchStat.DROP_UNKNOWN_JOB) == 1


def test_foreign_pbm_is_dropped_at_the_vat_node(model_lab: ModelLab) -> None:
    model_lab.deploy_figure1()
    _from_switch(model_lab, "s6", 1, "10.0.100.6", ina_payload(1, 0, bit_of(5), [7]))
    _from_switch(model_lab, "s6", 1, "10.0.100.6", ina_payload(1, 0, bit_of(1) | bit_of(6), [7]))
    assert _job_stats(model_lab, 1)["s6"] == {JobStat.DROP_FOREIGN_PBM: 2}


def test_a_host_outside_the_job_is_stopped_at_its_edge(model_lab: ModelLab) -> None:
    model_lab.deploy_figure1()
    _send(model_lab, "w5", "10.0.100.6", ina_payload(1, 0, bit_of(5), [7]))
    assert switch_stat(model_lab, "s3", SwitchStat.DROP_NOT_MEMBER) == 1


def test_forged_pbm_from_a_host_is_dropped_at_its_edge(model_lab: ModelLab) -> None:
    model_lab.deploy_figure1()
    _send(model_lab, "w5", "10.0.100.6", ina_payload(1, 0, bit_of(1), [7]))
    assert switch_stat(model_lab, "s3", SwitchStat.DROP_FORGED_PBM) == 1


def test_bad_packets_change_no_result(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    truncated = ina_payload(1, 0, bit_of(1), [10**6])[:-20]
    no_values = InaPacket(InaHeader(job_id=1, seq=0, pbm=bit_of(1), count=0), ()).pack()
    _send(model_lab, "w1", "10.0.100.1", truncated)
    _send(model_lab, "w1", "10.0.100.1", no_values)
    _send(model_lab, "w5", "10.0.100.6", ina_payload(1, 0, bit_of(5), [10**6]))
    _send(model_lab, "w6", "10.0.100.6", ina_payload(1, 0, bit_of(1), [10**6]))
    arrays = int_arrays(job, P)
    results = _allreduce(model_lab, job, arrays)
    assert np.array_equal(results["w3"], reduce_arrays(Op.SUM, list(arrays.values())))
    assert switch_stat(model_lab, "s1", SwitchStat.DROP_PARSER_ERROR) == 1
    assert switch_stat(model_lab, "s1", SwitchStat.DROP_BAD_COUNT) == 1
    assert switch_stat(model_lab, "s3", SwitchStat.DROP_NOT_MEMBER) == 1
    assert switch_stat(model_lab, "s3", SwitchStat.DROP_FORGED_PBM) == 1


def test_a_contribution_with_another_element_count_joins_the_round(model_lab: ModelLab) -> None:
    # A round takes no count: the values past a chunk's count are padding (zeros).
    model_lab.deploy_figure1()
    _send(model_lab, "w1", "10.0.100.1", ina_payload(1, 0, bit_of(1), [1]))
    _send(model_lab, "w2", "10.0.100.1", ina_payload(1, 0, bit_of(2), [1, 2]))
    assert _job_stats(model_lab, 1)["s1"] == {JobStat.ABSORBED: 2, JobStat.EMITTED: 1}


def test_a_duplicate_contribution_is_not_added_twice(model_lab: ModelLab) -> None:
    model_lab.deploy_figure1()
    payload = ina_payload(1, 0, bit_of(1), [5])
    _send(model_lab, "w1", "10.0.100.1", payload)
    _send(model_lab, "w1", "10.0.100.1", payload)
    assert _job_stats(model_lab, 1)["s1"] == {JobStat.ABSORBED: 1, JobStat.DROP_DUPLICATE: 1}


def test_sum_overflow_is_reported_with_the_result(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    big = {w: np.full(3, 2**30, dtype=np.int32) for w in job.workers}
    sessions = allreduce_on_model(model_lab.net, job, big)
    assert all(s.outcome().overflow for s in sessions.values())


def test_slot_state_left_by_a_torn_down_job_is_ignored(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    _send(model_lab, "w1", "10.0.100.1", ina_payload(1, 0, bit_of(1), [10**6]))  # never completes
    asyncio.run(model_lab.ctl.teardown(1))
    model_lab.deploy(job)
    arrays = int_arrays(job, P)
    results = _allreduce(model_lab, job, arrays)
    assert np.array_equal(results["w1"], reduce_arrays(Op.SUM, list(arrays.values())))


def test_a_missing_worker_stalls_with_an_error(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    arrays = int_arrays(job, 10)
    sessions = {w: ReductionWindow(WorkerConfig.for_job(job, model_lab.topology, w), arrays[w])
                for w in ("w1", "w2", "w3")}
    with pytest.raises(AllreduceError, match="stalled"):
        run_sessions(model_lab.net, sessions)


def _lossy_lab(figure1_topology: ModelLab, **impairment: float) -> ModelLab:
    lab = figure1_topology
    lab.net.impairment = Impairment(seed=7, **impairment)
    return lab


@pytest.mark.parametrize("impairment", [
    {"loss": 0.01}, {"loss": 0.05}, {"duplicate": 0.05}, {"reorder": 0.1},
    {"loss": 0.05, "duplicate": 0.05, "reorder": 0.1},
], ids=["loss1", "loss5", "dup5", "reorder10", "all"])
def test_allreduce_is_exact_over_impaired_links(model_lab: ModelLab,
                                                impairment: dict[str, float]) -> None:
    job = model_lab.deploy_figure1(slots=8)
    lab = _lossy_lab(model_lab, **impairment)
    arrays = int_arrays(job, P * 60)
    results = _allreduce(lab, job, arrays)
    assert_exact(job, arrays, results)


def test_a_lost_result_is_sent_again_by_the_node_that_kept_it(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1()
    open_call(model_lab, job)
    for w in ("w1", "w2", "w3", "w4"):
        _send(model_lab, w, job.target_of(w, model_lab.topology),
              ina_payload(1, 0, job.worker_bit[w], [1]))
    for w in job.workers:
        model_lab.net.inbox[w].clear()  # every result read, w1's taken for lost
    _send(model_lab, "w1", "10.0.100.1", ina_payload(1, 0, bit_of(1), [1]))
    stats = _job_stats(model_lab, 1)
    assert stats["s1"][JobStat.KEPT] == 1 and stats["s1"][JobStat.RESENT] == 1
    assert JobStat.RESENT not in stats["s6"]  # the root was not asked
    (again,) = model_lab.net.received_payloads("w1")
    assert InaPacket.unpack(again).meaningful == (4,)
    # To w1 alone, nothing added twice.
    assert all(not model_lab.net.inbox[w] for w in ("w2", "w3", "w4"))


def test_a_late_duplicate_of_an_old_round_is_stale(model_lab: ModelLab) -> None:
    model_lab.deploy_figure1(slots=1)
    _send(model_lab, "w1", "10.0.100.1", ina_payload(1, 2, bit_of(1), [1]))  # seq 2, cell 0
    _send(model_lab, "w1", "10.0.100.1", ina_payload(1, 0, bit_of(1), [1]))  # seq 0: older
    assert _job_stats(model_lab, 1)["s1"][JobStat.DROP_STALE] == 1


def _threaded_workers(lab: ModelLab, job: Job, arrays: dict[str, np.ndarray],
                      op: Op) -> dict[str, AllreduceResult]:
    """Each worker runs the real Worker in a thread over the model network."""
    workers = model_workers(lab, job)
    outcomes = in_threads({w: partial(workers[w].allreduce, arrays[w], op) for w in workers})
    results = {}
    for w, outcome in outcomes.items():
        assert isinstance(outcome, AllreduceResult), outcome
        results[w] = outcome
    return results


@pytest.mark.parametrize("op", [Op.SUM, Op.MIN, Op.MAX])
def test_float32_allreduce_is_within_its_error_bound(model_lab: ModelLab, op: Op) -> None:
    job = model_lab.deploy_figure1()
    rng = np.random.default_rng(5)
    arrays = {w: (rng.standard_normal(300) * 1e3).astype(np.float32) for w in job.workers}
    results = _threaded_workers(model_lab, job, arrays, op)
    stacked = np.stack(list(arrays.values())).astype(np.float64)
    exact = {Op.SUM: stacked.sum(0), Op.MIN: stacked.min(0), Op.MAX: stacked.max(0)}[op]
    for w in job.workers:
        r = results[w]
        assert r.values.dtype == np.float32 and r.error_bound is not None
        assert np.all(np.abs(r.values.astype(np.float64) - exact) <= r.error_bound), w
    assert all(np.array_equal(results[w].values, results["w1"].values) for w in job.workers)


def test_a_server_root_finishes_the_aggregation_and_starts_bier(model_lab: ModelLab) -> None:
    from ina.host.serverroot import ServerRoot

    job = model_lab.deploy_figure1(root="w5", slots=8)
    model_lab.net.impairment = Impairment(seed=3, loss=0.03)
    arrays = int_arrays(job, P * 30)
    root = ServerRoot(job, model_lab.topology)
    sessions = allreduce_on_model(model_lab.net, job, arrays, servers={"w5": root})
    assert_exact(job, arrays, session_results(sessions))
    assert root.stats["multicast"] >= 30
    assert all(not model_lab.net.inbox[h] for h in ("w6", "w7", "w8"))


def test_a_result_is_replicated_byte_for_byte_and_one_cut_short_is_dropped(
        model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1(root="w5")
    w5 = model_lab.topology.hosts["w5"]
    payload = ina_payload(1, 7, job.abm, list(range(-P // 2, P // 2)), flags=Flag.RESULT)
    whole = bier_frame(w5.mac, "02:00:00:00:00:03", w5.ip, Bier(bitstring=job.abm), payload)
    model_lab.net.send("w5", whole[:-4])
    model_lab.net.send("w5", whole)
    assert switch_stat(model_lab, "s3", SwitchStat.DROP_PARSER_ERROR) == 1
    assert {w: model_lab.net.received_payloads(w) for w in job.workers} == {
        w: [payload] for w in job.workers}


def test_bier_from_a_host_that_is_no_server_root_is_dropped(model_lab: ModelLab) -> None:
    job = model_lab.deploy_figure1(root="w5")
    w6 = model_lab.topology.hosts["w6"]
    payload = ina_payload(1, 0, job.abm, [666], flags=Flag.RESULT)
    frame = bier_frame(w6.mac, "02:00:00:00:00:03", w6.ip, Bier(bitstring=job.abm), payload)
    model_lab.net.send("w6", frame)
    assert switch_stat(model_lab, "s3", SwitchStat.DROP_BIER_FROM_HOST) == 1
    assert all(not model_lab.net.inbox[w] for w in job.workers)
