"""Differential tests: the same AllReduce through BMv2 and through the reference
model gives the same results and the same counters (each port's packets sent
included), packet for packet and byte for byte, on Figure 1, on the
fat-tree k=4, and on a leaf-spine whose hosts lie in four BIER sets; and the same
frames crafted for the failover paths (notices to workers, the first SYNC's
proposal) give the same answers and counters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
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
from ina.protocol.bitmaps import bit_of, one_set
from ina.protocol.codec import InaHeader, InaPacket, array_bytes
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import (
    ETHERTYPE_PROBE,
    JOB_STAT_STRIDE,
    OP_COPY,
    WIDTH32,
    Flag,
    JobStat,
    Op,
    QueryVerdict,
    SwitchStat,
)
from ina.protocol.frames import ina_frame, mac_bytes, udp_frame
from ina.spec.job import DEFAULT_SLOTS, JobSpec
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
        # Every packet that left a port. Not the marks: the model has no queue, while
        # BMv2's own egress queue may hold MARK_QDEPTH packets in a burst (an Allgather's
        # results at s5 did), and when is a matter of timing.
        cells.update({f"port{p}.sent": v for p, v in s.port_packets.items()})
        cells.update({f"port{p}.received": v for p, v in s.port_received.items()})
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
            values: tuple[int, ...] = (), si: int = 0) -> bytes:
    """A SYNC-like header alone (its count a nonce), or a contribution of ``values``
    (``pbm``: bits of set ``si``)."""
    if not values:
        return InaHeader(job_id=job_id, seq=seq, pbm=pbm, count=99, op=Op.SUM, flags=flags,
                         gen=gen, si=si).pack()
    return InaPacket(InaHeader(job_id=job_id, seq=seq, pbm=pbm, count=len(values), op=Op.SUM,
                               flags=flags, gen=gen, si=si), values).pack()


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
        for name in (*n.JOB_STAT_COUNTERS, *n.SWITCH_STAT_COUNTERS, n.PORT_PACKETS,
                     n.PORT_RECEIVED):
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


# --- the window, the edge: crafted frames, batch by batch ----------------------------------

#: w1 and w2 send to the root s6 directly; s7 aggregates w3 and w4 below it.
WINDOW_SPEC = {"job_id": 16, "op": "sum", "workers": ["w1", "w2", "w3", "w4"], "root": "s6",
               "aggregators": {"s7": ["w3", "w4"]}}
W = DEFAULT_SLOTS  # the job's slots
#: The first SYNC proposes START: the root's progress is START - 2W - 1 after it.
START = 1000
PROGRESS = START - 2 * W - 1
Batch = tuple[str, list[bytes]]


def _from(topology: Topology, host: str, dst: str, payloads: list[bytes],
          src: str | None = None) -> Batch:
    h = topology.hosts[host]
    edge, _ = topology.host_attachment(host)
    return host, [ina_frame(h.mac, topology.switches[edge].mac, src or h.ip, dst, p)
                  for p in payloads]


def _part(job_id: int, seq: int, host_bit: int, count: int = 3, op: Op = Op.SUM) -> bytes:
    """A contribution of ``count`` values."""
    return InaPacket(InaHeader(job_id=job_id, seq=seq, pbm=host_bit, count=count, op=op),
                     tuple(range(1, count + 1))).pack()


def _window_batches(topology: Topology) -> list[Batch]:
    """Each of the window's rules once, in order (see aggregation.p4, "The window")."""
    job, root, s7 = 16, "10.0.100.6", "10.0.100.7"
    w1, w2, w3 = bit_of(1), bit_of(2), bit_of(3)
    ahead = START + 2 * W * 2**20  # in the cell of START, many laps ahead
    return [
        # Before any call of the plan: an ABORT, a contribution; then the plan's first SYNC.
        _from(topology, "w1", root, [_header(job, 5, w1, Flag.SYNC | Flag.ABORT),
                                     _part(job, 0, w1), _header(job, START, w1, Flag.SYNC)]),
        # The call's first packet, one past its first W (the window's last is START + W - 1:
        # a call's first W packets may go together), one before the window.
        _from(topology, "w1", root, [_part(job, START, w1), _part(job, START + W, w1),
                                     _part(job, PROGRESS - 2 * W - 1, w1)]),
        # Another op in that incomplete round (refused), then another count (it joins:
        # a round takes no count).
        _from(topology, "w2", root, [_part(job, START, w2, op=Op.MAX),
                                     _part(job, START, w2, count=2)]),
        # An ABORT 2^31 - 1 ahead, one as far as a call reaches; the next SYNC's answer.
        _from(topology, "w1", root, [_header(job, PROGRESS + 2**31 - 1, w1, Flag.SYNC | Flag.ABORT),
                                     _header(job, START, w1, Flag.SYNC | Flag.ABORT)]),
        _from(topology, "w2", root, [_header(job, 0, w2, Flag.SYNC)]),
        # Below the root (s7): a round far ahead, replaced by the next round in its
        # cell; a lap behind that one is stale.
        _from(topology, "w3", s7, [_part(job, ahead, w3), _part(job, START + 2 * W, w3),
                                   _part(job, START, w3)]),
        # A SYNC from another host's address: its answer would go there.
        _from(topology, "w1", root, [_header(job, 0, w1, Flag.SYNC)], src="10.0.0.5"),
    ]


