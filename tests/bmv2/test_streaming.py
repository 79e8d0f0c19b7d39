"""Streaming AllReduce on Figure 1 over Mininet + BMv2: long arrays, lossy and
duplicating links, reordered packets, concurrent jobs, missing and misbehaving
hosts. Run with `make test`.

Links are impaired with nftables on every interface's egress (this machine's
kernel has no sch_netem); reordering is produced by sending crafted packets out
of order, since nothing here can delay a packet on a link.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from ina.host.arrays import random_array, random_floats
from ina.lab.mininet import wait_until
from ina.model.harness import reduce_arrays
from ina.protocol.codec import InaPacket
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import INA_UDP_PORT, JobStat, Op, SwitchStat
from ina.protocol.scapy_layers import INA
from ina.spec.job import DEFAULT_SLOTS, Job

from bmv2.bmv2lab import NetLab

# Other workers, and VAT nodes on s5 (root), s6 and s7: all three switches carry
# both jobs at once (s6 and s7 are VAT nodes of both).
SHARING_SPEC = {"job_id": 2, "op": "sum", "workers": ["w5", "w6", "w7", "w8"], "root": "s5",
                "aggregators": {"s6": ["w5", "w6"], "s7": ["w7", "w8"]}, "slots": 32}


def _stats(lab: NetLab, job_id: int) -> dict[str, dict[JobStat, int]]:
    status = lab.controller_call(lambda ctl: ctl.status())
    return {sw: {k: v.packets for k, v in s.job_stats[job_id].items() if v.packets}
            for sw, s in status.items() if job_id in s.job_stats}


def _switch_stat(lab: NetLab, switch: str, stat: SwitchStat) -> int:
    status = lab.controller_call(lambda ctl: ctl.status())
    return status[switch].switch_stats[stat].packets


@pytest.mark.parametrize("loss", [0.01, 0.05])
def test_large_allreduce_is_exact_over_lossy_links(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job], loss: float) -> None:
    path, job = figure1_job
    figure1_lab.lab.impair(loss=loss)
    size = P * 500 if loss < 0.05 else P * 150
    results, expected = figure1_lab.allreduce(path, job, size, seed=100, timeout=30)
    for w in job.workers:
        assert np.array_equal(results[w], expected), w
    assert sum(figure1_lab.reports[w]["retransmissions"] for w in job.workers) > 0


def test_allreduce_is_exact_over_duplicating_links(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job]) -> None:
    path, job = figure1_job
    figure1_lab.lab.impair(duplicate=0.05)
    results, expected = figure1_lab.allreduce(path, job, P * 500, seed=110, timeout=30)
    for w in job.workers:
        assert np.array_equal(results[w], expected), w
    stats = _stats(figure1_lab, 1)
    # Duplicates reached the aggregation cells and were not added again.
    refused = sum(s.get(JobStat.DROP_DUPLICATE, 0) + s.get(JobStat.RESENT, 0)
                  for s in stats.values())
    assert refused > 0


def _frame(lab: NetLab, worker: str, job: Job, seq: int, values: list[int]) -> bytes:
    host = lab.topology.hosts[worker]
    edge, _ = lab.topology.host_attachment(worker)
    return raw(Ether(src=host.mac, dst=lab.topology.switches[edge].mac)
               / IP(src=host.ip, dst=job.target_of(worker, lab.topology))
               / UDP(sport=INA_UDP_PORT, dport=INA_UDP_PORT)
               / INA(job_id=job.job_id, seq=seq, count=len(values), pbm=job.worker_bit[worker],
                     values=values + [0] * (P - len(values))))


def test_reordered_and_duplicated_packets_give_exact_results_once(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job], tmp_path: Path) -> None:
    _, job = figure1_job
    seqs = DEFAULT_SLOTS  # the job's slots: all in flight at once
    rng = random.Random(3)
    values = {(w, q): [rng.randrange(-1000, 1000) for _ in range(8)]
              for w in job.workers for q in range(seqs)}
    # The root's progress at -1 (as after a call that ended there): 0..W-1 is a window.
    figure1_lab.open_call(job, proposal=seqs)
    record = tmp_path / "w1.hex"
    listener = figure1_lab.listen("w1", record)
    for w in job.workers:
        frames = [_frame(figure1_lab, w, job, q, values[(w, q)]) for q in range(seqs)]
        frames += rng.sample(frames, 5)  # duplicates
        rng.shuffle(frames)  # and out of order
        figure1_lab.send_frames(w, frames)
    # Each seq's result reaches w1 and w2 once it is complete: wait for all of them.
    wait_until(lambda: _stats(figure1_lab, 1)["s1"].get(JobStat.DELIVERED, 0) >= 2 * seqs,
               20, "every result delivered to w1 and w2")
    assert figure1_lab.stop_listening(listener) == seqs
    got = {}
    for line in record.read_text().split():
        pkt = InaPacket.unpack(bytes.fromhex(line))
        got[pkt.header.seq] = list(pkt.meaningful)
    for q in range(seqs):
        expected = np.sum([values[(w, q)] for w in job.workers], axis=0).tolist()
        assert got[q] == expected, q


def test_two_jobs_sharing_s5_s6_s7_run_at_once(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job]) -> None:
    path1, job1 = figure1_job
    path2 = figure1_lab.write_job(**SHARING_SPEC)
    job2 = figure1_lab.deploy(path2)
    try:
        size = P * 400
        procs1 = figure1_lab.start_workers(path1, job1, size, seed=200, timeout=30)
        procs2 = figure1_lab.start_workers(path2, job2, size, seed=300, timeout=30)
        for job, procs, seed in ((job1, procs1, 200), (job2, procs2, 300)):
            results = figure1_lab.finish_workers(job, procs)
            expected = reduce_arrays(job.op, [random_array(size, seed + i)
                                              for i in range(len(job.workers))])
            for w in job.workers:
                assert np.array_equal(results[w], expected), (job.job_id, w)
        for sw in ("s5", "s6", "s7"):
            assert _stats(figure1_lab, 2)[sw].get(JobStat.ABSORBED, 0) > 0, sw
    finally:
        figure1_lab.teardown(2)


def test_ordinary_traffic_flows_during_a_job(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job]) -> None:
    path, job = figure1_job
    procs = figure1_lab.start_workers(path, job, P * 800, seed=400, timeout=30)
    out = figure1_lab.lab.host("w5").cmd("ping -c 3 -i 0.2 -W 2 10.0.0.1")
    figure1_lab.finish_workers(job, procs)
    assert " 0% packet loss" in out, out


def test_a_worker_that_stops_mid_job_makes_the_others_fail_with_a_timeout(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job]) -> None:
    path, job = figure1_job
    procs = figure1_lab.start_workers(path, job, P * 3000, seed=500, timeout=2)
    wait_until(lambda: _stats(figure1_lab, 1).get("s6", {}).get(JobStat.MULTICAST, 0) > 20,
               30, "the job to make progress")
    procs.pop("w4").kill()
    for w, proc in procs.items():
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 3, w
        assert b"no result within 2s" in err, err


def test_outsiders_and_forgers_change_no_result(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job]) -> None:
    path, job = figure1_job
    before_member = _switch_stat(figure1_lab, "s3", SwitchStat.DROP_NOT_MEMBER)
    before_forged = _switch_stat(figure1_lab, "s4", SwitchStat.DROP_FORGED_PBM)
    procs = figure1_lab.start_workers(path, job, 640, seed=600, timeout=10)
    w5, w7 = figure1_lab.topology.hosts["w5"], figure1_lab.topology.hosts["w7"]
    outsider = [raw(Ether(src=w5.mac, dst="02:00:00:00:00:03") / IP(src=w5.ip, dst="10.0.100.6")
                    / UDP(sport=INA_UDP_PORT, dport=INA_UDP_PORT)
                    / INA(job_id=1, seq=q, count=P, pbm=1 << 4, values=[10**6] * P))
                for q in range(10)]
    forged = [raw(Ether(src=w7.mac, dst="02:00:00:00:00:04") / IP(src=w7.ip, dst="10.0.100.7")
                  / UDP(sport=INA_UDP_PORT, dport=INA_UDP_PORT)
                  / INA(job_id=1, seq=q, count=P, pbm=job.worker_bit["w3"],
                        values=[10**6] * P))
              for q in range(10)]
    figure1_lab.send_frames("w5", outsider)
    figure1_lab.send_frames("w7", forged)
    results = figure1_lab.finish_workers(job, procs)
    expected = reduce_arrays(Op.SUM, [random_array(640, 600 + i) for i in range(4)])
    assert all(np.array_equal(results[w], expected) for w in job.workers)
    assert _switch_stat(figure1_lab, "s3", SwitchStat.DROP_NOT_MEMBER) - before_member == 10
    assert _switch_stat(figure1_lab, "s4", SwitchStat.DROP_FORGED_PBM) - before_forged == 10


def test_float32_allreduce_is_within_its_stated_bound(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job]) -> None:
    path, job = figure1_job
    size = P * 100
    results = figure1_lab.finish_workers(
        job, figure1_lab.start_workers(path, job, size, seed=700, timeout=20, extra=["--float"]))
    exact = np.sum([random_floats(size, 700 + i).astype(np.float64) for i in range(4)], axis=0)
    bound = max(figure1_lab.reports[w]["max_error_bound"] for w in job.workers)
    for w in job.workers:
        assert results[w].dtype == np.float32
        assert np.array_equal(results[w], results["w1"]), w
        assert np.max(np.abs(results[w] - exact)) <= bound


def test_a_million_values_reduce_exactly(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job]) -> None:
    path, job = figure1_job
    results, expected = figure1_lab.allreduce(path, job, 1 << 20, seed=800, timeout=30)
    for w in job.workers:
        assert np.array_equal(results[w], expected), w
