"""Congestion marks on the reference model (INA version 5; p4src/include/congestion.p4
and aggregation.p4): a packet leaving a port whose BMv2 queue was deep, or whose
phantom queue holds more than its threshold, is marked (IPv4 CE if ECN-capable,
Ecn.CE in an INA header); a mark on any contribution reaches every worker's result,
NODATA rounds, completions and resends included; IPv4 CE from a switch that knows
no INA goes into the INA header. Figure 1's job: s1 aggregates w1, w2 (s1:1 leads up
to s5); s7 w3, w4; s6 is the root; its result goes s6 -> s7 -> s5 -> s1 and s2.
tests/bmv2/test_marks.py checks BMv2 does the same."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from ina.control import p4names as n
from ina.control.switch import CounterValue
from ina.control.vat_planner import plan_job
from ina.model.harness import allreduce_on_model, deployed_network
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, InaPacket, ina_payload, nodata_payload
from ina.protocol.constants import (
    ETHERNET_BYTES,
    INA_HEADER_BYTES,
    INA_PAYLOAD_BYTES,
    IPV4_ECN_CE,
    MARK_QDEPTH,
    PHANTOM_RATE_SHIFT,
    Ecn,
    Flag,
    JobStat,
)
from ina.protocol.frames import ina_frame, parse_frame, udp_frame
from ina.spec.job import Job
from ina.spec.topology import Queues, Topology

from inatest import ROOT, ModelLab, figure1_job, make_model_lab, open_call

WORKERS = ("w1", "w2", "w3", "w4")
S1_UP = 1  # s1's port toward s5: w1's and w2's partial result leaves by it
S1_TO_W1 = 2
#: A contribution on a host's link: Ethernet, IPv4 (20 bytes), UDP (8), the INA payload.
INA_FRAME = ETHERNET_BYTES + 20 + 8 + INA_PAYLOAD_BYTES


def _deploy(lab: ModelLab, **overrides: object) -> tuple[Job, int]:
    """Figure 1's job deployed and a call open: (job, the call's first seq)."""
    job = figure1_job(lab.topology, **overrides)
    asyncio.run(lab.ctl.deploy(job))
    return job, open_call(lab, job)


def _frame(lab: ModelLab, job: Job, worker: str, payload: bytes, tos: int = 0) -> bytes:
    """A worker's INA packet to its parent as its kernel would send it, with the IPv4
    TOS byte ``tos`` (its low two bits: the ECN field)."""
    h = lab.topology.hosts[worker]
    edge, _ = lab.topology.host_attachment(worker)
    raw = bytearray(ina_frame(h.mac, lab.topology.switches[edge].mac, h.ip,
                              job.target_of(worker, lab.topology), payload))
    if tos:
        frame = parse_frame(bytes(raw))
        assert frame.ipv4 is not None
        frame.ipv4.tos = tos
        return frame.pack()
    return bytes(raw)


def _send(lab: ModelLab, job: Job, worker: str, payload: bytes, tos: int = 0) -> None:
    lab.net.send(worker, _frame(lab, job, worker, payload, tos))


def _results(lab: ModelLab) -> dict[str, list[InaHeader]]:
    """The INA headers that reached each host, drained."""
    return {h: [InaHeader.unpack(p) for p in lab.net.received_payloads(h)]
            for h in lab.topology.hosts}


def _ports(lab: ModelLab, switch: str) -> tuple[dict[int, int], dict[int, int]]:
    """(packets sent, packets marked) per port of ``switch``, as inactl status shows."""
    s = asyncio.run(lab.ctl.status())[switch]
    return ({p: v.packets for p, v in s.port_packets.items() if v.packets},
            {p: v.packets for p, v in s.port_marks.items() if v.packets})


def _contributions(lab: ModelLab, job: Job, seq: int, marked: str | None = None,
                   tos_of: str | None = None) -> None:
    """Every worker's contribution to ``seq``; ``marked``'s with Ecn.CE in its INA
    header, ``tos_of``'s with IPv4 CE (as a switch that knows no INA marks it)."""
    for i, w in enumerate(WORKERS):
        payload = ina_payload(1, seq, job.worker_bit[w], [i + 1] * 8)
        if w == marked:
            payload = _marked(payload)
        _send(lab, job, w, payload, IPV4_ECN_CE if w == tos_of else 0)


def _marked(payload: bytes) -> bytes:
    """An INA payload with Ecn.CE in its header."""
    header = InaHeader.unpack(payload)
    return replace(header, ecn=Ecn.CE).pack() + payload[INA_HEADER_BYTES:]


# --- nothing is marked unless a queue says so ------------------------------------------