def _owned(bfr_id: int, flags: Flag = Flag.RESULT, gen: int = 0, width: int = WIDTH32
           ) -> bytes:
    """Job 16's worker ``bfr_id``'s own values (OP_COPY) of three elements."""
    return InaHeader(job_id=16, seq=START, pbm=bit_of(bfr_id), count=3, op=OP_COPY, flags=flags,
                     gen=gen, width=width).pack() + array_bytes([1, 2, 3], width)


def _owned_batches(topology: Topology) -> list[Batch]:
    """w3's own values, then the ones an edge refuses: not a result alone, another
    worker's bit, another plan, 16-bit elements, another address, not a worker."""
    root = "10.0.100.6"
    return [
        _from(topology, "w3", root, [_owned(3)]),
        _from(topology, "w1", root, [_owned(1, Flag.RESULT | Flag.OVERFLOW), _owned(2),
                                     _owned(1, gen=3), _owned(1, width=16)]),
        _from(topology, "w1", root, [_owned(1)], src="10.0.0.5"),
        _from(topology, "w5", root, [_owned(5)]),
    ]


def _undeclared_batches(topology: Topology) -> list[Batch]:
    """Plain IPv4, INA and a link probe from w8, whose port s4 no longer declares."""
    h, s4 = topology.hosts["w8"], topology.switches["s4"]
    probe = mac_bytes("ff:ff:ff:ff:ff:ff") + mac_bytes(h.mac) + ETHERTYPE_PROBE.to_bytes(2, "big")
    return [("w8", [udp_frame(h.mac, s4.mac, h.ip, "10.0.0.1", 5000, 5001, b"hello"),
                    ina_frame(h.mac, s4.mac, h.ip, "10.0.100.6", _header(16, 0, bit_of(8),
                                                                         Flag.SYNC)),
                    probe + bytes(46)])]


async def _forget_w8(clients: Mapping[str, SwitchClient]) -> None:
    """s4 forgets w8's port (3): the controller declared it no more."""
    entries = [e for e in await clients["s4"].read_table(n.HOST_PORTS.name)
               if e.match_value("ingress_port") == 3]
    await clients["s4"].delete(entries)


