"""The failover data plane on the reference model (Figure 1): a worker's edge switch
steers its packets in the plan's generation and tells it of a new plan (REPLAN) or
of reduction on hosts (ON_HOSTS); a VAT node refuses another plan's packets; the
first SYNC of a plan fixes the call's start; link probes go out and up through
the CPU port. Each test sends one thing and checks all that came of it: every
frame and every counter (tests/bmv2 checks BMv2 agrees).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from ina.control import p4names as n
from ina.control.detect import Probe
from ina.control.switch_state import on_hosts_plan
from ina.model.switch import packet_out_frame, split_packet_in
from ina.protocol.codec import InaHeader, InaPacket, array_bytes
from ina.protocol.constants import (
    CPU_PORT,
    JOB_STAT_STRIDE,
    QUERY,
    Flag,
    JobStat,
    Op,
    QueryVerdict,
    SwitchStat,
)
from ina.protocol.frames import ina_frame, mac_bytes, parse_frame
from ina.spec.job import Job

from inatest import ModelLab

W1, W2 = "10.0.0.1", "10.0.0.2"
S1, S6, S7 = "10.0.100.1", "10.0.100.6", "10.0.100.7"
W1_PORT = 2  # s1's port to w1
ON_HOSTS_JOB = 7


def _deploy(lab: ModelLab, gen: int = 0) -> Job:
    """The Figure 1 job (job index 0 everywhere), its plan in generation ``gen``."""
    job = lab.deploy_figure1()
    for store in lab.stores.values():
        for spec in (n.VAT_JOBS, n.JOB_MEMBERS):
            table = store.tables.get(spec.name, {})
            for key, e in table.items():
                if "gen" in dict(e.params):
                    table[key] = replace(e, params=tuple(
                        (k, gen if k == "gen" else v) for k, v in e.params))
    return job


def _on_hosts(lab: ModelLab, gen: int) -> None:
    """Job ON_HOSTS_JOB, of w1 and w3, on no switch: reduced on the hosts."""
    plan = on_hosts_plan(ON_HOSTS_JOB, ["w1", "w3"], 4, lab.topology, gen)
    for sw, entries in plan.items():
        asyncio.run(lab.stores[sw].insert(entries))


def _packet(seq: int, pbm: int, values: list[int] | None = None, flags: Flag = Flag.NONE,
            gen: int = 0, job_id: int = 1) -> bytes:
    """An INA payload; with flags SYNC, a header alone (its count a nonce)."""
    if flags & Flag.SYNC:
        return InaHeader(job_id=job_id, seq=seq, pbm=pbm, count=77, op=Op.SUM, flags=flags,
                         gen=gen).pack()
    values = values if values is not None else [5, -6, 7]
    header = InaHeader(job_id=job_id, seq=seq, pbm=pbm, count=len(values), op=Op.SUM,
                       flags=flags, gen=gen)
    return InaPacket(header, tuple(values)).pack()


def _from_w1(dst: str, payload: bytes) -> bytes:
    return ina_frame("00:00:00:00:00:01", "02:00:00:00:00:01", W1, dst, payload)


def _counts(lab: ModelLab) -> dict[str, dict[str, int]]:
    """Every counter cell that counted, per switch: switch.<stat> or job<index>.<stat>."""
    out: dict[str, dict[str, int]] = {}
    for sw, store in lab.stores.items():
        cells: dict[str, int] = {}
        for name in n.SWITCH_STAT_COUNTERS:
            for i, v in store.counters.get(name, {}).items():
                cells[f"switch.{SwitchStat(i).name}"] = v.packets
        for name in n.JOB_STAT_COUNTERS:
            for i, v in store.counters.get(name, {}).items():
                cells[f"job{i // JOB_STAT_STRIDE}.{JobStat(i % JOB_STAT_STRIDE).name}"] = v.packets
        if cells:
            out[sw] = cells
    return out


def _inboxes(lab: ModelLab) -> dict[str, list[tuple[str, bytes]]]:
    """What each host received, as (source address, INA payload), if anything."""
    got = {h: lab.net.received_datagrams(h) for h in lab.topology.hosts}
    return {h: d for h, d in got.items() if d}


def _probe(lab: ModelLab, switch: str, port: int) -> bytes:
    sw = lab.topology.switches[switch]
    return Probe(sw.device_id, port, 1).frame(mac_bytes(sw.mac))


# --- steering --------------------------------------------------------------------


def test_a_workers_contribution_leaves_its_edge_for_its_parent(model_lab: ModelLab) -> None:
    _deploy(model_lab)
    payload = _packet(0, 4)
    w3 = ina_frame("00:00:00:00:00:03", "02:00:00:00:00:02", "10.0.0.3", "10.0.0.8", payload)
    ((port, out),) = model_lab.net.switches["s2"].process(2, w3)
    frame = parse_frame(out)
    assert port == 1 and frame.ipv4 is not None and frame.ipv4.dst == S7
    assert frame.pack()[14 + 20 + 8:] == payload
    assert _counts(model_lab) == {"s2": {"job0.TRANSIT": 1}}


def test_a_workers_sync_leaves_its_edge_for_the_root_in_the_plans_generation(
        model_lab: ModelLab) -> None:
    _deploy(model_lab, gen=3)
    ((port, out),) = model_lab.net.switches["s1"].process(
        W1_PORT, _from_w1(S1, _packet(0, 1, flags=Flag.SYNC)))
    frame = parse_frame(out)
    assert port == 1 and frame.ipv4 is not None and frame.ipv4.dst == S6
    assert frame.ina == InaHeader(job_id=1, seq=0, pbm=1, count=77, op=Op.SUM, flags=Flag.SYNC,
                                  gen=3)
    assert _counts(model_lab) == {"s1": {"job0.PASSED": 1}}


# --- notices -----------------------------------------------------------------------


def test_a_contribution_of_an_old_plan_is_told_replan_and_not_aggregated(
        model_lab: ModelLab) -> None:
    _deploy(model_lab, gen=1)
    model_lab.net.send("w1", _from_w1(S1, _packet(5, 1, [9, 8], gen=0)))
    notice = InaHeader(job_id=1, seq=5, pbm=1, count=2, op=Op.SUM,
                       flags=Flag.SYNC | Flag.REPLY | Flag.REPLAN, gen=1)
    # A notice keeps the contribution's array, though its flags say SYNC.
    assert _inboxes(model_lab) == {"w1": [(S1, notice.pack() + array_bytes((9, 8)))]}
    assert _counts(model_lab) == {"s1": {"job0.TOLD": 1}}


def test_a_query_of_an_old_plan_is_told_replan_as_a_header_alone(model_lab: ModelLab) -> None:
    _deploy(model_lab, gen=1)
    model_lab.net.send("w1", _from_w1(S1, _packet(5, 1, flags=QUERY, gen=0)))
    notice = InaHeader(job_id=1, seq=5, pbm=1, count=77, op=Op.SUM,
                       flags=Flag.SYNC | Flag.REPLY | Flag.REPLAN | Flag.NODATA, gen=1)
    assert _inboxes(model_lab) == {"w1": [(S1, notice.pack())]}
    assert _counts(model_lab) == {"s1": {"job0.TOLD": 1}}


def test_a_workers_query_is_steered_to_its_parent_not_the_root(model_lab: ModelLab) -> None:
    _deploy(model_lab, gen=3)
    ((port, out),) = model_lab.net.switches["s1"].process(
        W1_PORT, _from_w1(S6, _packet(0, 1, flags=QUERY, gen=3)))
    frame = parse_frame(out)  # s1 is w1's parent: it answers, SEND (nothing held)
    assert port == W1_PORT and frame.ipv4 is not None and frame.ipv4.dst == W1
    assert frame.ina == InaHeader(job_id=1, seq=0, pbm=1, count=int(QueryVerdict.SEND),
                                  op=Op.SUM, flags=QUERY | Flag.REPLY, gen=3)


def test_a_sync_of_a_job_on_hosts_is_told_on_hosts(model_lab: ModelLab) -> None:
    _on_hosts(model_lab, gen=2)
    model_lab.net.send("w1", _from_w1(S6, _packet(0, 1, flags=Flag.SYNC, job_id=ON_HOSTS_JOB)))
    notice = InaHeader(job_id=ON_HOSTS_JOB, seq=0, pbm=1, count=77, op=Op.SUM,
                       flags=Flag.SYNC | Flag.REPLY | Flag.ON_HOSTS, gen=2)
    assert _inboxes(model_lab) == {"w1": [(S6, notice.pack())]}
    # No job entry on s1: BMv2's zeroed metadata counts it at job index 0.
    assert _counts(model_lab) == {"s1": {"job0.TOLD": 1}}


def test_a_contribution_of_a_job_on_hosts_is_told_on_hosts(model_lab: ModelLab) -> None:
    _on_hosts(model_lab, gen=2)
    model_lab.net.send("w1", _from_w1(W2, _packet(3, 1, [4], job_id=ON_HOSTS_JOB)))
    notice = InaHeader(job_id=ON_HOSTS_JOB, seq=3, pbm=1, count=1, op=Op.SUM,
                       flags=Flag.SYNC | Flag.REPLY | Flag.ON_HOSTS, gen=2)
    assert _inboxes(model_lab) == {"w1": [(W2, notice.pack() + array_bytes((4,)))]}
    assert _counts(model_lab) == {"s1": {"job0.TOLD": 1}}


def test_an_abort_of_a_job_on_hosts_is_consumed_at_its_edge(model_lab: ModelLab) -> None:
    _on_hosts(model_lab, gen=2)
    model_lab.net.send("w1", _from_w1(S6, _packet(9, 1, flags=Flag.SYNC | Flag.ABORT,
                                                  job_id=ON_HOSTS_JOB)))
    assert _inboxes(model_lab) == {}
    assert _counts(model_lab) == {}


# --- VAT nodes ----------------------------------------------------------------------


def test_a_contribution_of_another_plan_is_dropped_at_a_vat_node(model_lab: ModelLab) -> None:
    _deploy(model_lab, gen=0)
    s5, s7 = model_lab.topology.switches["s5"], model_lab.topology.switches["s7"]
    model_lab.net.inject("s7", 1, ina_frame(s5.mac, s7.mac, "10.0.100.5", S7,
                                            _packet(0, 4, gen=1)))
    assert _inboxes(model_lab) == {}
    assert _counts(model_lab) == {"s7": {"job0.DROP_OLD_PLAN": 1}}


# --- a call's start ---------------------------------------------------------------------


def _sync_answer(lab: ModelLab, host: str, proposal: int) -> InaHeader:
    """The root's answer to ``host``'s SYNC proposing ``proposal``."""
    bit = {"w1": 1, "w2": 2}[host]
    lab.net.host_send_payload(host, S6, _packet(proposal, bit, flags=Flag.SYNC))
    ((src, payload),) = lab.net.received_datagrams(host)
    assert src == S6
    return InaHeader.unpack(payload)


def test_the_first_sync_of_a_plan_gets_its_proposal_in_the_plans_generation(
        model_lab: ModelLab) -> None:
    _deploy(model_lab, gen=4)
    model_lab.net.host_send_payload("w1", S6, _packet(1000, 1, flags=Flag.SYNC))
    answer = InaHeader(job_id=1, seq=1000, pbm=1, count=77, op=Op.SUM,
                       flags=Flag.SYNC | Flag.REPLY, gen=4)
    assert _inboxes(model_lab) == {"w1": [(S6, answer.pack())]}
    assert _counts(model_lab) == {"s1": {"job0.PASSED": 2}, "s5": {"job0.TRANSIT": 2},
                                  "s7": {"job0.PASSED": 2}, "s6": {"job0.SYNCED": 1}}


def test_a_later_sync_gets_the_first_syncs_answer(model_lab: ModelLab) -> None:
    _deploy(model_lab)
    _sync_answer(model_lab, "w1", 1000)
    assert _sync_answer(model_lab, "w2", 5).seq == 1000


def test_after_a_completion_a_sync_gets_the_completed_seq_plus_the_window_plus_one(
        model_lab: ModelLab) -> None:
    job = _deploy(model_lab)
    _sync_answer(model_lab, "w1", 1000)
    for w in job.workers:
        model_lab.net.host_send_payload(w, job.target_of(w, model_lab.topology),
                                        _packet(1000, job.worker_bit[w], [1]))
    results = _inboxes(model_lab)
    assert sorted(results) == sorted(job.workers)
    assert _sync_answer(model_lab, "w2", 5).seq == 1000 + 2 * job.slots + 1


# --- link probes ------------------------------------------------------------------------


def test_a_packet_out_leaves_by_the_port_it_names(model_lab: ModelLab) -> None:
    probe = _probe(model_lab, "s5", 2)
    out = model_lab.net.switches["s5"].process(CPU_PORT, packet_out_frame(2, probe))
    assert out == [(2, probe)]
    assert _counts(model_lab) == {"s5": {"switch.PROBE_SENT": 1}}
    sent = model_lab.stores["s5"].counters[n.INGRESS_SWITCH_STATS][SwitchStat.PROBE_SENT]
    assert sent.bytes == len(probe) + 2  # the packet_out header counted, as on BMv2


def test_a_probe_from_a_switch_port_goes_to_the_cpu_port_with_its_ingress_port(
        model_lab: ModelLab) -> None:
    probe = _probe(model_lab, "s5", 2)
    ((port, out),) = model_lab.net.switches["s1"].process(1, probe)
    assert port == CPU_PORT and split_packet_in(out) == (1, probe)
    assert _counts(model_lab) == {"s1": {"switch.PROBE_RECEIVED": 1}}


def test_a_probe_crosses_a_link_from_packet_out_to_packet_in(model_lab: ModelLab) -> None:
    probe = _probe(model_lab, "s5", 2)
    model_lab.net.packet_out("s5", 2, probe)
    assert {sw: got for sw in model_lab.topology.switches
            if (got := model_lab.net.packet_ins(sw))} == {"s1": [(1, probe)]}
    assert _inboxes(model_lab) == {}


def test_a_probe_from_a_host_port_is_dropped_as_not_supported(model_lab: ModelLab) -> None:
    model_lab.net.send("w1", _probe(model_lab, "s5", 2))
    assert not any(model_lab.net.packet_ins(sw) for sw in model_lab.topology.switches)
    assert _counts(model_lab) == {"s1": {"switch.DROP_NOT_SUPPORTED": 1}}


def test_a_packet_out_to_a_port_without_a_link_is_lost(model_lab: ModelLab) -> None:
    model_lab.net.packet_out("s5", 9, _probe(model_lab, "s5", 9))
    assert not any(model_lab.net.packet_ins(sw) for sw in model_lab.topology.switches)
    assert _inboxes(model_lab) == {}
    assert _counts(model_lab) == {"s5": {"switch.PROBE_SENT": 1}}



def test_a_bier_packet_out_is_masked_by_the_ports_fbm_and_keeps_its_bift_id(
        model_lab: ModelLab) -> None:
    from ina.protocol.frames import Bier, bier_frame

    # s5's port 2 leads to s1, whose hosts are w1 and w2 (bits 1, 2) in set 0.
    w = model_lab.topology.hosts["w5"]
    frame = bier_frame(w.mac, "02:00:00:00:00:05", w.ip, Bier(bitstring=0b1111),
                       _packet(0, 1, [1]))
    ((port, out),) = model_lab.net.switches["s5"].process(CPU_PORT, packet_out_frame(2, frame))
    sent = parse_frame(out)
    assert port == 2 and sent.bier is not None
    assert (sent.bier.bitstring, sent.bier.bift_id) == (0b0011, 1)
    assert _counts(model_lab) == {"s5": {"switch.PROBE_SENT": 1, "switch.BIER_COPY_SENT": 1}}
