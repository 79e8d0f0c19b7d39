"""Differential tests: the same AllReduce through BMv2 and through the reference
model gives the same results and the same counters, packet for packet and byte
for byte, on Figure 1, on the fat-tree k=4, and on a leaf-spine whose hosts lie
in four BIER sets; and the same frames crafted for the failover paths (notices
to workers, the first SYNC's proposal) give the same answers and counters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from ina.control import p4names as n
from ina.control.controller import Controller, SwitchStatus
from ina.control.switch import CounterValue, SwitchClient
from ina.control.switch_state import on_hosts_plan
from ina.host.arrays import random_array
from ina.lab.deploy import deploy
from ina.model.harness import allreduce_on_model, deployed_network
from ina.protocol.codec import InaHeader, InaPacket
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import Flag, JobStat, Op, SwitchStat
from ina.protocol.frames import ina_frame
from ina.spec.job import JobSpec
from ina.spec.topology import Topology

from bmv2.bmv2lab import Labs
from inatest import ROOT

#: Case name -> (topology, job).
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "figure1": ("figure1", {"job_id": 11, "op": "sum", "workers": ["w1", "w2", "w3", "w4"],
                            "root": "s6",
                            "aggregators": {"s1": ["w1", "w2"], "s7": ["w3", "w4"]}}),
    # s1 aggregates w1 alone: each of its packets starts and completes its cell.
    "figure1-one-contributor": ("figure1", {
        "job_id": 14, "op": "sum", "workers": ["w1", "w2", "w3", "w4"], "root": "s6",
        "aggregators": {"s1": ["w1"], "s7": ["w3", "w4"]}}),
    "fat-tree-4": ("fat-tree-4", {"job_id": 12, "op": "max",
                                  "workers": ["h0_0_0", "h0_0_1", "h1_1_0", "h2_0_1",
                                              "h3_1_1"]}),
    "leaf-spine-2x4-sets": ("leaf-spine-2x4-sets", {
        "job_id": 13, "op": "sum", "workers": ["h1_1", "h1_2", "h2_1", "h3_2", "h4_1", "h4_2"]}),
}
SIZE = P * 7 + 5


def _counters(status: dict[str, SwitchStatus], job_id: int
              ) -> dict[str, dict[str, CounterValue]]:
    out = {}
    for sw, s in status.items():
        cells = {f"switch.{k.name}": v for k, v in s.switch_stats.items()}
        cells.update({f"job.{k.name}": v for k, v in s.job_stats.get(job_id, {}).items()})
        out[sw] = cells
    return out


def _delta(after: dict[str, dict[str, CounterValue]], before: dict[str, dict[str, CounterValue]]
           ) -> dict[str, dict[str, tuple[int, int]]]:
    return {sw: {k: (v.packets - before[sw].get(k, CounterValue()).packets,
                     v.bytes - before[sw].get(k, CounterValue()).bytes)
                 for k, v in cells.items()
                 if v.packets != before[sw].get(k, CounterValue()).packets}
            for sw, cells in after.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bmv2_and_the_model_agree(labs: Labs, name: str) -> None:
    topology, job_spec = CASES[name]
    lab = labs.get(ROOT / "topologies" / f"{topology}.yaml")
    spec = JobSpec.from_dict(job_spec)
    job_id = spec.job_id
    before = _counters(lab.controller_call(lambda ctl: ctl.status()), job_id)
    path = lab.workdir / f"job{job_id}.yaml"
    job = deploy(lab.lab, spec, path)
    try:
        # A least RTO of 10 s: no retransmission, so both see exactly the same packets.
        bmv2_results = lab.finish_workers(
            job, lab.start_workers(path, job, SIZE, seed=1000, extra=["--min-rto", "10"]))
        bmv2 = _delta(_counters(lab.controller_call(lambda ctl: ctl.status()), job_id), before)
    finally:
        lab.teardown(job_id)

    net, ctl = deployed_network(lab.topology, job)
    sessions = allreduce_on_model(
        net, job, {w: random_array(SIZE, 1000 + i) for i, w in enumerate(job.workers)})
    model = _delta(_counters(asyncio.run(ctl.status()), job_id),
                   {sw: {} for sw in lab.topology.switches})

    for w in job.workers:
        assert np.array_equal(bmv2_results[w], sessions[w].outcome().values), w
    assert {sw: {k: p for k, (p, _) in c.items()} for sw, c in bmv2.items()} == \
        {sw: {k: p for k, (p, _) in c.items()} for sw, c in model.items()}
    assert any(f"job.{JobStat.ABSORBED.name}" in c for c in model.values())
    assert any(f"switch.{SwitchStat.BIER_COPY_DELIVERED.name}" in c for c in model.values())
    assert bmv2 == model, "byte counts differ"


# --- notices and a call's start: crafted frames from the hosts ---------------------------

NOTICE_SPEC = {"job_id": 14, "op": "sum", "workers": ["w1", "w2", "w3", "w4"], "root": "s6",
               "aggregators": {"s1": ["w1", "w2"], "s7": ["w3", "w4"]}}
ON_HOSTS_JOB = 15  # of w1 and w2, on no switch


def _header(job_id: int, seq: int, pbm: int, flags: Flag, gen: int = 0,
            values: tuple[int, ...] = ()) -> bytes:
    """A SYNC-like header alone (its count a nonce), or a contribution of ``values``."""
    if not values:
        return InaHeader(job_id=job_id, seq=seq, pbm=pbm, count=99, op=Op.SUM, flags=flags,
                         gen=gen).pack()
    return InaPacket(InaHeader(job_id=job_id, seq=seq, pbm=pbm, count=len(values), op=Op.SUM,
                               flags=flags, gen=gen), values).pack()


def _crafted(topology: Topology) -> list[tuple[str, list[bytes]]]:
    """(host, frames), in sending order: w1's SYNC proposes 1000, the first of the
    plan (answered 1000), then w1's contribution of another plan (told REPLAN), a
    SYNC, a contribution and an ABORT of the job on hosts (told ON_HOSTS twice, the
    ABORT consumed); then w2's SYNC proposing 5 (answered 1000 too)."""
    def frame(host: str, dst: str, payload: bytes) -> bytes:
        h = topology.hosts[host]
        edge, _ = topology.host_attachment(host)
        return ina_frame(h.mac, topology.switches[edge].mac, h.ip, dst, payload)

    job = NOTICE_SPEC["job_id"]
    assert isinstance(job, int)
    w1 = [
        frame("w1", "10.0.100.6", _header(job, 1000, 1, Flag.SYNC)),
        frame("w1", "10.0.100.1", _header(job, 3, 1, Flag.NONE, gen=1, values=(7, 8, 9))),
        frame("w1", "10.0.100.6", _header(ON_HOSTS_JOB, 0, 1, Flag.SYNC)),
        frame("w1", "10.0.0.2", _header(ON_HOSTS_JOB, 4, 1, Flag.NONE, values=(1,))),
        frame("w1", "10.0.100.6", _header(ON_HOSTS_JOB, 9, 1, Flag.SYNC | Flag.ABORT)),
    ]
    w2 = [frame("w2", "10.0.100.1", _header(job, 5, 2, Flag.SYNC))]
    return [("w1", w1), ("w2", w2)]


