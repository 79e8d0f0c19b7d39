"""What a switch lets in from its ports (reference model and the controller's
state): the controller declares every port (a host's, with its bit and address,
or a switch's); an undeclared port carries nothing; a host sends INA only from
its own address; and a host's INA packets of each job are policed at the
topology's rate."""

from __future__ import annotations

import asyncio

import pytest

from ina.control import p4names as n
from ina.control.allocation import Allocation
from ina.control.entities import Meter, TableEntry
from ina.control.switch_state import base_plan, bmv2_rate, job_plan
from ina.errors import TopologyError
from ina.protocol.bitmaps import bit_of, one_set
from ina.protocol.codec import InaHeader, array_bytes, ina_payload
from ina.protocol.constants import (
    ETHERTYPE_PROBE,
    HOST_BURST,
    HOST_RATE,
    OP_COPY,
    WIDTH32,
    Flag,
    JobStat,
    SwitchStat,
)
from ina.protocol.frames import Bier, bier_frame, ina_frame, ip_int, mac_bytes, udp_frame
from ina.spec.topology import Failures, Topology

from inatest import FIGURE1, ModelLab, figure1_job, open_call, switch_stat

W1 = "w1"


def _port_entries(topology: Topology, switch: str) -> dict[int, TableEntry]:
    return {int(e.match_value("ingress_port")): e for e in base_plan(topology, switch)  # type: ignore[arg-type]
            if isinstance(e, TableEntry) and e.table == n.HOST_PORTS.name}


def _host_ports(topology: Topology, switch: str) -> dict[int, tuple[str, dict[str, int]]]:
    return {port: (e.action, dict(e.params)) for port, e in _port_entries(topology, switch).items()}


def _forget_port(lab: ModelLab, switch: str, port: int) -> None:
    """The controller deletes the port's entry: the port is undeclared."""
    (entry,) = [e for e in lab.stores[switch].tables[n.HOST_PORTS.name].values()
                if e.match_value("ingress_port") == port]
    asyncio.run(lab.stores[switch].delete([entry]))


def test_the_base_state_declares_every_port_of_every_switch() -> None:
    topology = Topology.load(FIGURE1)
    for sw in topology.switches:
        ports = _host_ports(topology, sw)
        assert set(ports) == set(topology.ports(sw)), sw
        for port, nb in topology.ports(sw).items():
            action, params = ports[port]
            if nb.is_host:
                host = topology.hosts[nb.node]
                assert (action, params["host_ip"]) == (n.FROM_HOST.name, ip_int(host.ip))
            else:
                assert action == n.FROM_SWITCH.name


def test_a_failed_links_ports_stay_declared() -> None:
    # Its probes tell the watcher when it is back.
    topology = Topology.load(FIGURE1)
    failed = topology.without(Failures(links=frozenset({frozenset({"s1", "s5"})})))
    assert 1 not in failed.ports("s1")
    assert _host_ports(failed, "s1")[1] == (n.FROM_SWITCH.name, {})


def _frame_from_w1(lab: ModelLab, kind: str) -> bytes:
    h = lab.topology.hosts[W1]
    s1 = lab.topology.switches["s1"].mac
    if kind == "ipv4":
        return udp_frame(h.mac, s1, h.ip, "10.0.0.8", 5000, 5001, b"hello")
    if kind == "ina":
        return ina_frame(h.mac, s1, h.ip, "10.0.100.6",
                         InaHeader(job_id=1, seq=0, pbm=bit_of(1), count=1,
                                   flags=Flag.SYNC).pack())
    if kind == "bier":
        return bier_frame(h.mac, s1, h.ip, Bier(bitstring=0xFF),
                          ina_payload(1, 0, 0xF, [1], flags=Flag.RESULT))
    return mac_bytes("ff:ff:ff:ff:ff:ff") + mac_bytes(h.mac) + ETHERTYPE_PROBE.to_bytes(2, "big")