def _crafted_on_both(labs: Labs, spec: dict[str, Any],
                     batches: Callable[[Topology], list[Batch]],
                     prepare: Callable[[Mapping[str, SwitchClient]],
                                       Coroutine[Any, Any, None]] | None = None,
                     topology: str = "figure1",
                     ) -> tuple[dict[str, list[bytes]], dict[str, dict[str, tuple[int, int]]]]:
    """The batches sent through BMv2 and through the model of ``topology``; asserts
    they agree, byte for byte (what every host received, every counter cell): the
    model's (received, counters). Each batch on BMv2 waits until its switches have
    counted what the model counted for it, so that batches from different hosts keep
    their order."""
    lab = labs.get(ROOT / "topologies" / f"{topology}.yaml")
    topo = lab.topology
    job = deploy(lab.lab, JobSpec.from_dict(spec))

    net, _ = deployed_network(topo, job)
    stores = {sw: s.store for sw, s in net.switches.items()}
    if prepare is not None:
        asyncio.run(prepare(stores))
    expected = []
    for host, frames in batches(topo):
        for f in frames:
            net.send(host, f)
        expected.append(_delta(asyncio.run(_raw_counters(stores)),
                               {sw: {} for sw in topo.switches}))
    model_got = {h: sorted(net.received_payloads(h)) for h in topo.hosts}
    model = expected[-1]

    try:
        before = lab.controller_call(lambda ctl: _raw_counters(ctl.clients))
        if prepare is not None:
            lab.controller_call(lambda ctl: prepare(ctl.clients))
        records = {h: lab.workdir / f"crafted-{h}.hex" for h in topo.hosts}
        listeners = {h: lab.listen(h, records[h]) for h in records}
        bmv2: dict[str, dict[str, tuple[int, int]]] = {}
        for (host, frames), counted in zip(batches(topo), expected, strict=True):
            lab.send_frames(host, frames)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                bmv2 = _delta(lab.controller_call(lambda ctl: _raw_counters(ctl.clients)),
                              before)
                if bmv2 == counted:
                    break
        for proc in listeners.values():
            lab.stop_listening(proc)
        bmv2_got = {h: sorted(bytes.fromhex(x) for x in r.read_text().split())
                    for h, r in records.items()}
    finally:
        lab.teardown(job.job_id)
        lab.lab.init_switches_sync()  # the base state back, whatever prepare did

    assert bmv2_got == model_got
    assert {sw: {k: p for k, (p, _) in c.items()} for sw, c in bmv2.items()} == \
        {sw: {k: p for k, (p, _) in c.items()} for sw, c in model.items()}
    assert bmv2 == model, "byte counts differ"
    return model_got, model


def _job_cell(switch_counters: dict[str, tuple[int, int]], stat: JobStat,
              job_index: int = 0) -> int:
    cell = f"{n.INGRESS_JOB_STATS}[{job_index * JOB_STAT_STRIDE + stat}]"
    return switch_counters.get(cell, (0, 0))[0]


def _switch_cell(switch_counters: dict[str, tuple[int, int]], stat: SwitchStat) -> int:
    return switch_counters.get(f"{n.INGRESS_SWITCH_STATS}[{stat}]", (0, 0))[0]


def test_bmv2_and_the_model_agree_on_the_window(labs: Labs) -> None:
    got, counters = _crafted_on_both(labs, WINDOW_SPEC, _window_batches)
    s6, s7 = counters["s6"], counters["s7"]
    assert _job_cell(s6, JobStat.DROP_ABORT_AHEAD) == 2
    assert _job_cell(s6, JobStat.DROP_AHEAD) == 2
    assert _job_cell(s6, JobStat.DROP_STALE) == 1
    assert _job_cell(s6, JobStat.DROP_OP_MISMATCH) == 1
    assert _job_cell(s6, JobStat.ABORTED) == 1
    assert _job_cell(s7, JobStat.ABSORBED) == 2 and _job_cell(s7, JobStat.DROP_STALE) == 1
    assert _switch_cell(counters["s1"], SwitchStat.DROP_SPOOFED_SOURCE) == 1
    # The SYNCs' answers: the first of the plan its proposal, the next one past the ABORT.
    assert [InaHeader.unpack(p).seq for p in got["w1"]] == [START]
    assert [InaHeader.unpack(p).seq for p in got["w2"]] == [START + 2 * W + 1]
    assert not got["w5"]