async def _raw_counters(clients: Mapping[str, SwitchClient]
                        ) -> dict[str, dict[str, CounterValue]]:
    """Every cell of every counter, by counter name and index (job index 0 included:
    an edge with no entry of the job counts a notice there)."""
    out = {}
    for sw, client in clients.items():
        cells = {}
        for name in (*n.JOB_STAT_COUNTERS, *n.SWITCH_STAT_COUNTERS):
            for i, v in (await client.read_counter(name)).items():
                cells[f"{name}[{i}]"] = v
        out[sw] = cells
    return out


def test_bmv2_and_the_model_agree_on_notices_and_a_calls_start(labs: Labs) -> None:
    lab = labs.get(ROOT / "topologies" / "figure1.yaml")
    topo = lab.topology
    on_hosts = on_hosts_plan(ON_HOSTS_JOB, ["w1", "w2"], 4, topo, gen=2)
    job = deploy(lab.lab, JobSpec.from_dict(NOTICE_SPEC))  # resets the job's counter cells
    before = lab.controller_call(lambda ctl: _raw_counters(ctl.clients))

    async def write(ctl: Controller, add: bool) -> None:
        for sw, entries in on_hosts.items():
            await (ctl.clients[sw].insert if add else ctl.clients[sw].delete)(entries)

    lab.controller_call(lambda ctl: write(ctl, True))
    try:
        records = {h: lab.workdir / f"notices-{h}.hex" for h in ("w1", "w2")}
        listeners = {h: lab.listen(h, records[h]) for h in records}
        for host, frames in _crafted(topo):
            lab.send_frames(host, frames)
            time.sleep(0.5)  # w1's SYNC is the plan's first at the root
        time.sleep(0.5)
        for proc in listeners.values():
            lab.stop_listening(proc)
        bmv2_got = {h: sorted(bytes.fromhex(x) for x in r.read_text().split())
                    for h, r in records.items()}
        bmv2 = _delta(lab.controller_call(lambda ctl: _raw_counters(ctl.clients)), before)
    finally:
        lab.controller_call(lambda ctl: write(ctl, False))
        lab.teardown(job.job_id)

    net, _ = deployed_network(topo, job)
    stores = {sw: s.store for sw, s in net.switches.items()}
    for sw, entries in on_hosts.items():
        asyncio.run(stores[sw].insert(entries))
    for host, frames in _crafted(topo):
        for f in frames:
            net.send(host, f)
    model_got = {h: sorted(net.received_payloads(h)) for h in ("w1", "w2")}
    model = _delta(asyncio.run(_raw_counters(stores)), {sw: {} for sw in topo.switches})

    assert bmv2_got == model_got
    assert [InaHeader.unpack(p).seq for p in model_got["w2"]] == [1000]
    assert len(model_got["w1"]) == 4  # the SYNC's answer, REPLAN, ON_HOSTS twice
    assert {sw: {k: p for k, (p, _) in c.items()} for sw, c in bmv2.items()} == \
        {sw: {k: p for k, (p, _) in c.items()} for sw, c in model.items()}
    assert bmv2 == model, "byte counts differ"
