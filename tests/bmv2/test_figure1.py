"""Figure 1 of draft-song-ina-00 on Mininet + BMv2, deployed over P4Runtime.

Workers run `inaworker` on their Mininet hosts (real UDP sockets); bad packets
are crafted with scapy and put on a host's link. Run with `make test`.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any
from unittest import mock

import numpy as np
import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from ina.control.controller import Controller, JobOnSwitch
from ina.errors import SwitchError
from ina.protocol.bitmaps import bit_of
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import INA_UDP_PORT, JobStat, SwitchStat
from ina.protocol.scapy_layers import INA

from bmv2.bmv2lab import Deployed, NetLab
from inatest import FIGURE1, FIGURE1_SPEC

SECOND_SPEC = {"job_id": 2, "op": "sum", "workers": ["w2", "w5", "w7"], "root": "s7",
               "aggregators": {"s6": ["w5", "w7"]}}
SIZE = P * 5 + 7  # six packets per worker, the last one partial
# Packet rounds of one call: the call's descriptor (its barrier), then the array.
ROUNDS = 1 + -(-SIZE // P)


def _job_stats(lab: NetLab, job_id: int) -> dict[str, dict[JobStat, int]]:
    status = lab.controller_call(lambda ctl: ctl.status())
    return {sw: {k: v.packets for k, v in s.job_stats[job_id].items() if v.packets}
            for sw, s in status.items() if job_id in s.job_stats}


def _switch_stats(lab: NetLab) -> dict[str, dict[SwitchStat, int]]:
    status = lab.controller_call(lambda ctl: ctl.status())
    return {sw: {k: v.packets for k, v in s.switch_stats.items() if v.packets}
            for sw, s in status.items()}


def test_hosts_ping_each_other(figure1_lab: NetLab) -> None:
    out = figure1_lab.lab.host("w1").cmd("ping -c 1 -W 2 10.0.0.8")
    assert " 0% packet loss" in out, out


@pytest.mark.parametrize("op", ["sum", "min", "max"])
def test_every_worker_gets_the_exact_result_and_others_nothing(
        figure1_lab: NetLab, op: str) -> None:
    path = figure1_lab.write_job(**{**FIGURE1_SPEC, "op": op})
    job = figure1_lab.deploy(path)
    try:
        listeners = {h: figure1_lab.listen(h) for h in ("w5", "w6", "w7", "w8")}
        # A least RTO of 10 s: no retransmission, so "once" is checked by the counters below.
        results, expected = figure1_lab.allreduce(path, job, SIZE, seed=10,
                                                  extra=["--min-rto", "10"])
        for w in job.workers:
            assert np.array_equal(results[w], expected), w
        stats = _job_stats(figure1_lab, 1)
        # Each worker got each result once: two deliveries per round on s1 and s2.
        assert stats["s1"][JobStat.DELIVERED] == 2 * ROUNDS
        assert stats["s2"][JobStat.DELIVERED] == 2 * ROUNDS
        assert {h: figure1_lab.stop_listening(p) for h, p in listeners.items()} == {
            "w5": 0, "w6": 0, "w7": 0, "w8": 0}
        switch = _switch_stats(figure1_lab)
        assert SwitchStat.BIER_COPY_DELIVERED not in switch["s3"]
        assert SwitchStat.BIER_COPY_DELIVERED not in switch["s4"]
    finally:
        figure1_lab.teardown(1)


def test_counters_show_absorption_transit_and_the_pass_at_s7(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    (path, job), = deployed
    # A least RTO of 10 s: no retransmission while the workers start up, so the counts are exact.
    figure1_lab.finish_workers(job, figure1_lab.start_workers(path, job, SIZE, seed=20,
                                                              extra=["--min-rto", "10"]))
    stats = _job_stats(figure1_lab, 1)
    # Each worker's SYNC crosses the VAT nodes and transit switches on its way to
    # the root s6 and back, passed on, never absorbed.
    assert stats["s6"][JobStat.SYNCED] == 4
    assert stats["s1"][JobStat.ABSORBED] == 2 * ROUNDS
    assert stats["s1"][JobStat.EMITTED] == ROUNDS
    assert stats["s1"][JobStat.PASSED] == 2 * 2  # w1's and w2's SYNCs, out and back
    assert stats["s7"][JobStat.ABSORBED] == 2 * ROUNDS
    # s1's partial results on their way to s6, and every worker's SYNC out and back.
    assert stats["s7"][JobStat.PASSED] == ROUNDS + 4 * 2
    assert stats["s6"][JobStat.ABSORBED] == 2 * ROUNDS
    assert stats["s6"][JobStat.MULTICAST] == ROUNDS
    # w3, w4 and s1's partial result; the four SYNCs out and back.
    assert stats["s5"][JobStat.TRANSIT] == 3 * ROUNDS + 4 * 2
    assert stats["s2"][JobStat.TRANSIT] == 2 * ROUNDS + 2 * 2


@pytest.mark.parametrize("deployed", [[FIGURE1_SPEC, SECOND_SPEC]], indirect=True)
def test_a_second_job_is_exact_while_the_first_is_deployed(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    # The jobs share w2, and a host runs one worker at a time: one after the other.
    for path, job in reversed(deployed):
        results, expected = figure1_lab.allreduce(path, job, SIZE, seed=30 + job.job_id)
        for w in job.workers:
            assert np.array_equal(results[w], expected), (job.job_id, w)


def test_a_second_job_is_exact_after_the_first_is_torn_down(figure1_lab: NetLab) -> None:
    first = figure1_lab.write_job(**FIGURE1_SPEC)
    figure1_lab.deploy(first)
    figure1_lab.teardown(1)
    path = figure1_lab.write_job(**SECOND_SPEC)
    job = figure1_lab.deploy(path)
    try:
        results, expected = figure1_lab.allreduce(path, job, SIZE, seed=50)
        assert all(np.array_equal(results[w], expected) for w in job.workers)
    finally:
        figure1_lab.teardown(2)


def _ina_frame(src_host: str, dst_ip: str, **ina: Any) -> bytes:
    topo = {"w1": ("00:00:00:00:00:01", "10.0.0.1", "02:00:00:00:00:01"),
            "w5": ("00:00:00:00:00:05", "10.0.0.5", "02:00:00:00:00:03")}[src_host]
    values = ina.pop("values", [1000] + [0] * 63)
    return raw(Ether(src=topo[0], dst=topo[2]) / IP(src=topo[1], dst=dst_ip)
               / UDP(sport=INA_UDP_PORT, dport=INA_UDP_PORT)
               / INA(values=values, **ina))


def test_bad_packets_are_counted_and_change_no_result(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    (path, job), = deployed
    before = _switch_stats(figure1_lab)
    unknown_job = _ina_frame("w1", "10.0.100.6", job_id=99, seq=0, count=1, pbm=bit_of(1))
    outsider = _ina_frame("w5", "10.0.100.6", job_id=1, seq=0, count=1, pbm=bit_of(5))
    forged = _ina_frame("w5", "10.0.100.6", job_id=1, seq=0, count=1, pbm=bit_of(1))
    truncated = _ina_frame("w1", "10.0.100.1", job_id=1, seq=0, count=1, pbm=bit_of(1))[:-40]
    no_values = _ina_frame("w1", "10.0.100.1", job_id=1, seq=0, count=0, pbm=bit_of(1))
    figure1_lab.send_frames("w1", [unknown_job, truncated, no_values])
    figure1_lab.send_frames("w5", [outsider, forged])
    results, expected = figure1_lab.allreduce(path, job, P, seed=60)
    assert all(np.array_equal(results[w], expected) for w in job.workers)
    after = _switch_stats(figure1_lab)

    def grew(sw: str, stat: SwitchStat) -> int:
        return after[sw].get(stat, 0) - before[sw].get(stat, 0)

    # Each is stopped by the first switch it reaches, and counted there.
    assert grew("s1", SwitchStat.DROP_NOT_MEMBER) == 1  # w1 is no worker of job 99
    assert grew("s1", SwitchStat.DROP_PARSER_ERROR) == 1
    assert grew("s1", SwitchStat.DROP_BAD_COUNT) == 1
    assert grew("s3", SwitchStat.DROP_NOT_MEMBER) == 1  # w5 is no worker of job 1
    assert grew("s3", SwitchStat.DROP_FORGED_PBM) == 1  # w5 posing as w1


def test_a_failed_write_leaves_no_half_deployed_job(figure1_lab: NetLab) -> None:
    from ina.spec.job import JobSpec, validate_job

    job = validate_job(JobSpec.from_dict(FIGURE1_SPEC), figure1_lab.topology)

    async def attempt(ctl: Controller) -> dict[int, list[JobOnSwitch]]:
        # s7's inserts fail, as with a full table or a lost link; the rest is the real switch.
        failing = mock.AsyncMock(side_effect=SwitchError("s7", "injected failure"))
        with mock.patch.object(ctl.clients["s7"], "insert", failing), \
                pytest.raises(Exception, match="writing failed on s7"):
            await ctl.deploy(job)
        return await ctl.jobs()

    assert figure1_lab.controller_call(attempt) == {}


def test_inactl_deploys_reports_and_tears_down(figure1_lab: NetLab) -> None:
    path = figure1_lab.write_job(**FIGURE1_SPEC)
    base = [sys.executable, "-m", "ina.cli.inactl", "-t", str(FIGURE1), "--p4info",
            str(figure1_lab.lab.p4info)]
    deploy = subprocess.run([*base, "deploy", "--job", str(path)], capture_output=True, text=True)
    assert deploy.returncode == 0, deploy.stderr
    assert "s6: root, covers w1, w2, w3, w4" in deploy.stdout
    again = subprocess.run([*base, "deploy", "--job", str(path)], capture_output=True, text=True)
    assert again.returncode == 2 and "already deployed" in again.stderr
    status = subprocess.run([*base, "status", "--job-id", "1"], capture_output=True, text=True)
    assert status.returncode == 0 and "job 1: root" in status.stdout
    down = subprocess.run([*base, "teardown", "--job-id", "1"], capture_output=True,
                          text=True)
    assert down.returncode == 0 and "removed from s1, s2, s5, s6, s7" in down.stdout
