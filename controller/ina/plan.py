"""What every switch must hold: the plan the controller installs and the
reference model executes.

``base_plan`` is the per-switch state that does not depend on jobs (addresses,
routes, host ports, BIER F-BMs per port and set, the BIER multicast groups). ``job_plan`` is a
job's entries: a VAT node on each aggregation switch and the root, and a
``transit`` entry (counters only) on every other switch its packets cross, with
each VAT node's A-BM per BIER set.
Entries are plain values (ints, names from ``ina.p4names``), so the same plan
feeds P4Runtime and the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ina import p4names as n
from ina.protocol.bitmaps import one_set, split_sets
from ina.protocol.constants import AGG_SLOTS, BIER_MCAST_GROUP, JOB_GROUP_BASE, MAX_JOBS
from ina.protocol.frames import ip_int, mac_bytes
from ina.spec.bier import port_fbms
from ina.spec.job import Job
from ina.spec.topology import Topology


@dataclass(frozen=True)
class Lpm:
    value: int
    prefix_len: int


MatchValue = int | Lpm


@dataclass(frozen=True)
class TableEntry:
    table: str
    match: tuple[tuple[str, MatchValue], ...]
    action: str
    params: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        spec = n.TABLE_BY_NAME.get(self.table)
        if spec is None:
            raise ValueError(f"unknown table {self.table}")
        if tuple(k for k, _ in self.match) != spec.key_names:
            raise ValueError(
                f"{self.table}: match {self.match} does not give keys {spec.key_names}")
        action = next((a for a in spec.actions if a.name == self.action), None)
        if action is None:
            raise ValueError(f"{self.table}: action {self.action} not allowed")
        if tuple(p for p, _ in self.params) != action.param_names:
            raise ValueError(
                f"{self.action}: params {self.params} do not give {action.param_names}")
        for (pname, value), (_, width) in zip(self.params, action.params, strict=True):
            if not 0 <= value < 1 << width:
                raise ValueError(f"{self.action}: {pname}={value} does not fit {width} bits")

    @property
    def key(self) -> tuple[str, tuple[tuple[str, MatchValue], ...]]:
        return self.table, self.match

    def param(self, name: str) -> int:
        return dict(self.params)[name]

    def match_value(self, name: str) -> MatchValue:
        return dict(self.match)[name]


@dataclass(frozen=True)
class McastGroup:
    group_id: int
    replicas: tuple[tuple[int, int], ...]  # (port, replication id), sorted


Entity = TableEntry | McastGroup


def entry(spec: n.TableSpec, match: Mapping[str, MatchValue], action: n.ActionSpec,
          **params: int) -> TableEntry:
    return TableEntry(
        spec.name,
        tuple((k, match[k]) for k in spec.key_names),
        action.name,
        tuple((p, params[p]) for p in action.param_names),
    )


def _mac(mac: str) -> int:
    return int.from_bytes(mac_bytes(mac), "big")


def base_plan(topology: Topology, switch: str) -> list[Entity]:
    """Addresses, routes, host ports and BIER state of one switch."""
    me = topology.switches[switch]
    ports = topology.ports(switch)
    smac = _mac(me.mac)
    result: list[Entity] = [
        entry(n.LOCAL_ADDRESSES, {"dst_addr": ip_int(me.loopback)}, n.IS_LOCAL)
    ]
    destinations = sorted(topology.hosts) + sorted(s for s in topology.switches if s != switch)
    for dest in destinations:
        port = topology.next_hop(switch, dest)
        result.append(entry(
            n.IPV4_ROUTES, {"dst_addr": Lpm(ip_int(topology.address(dest)), 32)}, n.FORWARD,
            port=port, smac=smac, dmac=_mac(topology.mac(ports[port].node)),
        ))
    for port, nb in ports.items():
        if nb.is_host:
            si, bit = one_set(topology.hosts[nb.node].bit)
            result.append(entry(n.HOST_PORTS, {"ingress_port": port}, n.FROM_HOST,
                                host_bit=bit, host_si=si))
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
    # BIER of jobs not deployed here, and resends: one copy per port, its set in the
    # header (a job's own packets use the job's group, see job_groups).
    result.append(McastGroup(BIER_MCAST_GROUP, tuple((port, 0) for port in fbms)))
    return result


# --- Jobs -----------------------------------------------------------------------


class CapacityError(ValueError):
    """A switch has no room for a job."""


@dataclass(frozen=True)
class Allocation:
    """Per-switch resources of one job."""

    job_index: int  # its block in the job_stats counters
    slot_base: int = 0  # first aggregation slot (VAT nodes only)


def job_switches(job: Job, topology: Topology) -> list[str]:
    """Every switch that holds an entry of the job: its VAT nodes, and the
    switches its aggregation packets and its BIER delivery cross."""
    crossed: set[str] = {node for node in job.nodes if node in topology.switches}
    for child, parent in job.edges():
        crossed.update(node for node in topology.path(child, parent) if node in topology.switches)
    for worker in job.workers:
        crossed.update(
            node for node in topology.path(job.root, worker) if node in topology.switches
        )
    return sorted(crossed)


def used_resources(entries: Sequence[TableEntry]) -> tuple[set[int], list[range]]:
    """Job indices and slot ranges taken by existing vat_jobs entries of a switch."""
    indices: set[int] = set()
    ranges: list[range] = []
    for e in entries:
        if e.table != n.VAT_JOBS.name:
            continue
        indices.add(e.param("job_index"))
        if e.action in (n.VAT_NODE.name, n.VAT_ROOT.name):
            base = e.param("slot_base")
            ranges.append(range(base, base + e.param("slot_mask") + 1))
    return indices, ranges


@dataclass(frozen=True)
class Capacity:
    """What a switch can still take: job counter blocks, and free aggregation slots
    (at least this many in one aligned run)."""

    job_indices: int = MAX_JOBS
    free_slot_run: int = AGG_SLOTS


def capacity(existing: Sequence[TableEntry], slots: int) -> Capacity:
    """What a switch holding ``existing`` job entries can still take, for a job
    of ``slots`` slots."""
    indices, ranges = used_resources(existing)
    fits = any(all(start + slots <= r.start or start >= r.stop for r in ranges)
               for start in range(0, AGG_SLOTS, slots))
    return Capacity(MAX_JOBS - len(indices), slots if fits else 0)


def allocate(job: Job, topology: Topology,
             existing: Mapping[str, Sequence[TableEntry]]) -> dict[str, Allocation]:
    """Choose a free job index on every switch of the job, and a free aligned run
    of ``job.slots`` aggregation slots on each of its VAT nodes."""
    result: dict[str, Allocation] = {}
    problems = []
    for sw in job_switches(job, topology):
        indices, ranges = used_resources(existing.get(sw, ()))
        free_index = next((i for i in range(MAX_JOBS) if i not in indices), None)
        if free_index is None:
            problems.append(f"{sw} already holds {MAX_JOBS} jobs")
            continue
        base = 0
        if sw in job.nodes:
            found = None
            for start in range(0, AGG_SLOTS, job.slots):
                if all(start + job.slots <= r.start or start >= r.stop for r in ranges):
                    found = start
                    break
            if found is None:
                free = AGG_SLOTS - sum(len(r) for r in ranges)
                problems.append(
                    f"{sw} has no free run of {job.slots} aggregation slots "
                    f"({free} of {AGG_SLOTS} free)"
                )
                continue
            base = found
        result[sw] = Allocation(free_index, base)
    if problems:
        raise CapacityError("; ".join(problems))
    return result


def job_plan(job: Job, topology: Topology, alloc: Mapping[str, Allocation],
             epoch: int) -> dict[str, list[TableEntry]]:
    """The job's vat_jobs entry on every switch in ``alloc`` (with vat_sets entries,
    its A-BM per set, on VAT nodes, and result_sets on a root switch), and a
    job_members entry for each worker's port on its edge switch.

    ``epoch`` tells this deployment's slot state from a torn-down job's leftovers
    (the data plane cannot have its registers cleared over P4Runtime).
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
                      epoch=epoch, node_ip=node_ip)
        sets = split_sets(node.abm)
        # One set: its A-BM in the entry. Several (a root only): a vat_sets entry each.
        set_id, bits = next(iter(sets.items())) if len(sets) == 1 else (0, 0)
        if node.parent is None:
            e = entry(n.VAT_JOBS, match, n.VAT_ROOT, **common, sets=len(sets), set_id=set_id,
                      abm=bits)
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
    for worker in job.workers:
        edge, port = topology.host_attachment(worker)
        result[edge].append(entry(n.JOB_MEMBERS, {"job_id": job.job_id, "ingress_port": port},
                                  n.MEMBER))
    if job.root in topology.hosts:
        # A server root finishes the aggregation and starts the BIER delivery itself.
        edge, port = topology.host_attachment(job.root)
        result[edge].append(entry(n.JOB_MEMBERS, {"job_id": job.job_id, "ingress_port": port},
                                  n.BIER_SOURCE))
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