@pytest.mark.parametrize("kind", ["ipv4", "ina", "bier", "probe"])
def test_a_frame_on_an_undeclared_port_is_dropped_and_counted(model_lab: ModelLab,
                                                               kind: str) -> None:
    job = figure1_job(model_lab.topology)
    asyncio.run(model_lab.ctl.deploy(job))
    _forget_port(model_lab, "s1", 2)  # w1's
    model_lab.net.send(W1, _frame_from_w1(model_lab, kind))
    assert switch_stat(model_lab, "s1", SwitchStat.DROP_UNDECLARED_PORT) == 1
    assert not any(model_lab.net.inbox.values())
    assert not model_lab.net.packet_ins("s1")
    status = asyncio.run(model_lab.ctl.status())
    assert sum(v.packets for s in status.values() for v in s.switch_stats.values()) == 1


def test_plain_ipv4_from_a_declared_host_port_is_forwarded(model_lab: ModelLab) -> None:
    model_lab.net.send(W1, _frame_from_w1(model_lab, "ipv4"))
    assert len(model_lab.net.inbox["w8"]) == 1


def _spoofed(lab: ModelLab, payload: bytes, src: str = "10.0.0.5") -> bytes:
    h = lab.topology.hosts[W1]
    return ina_frame(h.mac, lab.topology.switches["s1"].mac, src, "10.0.100.6", payload)


def test_a_sync_from_another_address_is_dropped_at_the_edge(model_lab: ModelLab) -> None:
    # Its answer would go to w5.
    job = figure1_job(model_lab.topology)
    asyncio.run(model_lab.ctl.deploy(job))
    model_lab.net.send(W1, _spoofed(model_lab, InaHeader(
        job_id=1, seq=0, pbm=bit_of(1), count=1, flags=Flag.SYNC).pack()))
    assert switch_stat(model_lab, "s1", SwitchStat.DROP_SPOOFED_SOURCE) == 1
    assert not model_lab.net.inbox["w5"]
    assert asyncio.run(model_lab.ctl.status())["s6"].job_stats[1][JobStat.SYNCED].packets == 0