def test_an_allreduce_leaves_no_mark_without_queues(figure1: Topology) -> None:
    job = figure1_job(figure1)
    net, ctl = deployed_network(figure1, job)
    sessions = allreduce_on_model(net, job, {w: np.arange(600) * (i + 1)
                                             for i, w in enumerate(job.workers)})
    assert all(s.done for s in sessions.values())
    status = asyncio.run(ctl.status())
    assert not any(v.packets for s in status.values() for v in s.port_marks.values())
    sent = {sw: sum(v.packets for v in s.port_packets.values()) for sw, s in status.items()}
    assert sent["s1"] > 0 and sent["s6"] > 0  # every packet that left a port is counted


def test_the_result_carries_no_mark_when_no_contribution_had_one(model_lab: ModelLab) -> None:
    job, seq = _deploy(model_lab)
    _contributions(model_lab, job, seq)
    results = _results(model_lab)
    for w in WORKERS:
        (header,) = results[w]
        assert header.flags & Flag.RESULT and header.ecn == Ecn.NONE, w


# --- a deep BMv2 queue ------------------------------------------------------------------


def test_a_deep_egress_queue_marks_what_leaves_by_that_port(model_lab: ModelLab) -> None:
    job, seq = _deploy(model_lab)
    model_lab.net.queue_depth[("s1", S1_TO_W1)] = MARK_QDEPTH
    _contributions(model_lab, job, seq)
    results = _results(model_lab)
    assert results["w1"][0].ecn == Ecn.CE  # its copy left by the deep queue
    assert all(results[w][0].ecn == Ecn.NONE for w in ("w2", "w3", "w4"))
    sent, marked = _ports(model_lab, "s1")
    assert marked == {S1_TO_W1: 1} and sent[S1_TO_W1] == 2  # the call's answer, the result


def test_a_queue_one_packet_short_of_the_threshold_marks_nothing(model_lab: ModelLab) -> None:
    job, seq = _deploy(model_lab)
    model_lab.net.queue_depth[("s1", S1_TO_W1)] = MARK_QDEPTH - 1
    _contributions(model_lab, job, seq)
    assert all(r[0].ecn == Ecn.NONE for w, r in _results(model_lab).items() if w in WORKERS)
    assert _ports(model_lab, "s1")[1] == {}


# --- the phantom queue ------------------------------------------------------------------


class Clock:
    """The switches' clock, in microseconds, moved by the test."""

    def __init__(self) -> None:
        self.us = 1_000_000

    def __call__(self) -> int:
        return self.us


def _phantom_lab(figure1: Topology, queues: Queues) -> tuple[ModelLab, Clock]:
    lab = make_model_lab(figure1.with_queues(queues))
    clock = Clock()
    lab.net.clock_us = clock
    return lab, clock


def _udp(lab: ModelLab, src: str, dst: str, size: int, tos: int) -> bytes:
    """A plain UDP datagram from host ``src`` to ``dst`` (not INA), ``size`` bytes of
    payload, with the IPv4 TOS byte ``tos``."""
    s, d = lab.topology.hosts[src], lab.topology.hosts[dst]
    edge, _ = lab.topology.host_attachment(src)
    frame = parse_frame(udp_frame(s.mac, lab.topology.switches[edge].mac, s.ip, d.ip, 5000,
                                  5001, bytes(size)))
    assert frame.ipv4 is not None
    frame.ipv4.tos = tos
    return frame.pack()


def _tos_at(lab: ModelLab, host: str) -> list[int]:
    """The IPv4 TOS byte of each frame that reached ``host``, drained; each frame's
    IPv4 checksum is checked on the way."""
    out = []
    while (raw := lab.net.receive(host)) is not None:
        frame = parse_frame(raw)
        assert frame.ipv4 is not None and frame.ipv4.checksum_ok
        out.append(frame.ipv4.tos)
    return out


def test_the_phantom_queue_marks_past_its_threshold_at_the_link_rate(
        figure1: Topology) -> None:
    """1 Mbit/s (128 bytes per 1,024 us), marking above 3,000 bytes: a burst of
    1,000-byte frames from w1 to w2 fills s1's port 3; the fourth frame is the
    first above the threshold. After the queue drained, nothing is marked."""
    lab, clock = _phantom_lab(figure1, Queues(rate=1.0, buffer=20000, mark=3000))
    frame = _udp(lab, "w1", "w2", 1000 - 42, tos=2)  # ECT(0), 1,000 bytes on the wire
    for _ in range(6):
        lab.net.send("w1", frame)
    assert _tos_at(lab, "w2") == [2, 2, 2, 3, 3, 3]  # 1,000 .. 3,000 bytes, then above
    sent, marked = _ports(lab, "s1")
    assert sent[3] == 6 and marked == {3: 3}
    # 6,000 bytes drain at 128 bytes per 1,024 us in 48 ms.
    clock.us += 6000 * (1 << PHANTOM_RATE_SHIFT) // 128
    for _ in range(3):
        lab.net.send("w1", frame)
    assert _tos_at(lab, "w2") == [2, 2, 2]


