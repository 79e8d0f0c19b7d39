"""What every switch must hold: the entries the controller installs and the
reference model executes.

``base_plan`` is the per-switch state that does not depend on jobs (addresses,
routes, what each port leads to, BIER F-BMs per port and set, the BIER multicast
groups, each port's phantom queue when the topology has ``queues``).
``job_plan`` is a job's entries: a VAT node on each aggregation switch and the
root, and a ``transit`` entry (counters only) on every other switch its packets
cross, with each VAT node's A-BM per BIER set.
Entries are plain values (``ina.control.entities``), so the same state
feeds P4Runtime and the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ina.control import p4names as n
from ina.control.allocation import Allocation
from ina.control.entities import Entity, Lpm, McastGroup, Meter, TableEntry, entry
from ina.protocol.bitmaps import one_set, split_sets
from ina.protocol.constants import BIER_MCAST_GROUP, JOB_GROUP_BASE
from ina.protocol.frames import ip_int, mac_bytes
from ina.spec.bier import port_fbms
from ina.spec.job import Job
from ina.spec.topology import Topology


def _mac(mac: str) -> int:
    return int.from_bytes(mac_bytes(mac), "big")


def bmv2_rate(rate: int) -> int:
    """``rate``, or the next lower rate that BMv2 keeps exactly: it holds a meter's
    rate per microsecond as a double and gives back ``int(rate / 1e6 * 1e6)``,
    sometimes 1 less, which would make every ``init`` rewrite the entry."""
    while rate > 1 and int(rate / 1e6 * 1e6) != rate:
        rate -= 1
    return rate


def _policed(e: TableEntry, topology: Topology) -> TableEntry:
    """A job_members entry with the topology's policing of the host's INA packets
    of the job (none if its rate is 0)."""
    p = topology.policing
    return replace(e, meter=Meter(bmv2_rate(p.rate), p.burst)) if p.rate else e


def base_plan(topology: Topology, switch: str) -> list[Entity]:
    """Addresses, routes, what each port leads to, BIER state and, with the
    topology's ``queues``, each port's phantom queue (congestion marks) of one
    switch. Every port of the topology is declared, a failed link's too (its probes
    tell when it is back); a port not declared carries nothing."""
    me = topology.switches[switch]
    ports = topology.ports(switch)
    smac = _mac(me.mac)
    result: list[Entity] = [
        entry(n.LOCAL_ADDRESSES, {"dst_addr": ip_int(me.loopback)}, n.IS_LOCAL)
    ]
    destinations = sorted(topology.hosts) + sorted(s for s in topology.switches if s != switch)
    for dest in destinations:
        if not topology.reaches(switch, dest):
            continue  # cut off by a failure: no route, so the packet is dropped and counted
        port = topology.next_hop(switch, dest)
        result.append(entry(
            n.IPV4_ROUTES, {"dst_addr": Lpm(ip_int(topology.address(dest)), 32)}, n.FORWARD,
            port=port, smac=smac, dmac=_mac(topology.mac(ports[port].node)),
        ))
    for port, nb in topology.declared_ports(switch).items():
        if nb.is_host:
            host = topology.hosts[nb.node]
            si, bit = one_set(host.bit)
            result.append(entry(n.HOST_PORTS, {"ingress_port": port}, n.FROM_HOST,
                                host_bit=bit, host_si=si, host_ip=ip_int(host.ip)))
        else:
            result.append(entry(n.HOST_PORTS, {"ingress_port": port}, n.FROM_SWITCH))
    fbms = port_fbms(topology, switch)
    for port, fbm in fbms.items():
        nb = ports[port]
        for si, part in split_sets(fbm).items():
            match = {"egress_port": port, "si": si}
            if nb.is_host:
                result.append(entry(
                    n.BIER_PORTS, match, n.TO_HOST, fbm=part, smac=smac,
                    dmac=_mac(topology.hosts[nb.node].mac),
                    host_ip=ip_int(topology.hosts[nb.node].ip),
                ))
            else:
                result.append(entry(
                    n.BIER_PORTS, match, n.TO_BFR, fbm=part, smac=smac,
                    dmac=_mac(topology.switches[nb.node].mac),
                ))
    queues = topology.queues
    if queues is not None:
        for port in sorted(topology.declared_ports(switch)):
            result.append(entry(n.PORT_QUEUES, {"egress_port": port}, n.PHANTOM_QUEUE,
                                rate=queues.phantom_rate, mark=queues.mark,
                                limit=queues.buffer))
    # BIER of jobs not deployed here, and resends: one copy per port, its set in the
    # header (a job's own packets use the job's group, see job_groups).
    result.append(McastGroup(BIER_MCAST_GROUP, tuple((port, 0) for port in fbms)))
    return result


# --- Jobs -----------------------------------------------------------------------


def job_plan(job: Job, topology: Topology, alloc: Mapping[str, Allocation],
             epoch: int, gen: int = 0) -> dict[str, list[TableEntry]]:
    """The job's vat_jobs entry on every switch in ``alloc`` (with vat_sets entries,
    its A-BM per set, on VAT nodes, and result_sets on a root switch), and a
    job_members entry for each worker's port on its edge switch, which steers the
    worker's packets to its parent and its SYNCs to the root, and sends its own
    values (OP_COPY) by BIER to the job's other workers in its set (``peers``).

    ``epoch`` tells this deployment's slot state from a torn-down job's leftovers
    (the data plane cannot have its registers cleared over P4Runtime); ``gen``
    (0..255) is the generation of the job's plan, which a re-plan increments.
    """
    result: dict[str, list[TableEntry]] = {}
    for sw, a in alloc.items():
        node = job.nodes.get(sw)
        match = {"job_id": job.job_id}
        node_ip = ip_int(topology.switches[sw].loopback)
        if node is None:
            result[sw] = [entry(n.VAT_JOBS, match, n.TRANSIT, job_index=a.job_index,
                                node_ip=node_ip)]
            continue
        common = dict(job_index=a.job_index, slot_base=a.slot_base, slot_mask=job.slots - 1,
                      lap=2 * job.slots, epoch=epoch, gen=gen, node_ip=node_ip)
        sets = split_sets(node.abm)
        # One set: its A-BM in the entry. Several (a root only): a vat_sets entry each.
        set_id, bits = next(iter(sets.items())) if len(sets) == 1 else (0, 0)
        if node.parent is None:
            e = entry(n.VAT_JOBS, match, n.VAT_ROOT, **common, sets=len(sets), set_id=set_id,
                      abm=bits, reach=5 * job.slots)
        else:
            e = entry(n.VAT_JOBS, match, n.VAT_NODE, **common, set_id=set_id, abm=bits,
                      parent_ip=ip_int(topology.address(node.parent)))
        result[sw] = [e]
        if len(sets) > 1:
            result[sw] += [entry(n.VAT_SETS, {"job_id": job.job_id, "si": si}, n.SET_ABM,
                                 abm=bits) for si, bits in sets.items()]
            # Each (port, set) copy of a result for several sets gets its set's A-BM.
            result[sw] += [entry(n.RESULT_SETS, {"job_id": job.job_id, "si": si}, n.RESULT_SET,
                                 abm=bits) for si, bits in sets.items()]
    root_ip = ip_int(topology.address(job.root))
    workers_by_set = split_sets(job.abm)
    for worker in job.workers:
        edge, port = topology.host_attachment(worker)
        si, _ = one_set(job.worker_bit[worker])
        result[edge].append(_policed(entry(
            n.JOB_MEMBERS, {"job_id": job.job_id, "ingress_port": port}, n.MEMBER,
            parent_ip=ip_int(job.target_of(worker, topology)), root_ip=root_ip, gen=gen,
            slots=job.slots, peers=workers_by_set[si]), topology))
    if job.root in topology.hosts:
        # A server root finishes the aggregation and starts the BIER delivery itself.
        edge, port = topology.host_attachment(job.root)
        result[edge].append(_policed(entry(
            n.JOB_MEMBERS, {"job_id": job.job_id, "ingress_port": port}, n.BIER_SOURCE),
            topology))
    return result


def on_hosts_plan(job_id: int, workers: Sequence[str], slots: int, topology: Topology,
                  gen: int) -> dict[str, list[TableEntry]]:
    """A job that no switch aggregates (R2): on each worker's edge switch, an entry
    that answers the worker's packets with ON_HOSTS, so the workers reduce among
    themselves (ina.host.onhosts); ``slots`` is kept for a later re-plan."""
    result: dict[str, list[TableEntry]] = {}
    for worker in workers:
        edge, port = topology.host_attachment(worker)
        result.setdefault(edge, []).append(_policed(entry(
            n.JOB_MEMBERS, {"job_id": job_id, "ingress_port": port}, n.MEMBER_ON_HOSTS,
            gen=gen, slots=slots), topology))
    return result


def job_group_id(job_index: int) -> int:
    return JOB_GROUP_BASE + job_index


def job_groups(job: Job, topology: Topology,
               alloc: Mapping[str, Allocation]) -> dict[str, McastGroup]:
    """The job's BIER multicast group on every switch of its delivery tree (the
    routes from its root to its workers): one copy per port of that tree, or, on
    a root spanning several BIER sets, one per (port, set) with the job's workers
    behind it, the set as replication id. No copy is made only to be pruned."""
    behind: dict[str, dict[int, int]] = {}  # switch -> tree port -> workers' bits
    for worker in job.workers:
        path = topology.path(job.root, worker)
        for node, nxt in zip(path, path[1:], strict=False):
            if node in topology.switches:
                ports = behind.setdefault(node, {})
                port = topology.next_hop(node, nxt)
                ports[port] = ports.get(port, 0) | job.worker_bit[worker]
    multi_set_root = job.root in topology.switches and len(split_sets(job.abm)) > 1
    result: dict[str, McastGroup] = {}
    for sw, ports in behind.items():
        if sw == job.root and multi_set_root:
            replicas = sorted((port, si) for port, bits in ports.items()
                              for si in split_sets(bits))
        else:
            replicas = sorted((port, 0) for port in ports)
        result[sw] = McastGroup(job_group_id(alloc[sw].job_index), tuple(replicas))
    return result