def test_a_contribution_from_another_address_is_dropped_at_the_edge(
        model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    asyncio.run(model_lab.ctl.deploy(job))
    open_call(model_lab, job)
    model_lab.net.send(W1, _spoofed(model_lab, ina_payload(1, 0, bit_of(1), [1])))
    assert switch_stat(model_lab, "s1", SwitchStat.DROP_SPOOFED_SOURCE) == 1
    assert asyncio.run(model_lab.ctl.status())["s1"].job_stats[1][JobStat.ABSORBED].packets == 0


def test_a_server_roots_bier_from_another_address_is_dropped(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology, root="w5")
    asyncio.run(model_lab.ctl.deploy(job))
    w5 = model_lab.topology.hosts["w5"]
    payload = ina_payload(1, 0, job.abm, [666], flags=Flag.RESULT)
    model_lab.net.send("w5", bier_frame(w5.mac, "02:00:00:00:00:03", "10.0.0.6",
                                        Bier(bitstring=job.abm), payload))
    assert switch_stat(model_lab, "s3", SwitchStat.DROP_SPOOFED_SOURCE) == 1
    assert all(not model_lab.net.inbox[w] for w in job.workers)


def _member_meters(topology: Topology) -> list[Meter | None]:
    job = figure1_job(topology, root="w5")
    plan = job_plan(job, topology, {sw: Allocation(0, 0) for sw in ("s1", "s2", "s3", "s5",
                                                                   "s6", "s7")}, epoch=1)
    return [e.meter for es in plan.values() for e in es if e.table == n.JOB_MEMBERS.name]


def test_every_hosts_ina_packets_of_a_job_are_policed_at_the_topologys_rate() -> None:
    # The four workers' entries and the server root's.
    assert _member_meters(Topology.load(FIGURE1)) == [Meter(HOST_RATE, HOST_BURST)] * 5


def test_the_base_state_polices_nothing() -> None:
    # Plain traffic (TCP of the baselines, say) is not INA's business.
    assert all(e.meter is None for e in _port_entries(Topology.load(FIGURE1), "s1").values())


def _with_policing(policing: object) -> Topology:
    import yaml

    data = yaml.safe_load(FIGURE1.read_text())
    data["policing"] = policing
    return Topology.from_dict(data)


def test_the_topology_file_sets_the_rate_or_none() -> None:
    assert _with_policing({"rate": 500, "burst": 20}).policing.rate == 500
    assert _member_meters(_with_policing({"rate": 0})) == [None] * 5


@pytest.mark.parametrize("policing", [{"rate": -1}, {"burst": 0}, {"rates": 5}, "fast"])
def test_a_bad_policing_is_refused(policing: object) -> None:
    with pytest.raises(TopologyError, match="policing"):
        _with_policing(policing)


def test_a_rate_is_one_bmv2_keeps_exactly() -> None:
    # BMv2 keeps a rate per microsecond as a double: 249 would read back as 248.
    assert bmv2_rate(249) == 248 and bmv2_rate(HOST_RATE) == HOST_RATE
    assert all(int(r / 1e6 * 1e6) == r for r in map(bmv2_rate, range(1, 5000)))


def test_a_probe_from_a_switch_port_is_passed_up(model_lab: ModelLab) -> None:
    s5 = model_lab.topology.switches["s5"].mac
    probe = mac_bytes("ff:ff:ff:ff:ff:ff") + mac_bytes(s5) + ETHERTYPE_PROBE.to_bytes(2, "big")
    model_lab.net.inject("s1", 1, probe)
    assert [port for port, _ in model_lab.net.packet_ins("s1")] == [1]


# --- a worker's own values (OP_COPY): by BIER from its edge switch ------------------------


def _owned(lab: ModelLab, host: str = W1, *, src: str | None = None, bit_of_host: str = "",
           flags: Flag = Flag.RESULT, gen: int = 0, width: int = WIDTH32) -> tuple[bytes, bytes]:
    """A frame of ``host``'s own values for its job's other workers, and its payload."""
    h = lab.topology.hosts[host]
    edge, _ = lab.topology.host_attachment(host)
    si, bits = one_set(lab.topology.hosts[bit_of_host or host].bit)
    payload = InaHeader(job_id=1, seq=7, pbm=bits, count=3, op=OP_COPY, flags=flags, si=si,
                        gen=gen, width=width).pack() + array_bytes([1, 2, 3], width)
    return ina_frame(h.mac, lab.topology.switches[edge].mac, src or h.ip, "10.0.100.6",
                     payload), payload


def test_a_workers_own_values_reach_every_other_worker_of_its_job_once(
        model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    asyncio.run(model_lab.ctl.deploy(job))
    frame, payload = _owned(model_lab)
    model_lab.net.send(W1, frame)
    got = {h: model_lab.net.received_payloads(h) for h in model_lab.topology.hosts}
    assert got == {h: [payload] if h in ("w2", "w3", "w4") else []
                   for h in model_lab.topology.hosts}
    s1 = asyncio.run(model_lab.ctl.status())["s1"]
    assert s1.job_stats[1][JobStat.OWNED].packets == 1
    assert s1.job_stats[1][JobStat.ABSORBED].packets == 0  # no switch aggregates it


@pytest.mark.parametrize("what", ["not_only_result", "another_bit", "another_address",
                                  "another_plan", "16_bit", "not_a_worker"])
def test_own_values_not_of_a_worker_as_itself_are_dropped_and_counted(
        model_lab: ModelLab, what: str) -> None:
    job = figure1_job(model_lab.topology)
    asyncio.run(model_lab.ctl.deploy(job))
    host, edge = ("w5", "s3") if what == "not_a_worker" else (W1, "s1")
    frame, _ = _owned(
        model_lab, host, src="10.0.0.5" if what == "another_address" else None,
        bit_of_host="w2" if what == "another_bit" else "",
        flags=Flag.RESULT | Flag.OVERFLOW if what == "not_only_result" else Flag.RESULT,
        gen=3 if what == "another_plan" else 0, width=16 if what == "16_bit" else WIDTH32)
    model_lab.net.send(host, frame)
    assert switch_stat(model_lab, edge, SwitchStat.DROP_BAD_OWNED) == 1
    assert not any(model_lab.net.inbox.values())