def test_the_phantom_queue_drains_between_packets_at_the_rate(figure1: Topology) -> None:
    """Frames sent no faster than the link drains them never build a queue."""
    lab, clock = _phantom_lab(figure1, Queues(rate=1.0, buffer=20000, mark=1500))
    frame = _udp(lab, "w1", "w2", 1000 - 42, tos=1)  # ECT(1)
    for _ in range(20):
        lab.net.send("w1", frame)
        clock.us += 8000  # 1,000 bytes at 1 Mbit/s
    assert _tos_at(lab, "w2") == [1] * 20
    assert _ports(lab, "s1")[1] == {}


def test_the_phantom_queue_holds_no_more_than_the_buffer(figure1: Topology) -> None:
    """A link's buffer drops what does not fit: the phantom queue stops at it, so it
    empties as fast as the real one once the burst ends."""
    lab, clock = _phantom_lab(figure1, Queues(rate=1.0, buffer=4000, mark=3000))
    frame = _udp(lab, "w1", "w2", 1000 - 42, tos=2)
    for _ in range(50):
        lab.net.send("w1", frame)
    _tos_at(lab, "w2")
    clock.us += 4000 * (1 << PHANTOM_RATE_SHIFT) // 128  # 4,000 bytes drained: empty
    lab.net.send("w1", frame)
    assert _tos_at(lab, "w2") == [2]


def test_ipv4_ce_is_set_only_on_ecn_capable_packets(figure1: Topology) -> None:
    lab, _ = _phantom_lab(figure1, Queues(rate=1.0, buffer=20000, mark=1500))
    for tos in (0x00, 0x01, 0x02, 0x03, 0xB8, 0xBA):  # not ECT, ECT(1), ECT(0), CE; DSCP EF
        for _ in range(3):
            lab.net.send("w1", _udp(lab, "w1", "w2", 958, tos))
        *_, last = _tos_at(lab, "w2")  # the third is above the threshold
        assert last == (tos if tos & 3 == 0 else tos | 3), hex(tos)
    assert _ports(lab, "s1")[1][3] >= 6  # marked, whether the header could say so or not


def test_the_controller_writes_a_phantom_queue_for_every_port(figure1: Topology) -> None:
    queues = Queues(rate=2.0, buffer=30000, mark=7500)
    lab = make_model_lab(figure1.with_queues(queues))
    for sw in figure1.switches:
        entries = lab.stores[sw].tables[n.PORT_QUEUES.name]
        assert {e.match_value("egress_port") for e in entries.values()} == \
            set(figure1.declared_ports(sw))
        for e in entries.values():
            assert (e.action, e.param("rate"), e.param("mark"), e.param("limit")) == \
                (n.PHANTOM_QUEUE.name, 2 * 128, 7500, 30000)
    assert n.PORT_QUEUES.name not in make_model_lab(figure1).stores["s1"].tables


# --- marks through aggregation ----------------------------------------------------------


def test_a_partial_result_marked_on_its_way_up_marks_every_workers_result(
        model_lab: ModelLab) -> None:
    """s1's partial result (w1 + w2) leaves by a deep queue: the root's result, by
    BIER to all four workers, is marked; so are the partial result's later resends."""
    job, seq = _deploy(model_lab)
    model_lab.net.queue_depth[("s1", S1_UP)] = MARK_QDEPTH
    _contributions(model_lab, job, seq)
    results = _results(model_lab)
    for w in WORKERS:
        (header,) = results[w]
        assert header.flags & Flag.RESULT and header.ecn == Ecn.CE, w
    assert not any(results[h] for h in ("w5", "w6", "w7", "w8"))


@pytest.mark.parametrize("how", ["ina", "ipv4"])
def test_one_marked_contribution_marks_every_workers_result(model_lab: ModelLab,
                                                            how: str) -> None:
    """w3's contribution carries CE, in its INA header or (marked by a switch that
    knows no INA) in its IPv4 header: s7 ORs it into its cell, the root into its
    result, and every worker's copy carries it."""
    job, seq = _deploy(model_lab)
    _contributions(model_lab, job, seq, marked="w3" if how == "ina" else None,
                   tos_of="w3" if how == "ipv4" else None)
    results = _results(model_lab)
    for w in WORKERS:
        (header,) = results[w]
        assert header.ecn == Ecn.CE, w


def test_a_mark_on_the_completing_contribution_reaches_the_result(model_lab: ModelLab) -> None:
    job, seq = _deploy(model_lab)
    _contributions(model_lab, job, seq, marked="w4")  # w4's completes s7's cell
    assert all(r[0].ecn == Ecn.CE for w, r in _results(model_lab).items() if w in WORKERS)