def test_bmv2_and_the_model_agree_on_a_workers_own_values(labs: Labs) -> None:
    got, counters = _crafted_on_both(labs, WINDOW_SPEC, _owned_batches)
    topo = labs.get(ROOT / "topologies" / "figure1.yaml").topology
    assert {h: len(p) for h, p in got.items()} == {h: int(h in ("w1", "w2", "w4"))
                                                   for h in topo.hosts}
    assert got["w1"] == [_owned(3)]  # as w3 sent it: no switch aggregated it
    edge = {h: topo.host_attachment(h)[0] for h in ("w1", "w3", "w5")}
    assert _job_cell(counters[edge["w3"]], JobStat.OWNED) == 1
    assert _switch_cell(counters[edge["w1"]], SwitchStat.DROP_BAD_OWNED) == 5
    assert _switch_cell(counters[edge["w5"]], SwitchStat.DROP_BAD_OWNED) == 1


def _query_batches(topology: Topology) -> list[Batch]:
    """QUERYs about round START of NOTICE_SPEC's job (s1 holds w1 and w2, s7 w3 and w4,
    root s6): held at s1, missing at s1, complete at s1 and held at s6, complete at
    the root (its result kept at s7, which answers); one of another plan, one as
    another worker."""
    job, root, s1, s7 = 14, "10.0.100.6", "10.0.100.1", "10.0.100.7"
    w1, w2, w3, w4 = (bit_of(i) for i in (1, 2, 3, 4))
    query = Flag.SYNC | Flag.NODATA
    return [
        _from(topology, "w1", root, [_header(job, START, w1, Flag.SYNC)]),
        _from(topology, "w1", s1, [_header(job, START, w1, Flag.NONE, values=(1, 2)),
                                   _header(job, START, w1, query)]),
        _from(topology, "w2", s1, [_header(job, START, w2, query)]),
        _from(topology, "w2", s1, [_header(job, START, w2, Flag.NONE, values=(3, 4)),
                                   _header(job, START, w2, query)]),
        _from(topology, "w3", s7, [_header(job, START, w3, Flag.NONE, values=(5, 6))]),
        _from(topology, "w4", s7, [_header(job, START, w4, Flag.NONE, values=(7, 8))]),
        _from(topology, "w3", s7, [_header(job, START, w3, query)]),
        _from(topology, "w1", s1, [_header(job, START, w1, query, gen=5),
                                   _header(job, START, w2, query)]),
    ]


def test_bmv2_and_the_model_agree_on_queries(labs: Labs) -> None:
    got, counters = _crafted_on_both(labs, NOTICE_SPEC, _query_batches)
    answers = {h: [InaHeader.unpack(p) for p in got[h]
                   if InaHeader.unpack(p).flags & Flag.NODATA] for h in ("w1", "w2", "w3")}
    verdicts = {h: sorted((a.count, a.flags) for a in answers[h]) for h in answers}
    answer = Flag.SYNC | Flag.NODATA | Flag.REPLY
    assert verdicts == {
        "w1": [(int(QueryVerdict.HELD), answer), (99, answer | Flag.REPLAN)],
        "w2": [(int(QueryVerdict.SEND), answer), (int(QueryVerdict.HELD), answer)],
        "w3": [(int(QueryVerdict.SEND), answer)]}
    s1, s6, s7 = counters["s1"], counters["s6"], counters["s7"]
    assert (_job_cell(s1, JobStat.QUERIED), _job_cell(s1, JobStat.QUERY_HELD),
            _job_cell(s1, JobStat.QUERY_UP)) == (2, 1, 1)
    assert (_job_cell(s6, JobStat.QUERIED), _job_cell(s6, JobStat.QUERY_HELD)) == (1, 1)
    assert (_job_cell(s7, JobStat.QUERIED), _job_cell(s7, JobStat.QUERY_UP)) == (1, 0)
    assert _switch_cell(s1, SwitchStat.DROP_FORGED_PBM) == 1