def test_a_node_of_one_contributor_passes_its_mark_on(model_lab: ModelLab) -> None:
    """s1 aggregates w1 alone: w1's packet starts and completes the cell."""
    job, seq = _deploy(model_lab, aggregators={"s1": ["w1"], "s7": ["w3", "w4"]})
    _contributions(model_lab, job, seq, marked="w1")
    assert all(r[0].ecn == Ecn.CE for w, r in _results(model_lab).items() if w in WORKERS)


def test_a_resend_carries_the_cells_mark_or_its_own(model_lab: ModelLab) -> None:
    """A retransmission for a complete cell gets the aggregate again: marked if the
    round was, or if the retransmission itself is."""
    job, seq = _deploy(model_lab)
    _contributions(model_lab, job, seq, marked="w2")
    _results(model_lab)
    _send(model_lab, job, "w3", ina_payload(1, seq, bit_of(3), [3] * 8))  # unmarked
    (resent,) = _results(model_lab)["w3"]
    assert resent.ecn == Ecn.CE and resent.flags & Flag.RESULT
    _contributions(model_lab, job, seq + 1)  # a round without a mark
    _results(model_lab)
    _send(model_lab, job, "w3", ina_payload(1, seq + 1, bit_of(3), [3] * 8))
    assert _results(model_lab)["w3"][0].ecn == Ecn.NONE
    _send(model_lab, job, "w3", _marked(ina_payload(1, seq + 1, bit_of(3), [3] * 8)))
    assert _results(model_lab)["w3"][0].ecn == Ecn.CE


def test_a_nodata_round_carries_a_mark(model_lab: ModelLab) -> None:
    job, seq = _deploy(model_lab)
    for w in WORKERS:
        payload = nodata_payload(1, seq, job.worker_bit[w], 1)
        _send(model_lab, job, w, _marked(payload) if w == "w1" else payload)
    results = _results(model_lab)
    for w in WORKERS:
        (header,) = results[w]
        assert header.flags & Flag.NODATA and header.ecn == Ecn.CE, w


def test_a_completion_cut_at_bier_egress_keeps_the_mark(model_lab: ModelLab) -> None:
    """A result for w1 alone (dest): the others' copies leave as completions, marked."""
    job, seq = _deploy(model_lab)
    for w in WORKERS:
        payload = ina_payload(1, seq, job.worker_bit[w], [1] * 8, dest=1)
        _send(model_lab, job, w, _marked(payload) if w == "w4" else payload)
    packets = {h: [InaPacket.unpack(p) for p in model_lab.net.received_payloads(h)]
               for h in WORKERS}
    assert packets["w1"][0].values and not packets["w1"][0].header.flags & Flag.NODATA
    for w in WORKERS:
        assert packets[w][0].header.ecn == Ecn.CE, w
        assert bool(packets[w][0].header.flags & Flag.NODATA) == (w != "w1"), w


def test_a_root_spanning_bier_sets_carries_a_mark() -> None:
    """A root of four BIER sets keeps a bitmap per (cell, set) (record_sets): one
    marked contribution still marks every worker's result."""
    topology = Topology.load(ROOT / "topologies" / "leaf-spine-2x4-sets.yaml")
    workers = ["h1_1", "h2_1", "h3_1", "h4_1"]  # one per leaf: one per set
    job = plan_job(topology, 1, workers, root="spine1").job
    lab = make_model_lab(topology)
    asyncio.run(lab.ctl.deploy(job))
    seq = open_call(lab, job)
    for i, w in enumerate(workers):
        payload = ina_payload(1, seq, job.worker_bit[w], [i] * 4)
        lab.net.host_send_payload(w, job.target_of(w, lab.topology),
                                  _marked(payload) if w == "h3_1" else payload)
    for w in workers:
        (payload,) = lab.net.received_payloads(w)
        header = InaHeader.unpack(payload)
        assert header.flags & Flag.RESULT and header.ecn == Ecn.CE, w
    stats = asyncio.run(lab.ctl.status())["spine1"].job_stats[1]
    assert stats[JobStat.MULTICAST].packets == 1


def test_status_shows_each_ports_packets_in_and_out_and_marks(model_lab: ModelLab) -> None:
    from ina.control.report import render_status

    job, seq = _deploy(model_lab)
    model_lab.net.queue_depth[("s1", S1_TO_W1)] = MARK_QDEPTH
    _contributions(model_lab, job, seq)
    status = asyncio.run(model_lab.ctl.status())
    assert status["s1"].port_marks[S1_TO_W1] == CounterValue(1, INA_FRAME + 44)
    # Each worker's SYNC and contribution in, the root's result in by port 3.
    assert ("ports: 1 received 2 sent 2 marked 0, 2 received 2 sent 2 marked 1 (50.0%), "
            "3 received 1 sent 1 marked 0") in render_status(status)