def _kept_batches(topology: Topology) -> list[Batch]:
    """NOTICE_SPEC's job: round START complete (its result kept at s1 and s7 on the
    way down), then w1's and w3's values again (answered by s1 and s7 from what they
    kept), then round START + 1 complete at s1 alone and w2's values again for it
    (nothing kept: s1's aggregate goes up, a duplicate at the root)."""
    job, root, s1, s7 = 14, "10.0.100.6", "10.0.100.1", "10.0.100.7"
    w1, w2, w3, w4 = (bit_of(i) for i in (1, 2, 3, 4))

    def part(seq: int, bits: int, *values: int) -> bytes:
        return _header(job, seq, bits, Flag.NONE, values=values)

    return [
        _from(topology, "w1", root, [_header(job, START, w1, Flag.SYNC)]),
        _from(topology, "w1", s1, [part(START, w1, 1, 2)]),
        _from(topology, "w2", s1, [part(START, w2, 3, 4)]),
        _from(topology, "w3", s7, [part(START, w3, 5, 6)]),
        _from(topology, "w4", s7, [part(START, w4, 7, 8)]),
        _from(topology, "w1", s1, [part(START, w1, 1, 2)]),
        _from(topology, "w3", s7, [part(START, w3, 5, 6)]),
        _from(topology, "w1", s1, [part(START + 1, w1, 9, 9)]),
        _from(topology, "w2", s1, [part(START + 1, w2, 9, 9)]),
        _from(topology, "w2", s1, [part(START + 1, w2, 9, 9)]),
    ]


def test_bmv2_and_the_model_agree_on_results_kept_below_the_root(labs: Labs) -> None:
    got, counters = _crafted_on_both(labs, NOTICE_SPEC, _kept_batches)
    results = {h: [InaPacket.unpack(p) for p in got[h]
                   if InaHeader.unpack(p).flags & Flag.RESULT] for h in ("w1", "w2", "w3", "w4")}
    # Each worker got round START's result; w1 and w3 twice (their values sent again).
    assert {h: len(r) for h, r in results.items()} == {"w1": 2, "w2": 1, "w3": 2, "w4": 1}
    assert all(r.values[:2] == (16, 20) for rs in results.values() for r in rs)
    s1, s6, s7 = counters["s1"], counters["s6"], counters["s7"]
    assert (_job_cell(s1, JobStat.KEPT), _job_cell(s7, JobStat.KEPT)) == (1, 1)
    assert (_job_cell(s1, JobStat.RESENT), _job_cell(s7, JobStat.RESENT)) == (2, 1)
    assert (_job_cell(s1, JobStat.MULTICAST), _job_cell(s7, JobStat.MULTICAST)) == (1, 1)
    assert _job_cell(s1, JobStat.EMITTED) == 3  # START, START + 1 and its copy
    assert (_job_cell(s6, JobStat.RESENT), _job_cell(s6, JobStat.DROP_DUPLICATE)) == (0, 1)


#: A node (s1) that aggregates a worker attached elsewhere (w3, on s2): valid by the
#: draft, and its workers' results do not all pass it.
AWAY_SPEC = {"job_id": 18, "op": "sum", "workers": ["w1", "w2", "w3"], "root": "s7",
             "aggregators": {"s1": ["w1", "w3"]}}


def _away_batches(topology: Topology) -> list[Batch]:
    """AWAY_SPEC's job: round START complete (its result passes s1 toward w1 and w2
    only: not kept there), then w3's values again: s1 sends its aggregate up again and
    the root answers, where a kept result would have been sent by BIER through s1's
    group, which has no port toward w3."""
    job, root, s1 = 18, "10.0.100.7", "10.0.100.1"
    w1, w2, w3 = (bit_of(i) for i in (1, 2, 3))

    def part(bits: int, *values: int) -> bytes:
        return _header(job, START, bits, Flag.NONE, values=values)

    return [
        _from(topology, "w1", root, [_header(job, START, w1, Flag.SYNC)]),
        _from(topology, "w1", s1, [part(w1, 1, 2)]),
        _from(topology, "w3", s1, [part(w3, 5, 6)]),
        _from(topology, "w2", root, [part(w2, 3, 4)]),
        _from(topology, "w3", s1, [part(w3, 5, 6)]),
    ]


def test_bmv2_and_the_model_agree_that_a_node_keeps_no_result_some_of_its_workers_miss(
        labs: Labs) -> None:
    got, counters = _crafted_on_both(labs, AWAY_SPEC, _away_batches)
    results = {h: [InaPacket.unpack(p) for p in got[h]
                   if InaHeader.unpack(p).flags & Flag.RESULT] for h in ("w1", "w2", "w3")}
    # w3's values again: s1's aggregate up, the root's result to s1's workers (w1 too).
    assert {h: len(r) for h, r in results.items()} == {"w1": 2, "w2": 1, "w3": 2}
    assert all(r.values[:2] == (9, 12) for rs in results.values() for r in rs)
    s1, s7 = counters["s1"], counters["s7"]
    assert _job_cell(s1, JobStat.KEPT) == 0
    assert (_job_cell(s1, JobStat.EMITTED), _job_cell(s7, JobStat.RESENT)) == (2, 1)


#: A root that holds workers of three BIER sets itself (a cell per set).
SETS_SPEC = {"job_id": 17, "op": "sum", "workers": ["h1_1", "h2_1", "h3_1"], "root": "spine1",
             "aggregators": {}}


def _sets_query_batches(topology: Topology) -> list[Batch]:
    """QUERYs to SETS_SPEC's root about round START: held (h1_1's values in, the
    others' not yet), missing (h2_1's), complete (h3_1's, after all three); one of
    another plan."""
    job, root = 17, topology.switches["spine1"].loopback
    query = Flag.SYNC | Flag.NODATA

    def header(host: str, flags: Flag, gen: int = 0, values: tuple[int, ...] = ()) -> bytes:
        si, bits = one_set(bit_of(topology.hosts[host].bfr_id))
        return _header(job, START, bits, flags, gen=gen, values=values, si=si)

    return [
        _from(topology, "h1_1", root, [header("h1_1", Flag.SYNC)]),
        _from(topology, "h1_1", root, [header("h1_1", Flag.NONE, values=(1, 2)),
                                       header("h1_1", query)]),
        _from(topology, "h2_1", root, [header("h2_1", query)]),
        _from(topology, "h2_1", root, [header("h2_1", Flag.NONE, values=(3, 4))]),
        _from(topology, "h3_1", root, [header("h3_1", Flag.NONE, values=(5, 6))]),
        _from(topology, "h3_1", root, [header("h3_1", query)]),
        _from(topology, "h1_1", root, [header("h1_1", query, gen=5)]),
    ]


def test_bmv2_and_the_model_agree_on_queries_at_a_root_of_several_sets(labs: Labs) -> None:
    got, counters = _crafted_on_both(labs, SETS_SPEC, _sets_query_batches,
                                     topology="leaf-spine-2x4-sets")
    answer = Flag.SYNC | Flag.NODATA | Flag.REPLY
    verdicts = {h: sorted((a.count, a.flags) for a in map(InaHeader.unpack, got[h])
                          if a.flags & Flag.NODATA) for h in ("h1_1", "h2_1", "h3_1")}
    assert verdicts == {
        "h1_1": [(int(QueryVerdict.HELD), answer), (99, answer | Flag.REPLAN)],
        "h2_1": [(int(QueryVerdict.SEND), answer)],
        "h3_1": [(int(QueryVerdict.SEND), answer)]}
    assert (_job_cell(counters["spine1"], JobStat.QUERIED),
            _job_cell(counters["spine1"], JobStat.QUERY_HELD)) == (3, 1)


def test_bmv2_and_the_model_agree_on_an_undeclared_port(labs: Labs) -> None:
    got, counters = _crafted_on_both(labs, WINDOW_SPEC, _undeclared_batches, _forget_w8)
    assert _switch_cell(counters["s4"], SwitchStat.DROP_UNDECLARED_PORT) == 3
    # Counted as received by the port (before any check), and nothing else anywhere.
    assert counters["s4"][f"{n.PORT_RECEIVED}[3]"][0] == 3
    assert sum(p for c in counters.values() for p, _ in c.values()) == 3 + 3
    assert not any(got.values())
