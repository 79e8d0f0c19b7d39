"""Repair after a failure (R11) and fallback when switches cannot aggregate (R2).

``repair(full, failures, clients)`` makes the live switches right for the fabric
that is left (``full.without(failures)``), changing only what differs:

1. **Base state**: routes and BIER F-BMs recomputed on the surviving topology
   (``Controller.init``: MODIFY where an entry changed, so forwarding never stops).
2. **Every deployed job**, read back from the switches (they are the only record):
   - its VAT still works (every node alive, every route between them there): it
     stays, with its epoch and generation; only the entries and multicast groups
     of the switches its traffic now crosses change;
   - else it is re-planned on the surviving switches with their free capacity,
     a new epoch and the next generation (``gen``): the workers' edge switches
     turn packets of the old plan back to the workers as REPLAN notices, and the
     workers start the interrupted call again under the new plan
     (ina.host.call);
   - no switch can take it (no capacity or no path): it falls back to its hosts:
     the edge switches answer its workers' packets with ON_HOSTS, and they reduce
     among themselves (a ring over TCP, ina.host.onhosts);
   - a worker is cut off (its edge switch or its link failed): nothing can finish
     the job's calls; it is reported stalled and left as it is.

A job on hosts moves back onto switches as soon as a plan fits again (after the
element is back): switches are what it was deployed for. A job on switches whose
VAT still works stays where it is, even if a better VAT exists after a restore:
moving it would make every worker resend its call.

Writes go in an order that keeps every packet meaningful: a job's new groups and
VAT/transit entries first, then its edge switches' member entries (which switch
the workers to the new plan), then what is stale (entries before groups).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ina.control import p4names as n
from ina.control.access import Access
from ina.control.allocation import Allocation, allocate, capacity
from ina.control.controller import BaseChanges, Controller
from ina.control.entities import Entity, McastGroup, TableEntry
from ina.control.switch import SwitchClient
from ina.control.switch_state import job_group_id, job_groups, job_plan, on_hosts_plan
from ina.control.vat_planner import plan_job
from ina.errors import CapacityError, InputError, PlanError
from ina.protocol.bitmaps import bfr_ids_of, join_set
from ina.protocol.constants import Op
from ina.protocol.frames import ip_str
from ina.spec.job import Job, JobSpec, validate_job
from ina.spec.topology import Failures, Topology

LOG = logging.getLogger(__name__)

#: Where a job's calls run.
ON_SWITCHES, ON_HOSTS = "switches", "hosts"


# --- A deployed job, as the switches record it -------------------------------------


@dataclass
class JobRecord:
    """One job read back from the live switches."""

    job_id: int
    entries: dict[str, list[TableEntry]] = field(default_factory=dict)  # by switch
    groups: dict[str, McastGroup] = field(default_factory=dict)  # by switch
    workers: set[str] = field(default_factory=set)
    slots: int = 0
    gen: int = 0
    epoch: int = 0
    mode: str = ON_SWITCHES
    root: str | None = None

    def allocations(self) -> dict[str, Allocation]:
        result = {}
        for sw, entries in self.entries.items():
            for e in entries:
                if e.table == n.VAT_JOBS.name:
                    base = e.param("slot_base") if e.action != n.TRANSIT.name else 0
                    result[sw] = Allocation(e.param("job_index"), base)
        return result


def read_jobs(topology: Topology, entries: Mapping[str, Sequence[TableEntry]],
              groups: Mapping[str, Sequence[McastGroup]]) -> dict[int, JobRecord]:
    """Every job the switches hold, with its workers (from the member entries of
    their edge switches and the A-BMs of its VAT nodes), slots, generation, epoch."""
    by_bfr_id = {h.bfr_id: name for name, h in topology.hosts.items()}
    records: dict[int, JobRecord] = {}
    for sw, es in sorted(entries.items()):
        ports = topology.ports(sw)
        for e in es:
            job_id = e.match_value("job_id")
            assert isinstance(job_id, int)
            r = records.setdefault(job_id, JobRecord(job_id))
            r.entries.setdefault(sw, []).append(e)
            if e.table == n.JOB_MEMBERS.name:
                port = e.match_value("ingress_port")
                host = ports[port].node if isinstance(port, int) and port in ports else None
                if e.action == n.BIER_SOURCE.name:
                    r.root = host  # a server root
                    continue
                if host is not None:
                    r.workers.add(host)
                r.gen, r.slots = e.param("gen"), e.param("slots")
                if e.action == n.MEMBER_ON_HOSTS.name:
                    r.mode = ON_HOSTS
            elif e.table == n.VAT_JOBS.name and e.action != n.TRANSIT.name:
                r.slots, r.epoch = e.param("slot_mask") + 1, e.param("epoch")
                if e.action == n.VAT_ROOT.name:
                    r.root = sw
                if e.param("abm"):
                    r.workers.update(_hosts_of(join_set(e.param("set_id"), e.param("abm")),
                                               by_bfr_id))
            elif e.table == n.VAT_SETS.name:
                si = e.match_value("si")
                assert isinstance(si, int)
                r.workers.update(_hosts_of(join_set(si, e.param("abm")), by_bfr_id))
    for r in records.values():
        for sw, es in r.entries.items():
            index = next((e.param("job_index") for e in es if e.table == n.VAT_JOBS.name), None)
            if index is None:
                continue
            group = next((g for g in groups.get(sw, ()) if g.group_id == job_group_id(index)),
                         None)
            if group is not None:
                r.groups[sw] = group
    return records


def _hosts_of(bitmap: int, by_bfr_id: Mapping[int, str]) -> list[str]:
    return [by_bfr_id[i] for i in bfr_ids_of(bitmap) if i in by_bfr_id]


def current_vat(record: JobRecord, topology: Topology) -> Job | None:
    """The job's VAT as its live switches hold it, if it still works on
    ``topology`` (its root and every node alive, every route there), else None."""
    if record.mode != ON_SWITCHES or record.root is None or not record.slots:
        return None
    by_ip = {topology.address(name): name for name in (*topology.switches, *topology.hosts)}

    def parent_gone(e: TableEntry) -> bool:
        parent = by_ip.get(ip_str(e.param("parent_ip")))
        return parent is None or parent in topology.switches and parent not in record.entries

    aggregators: dict[str, tuple[str, ...]] = {}
    for sw, es in record.entries.items():
        for e in es:
            if e.action in (n.VAT_NODE.name, n.MEMBER.name) and parent_gone(e):
                return None  # a node's or a worker's parent failed
            if e.action == n.VAT_NODE.name:
                covered = [w for w in sorted(record.workers)
                           if join_set(e.param("set_id"), e.param("abm"))
                           & topology.hosts[w].bit]
                aggregators[sw] = tuple(covered)
    if record.root in topology.switches and record.root not in record.entries:
        return None
    try:
        spec = JobSpec(record.job_id, Op.SUM, tuple(sorted(record.workers)), record.root,
                       aggregators, record.slots)
        return validate_job(spec, topology)
    except InputError:
        return None


# --- Repair ------------------------------------------------------------------------


@dataclass
class JobRepair:
    job_id: int
    action: str  # kept, rerouted, re-planned, on hosts, back on switches, stalled
    detail: str = ""
    switches: tuple[str, ...] = ()  # where its VAT nodes are now

    def describe(self) -> str:
        where = f" (VAT on {', '.join(self.switches)})" if self.switches else ""
        return f"job {self.job_id}: {self.action}{where}" + (f": {self.detail}"
                                                              if self.detail else "")


@dataclass
class RepairReport:
    failures: Failures
    base: dict[str, BaseChanges] = field(default_factory=dict)  # per switch
    jobs: list[JobRepair] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"down: {self.failures.describe()}"]
        lines += [f"{sw}: base state {c.describe()}" for sw, c in sorted(self.base.items())
                  if c.written]
        lines += [j.describe() for j in self.jobs] or ["no jobs deployed"]
        return "\n".join(lines)


async def repair(full: Topology, failures: Failures,
                 clients: Mapping[str, SwitchClient]) -> RepairReport:
    """Make the live switches (``clients``: one for every switch not in
    ``failures``) right for ``full.without(failures)``: base state, then every job."""
    topology = full.without(failures)
    controller = Controller(topology, {sw: clients[sw] for sw in topology.switches})
    report = RepairReport(failures)
    # The only writer from here to the end: what it reads is what it changes.
    async with controller.writing():
        report.base = await controller.init()
        entries, groups = await controller.read_job_state()
        records = read_jobs(topology, entries, groups)
        for job_id, record in sorted(records.items()):
            others = {sw: [e for e in es if e.match_value("job_id") != job_id]
                      for sw, es in entries.items()}
            outcome = await _repair_job(controller, topology, record, others)
            LOG.info("%s", outcome.describe())
            report.jobs.append(outcome)
            # What the next job sees as taken: this job's entries as they are now.
            entries, _ = await controller.read_job_state()
    return report


async def repair_switches(full: Topology, failures: Failures, p4info: Path,
                          p4blob: Path | None, access: Access,
                          timeout: float = 10.0) -> RepairReport:
    """``repair`` over fresh P4Runtime connections to the live switches (``access``:
    how); a switch that is back (restarted empty) gets the pipeline again."""
    from ina.control.p4runtime import connect  # grpc is slow to import

    async with connect(full.without(failures), p4info, p4blob, access=access, push=True,
                       timeout=timeout) as clients:
        return await repair(full, failures, clients)


async def _repair_job(controller: Controller, topology: Topology, record: JobRecord,
                      others: Mapping[str, Sequence[TableEntry]]) -> JobRepair:
    cut = sorted(w for w in record.workers if not topology.attached(w))
    if cut:
        return JobRepair(record.job_id, "stalled",
                         f"workers {', '.join(cut)} are cut off "
                         f"({topology.failures.describe()} down); it resumes when they are back")
    if not record.workers:
        return JobRepair(record.job_id, "stalled", "no worker of it is reachable")
    job = current_vat(record, topology)
    if job is not None:
        alloc = record.allocations()
        fresh = allocate(job, topology, others)
        alloc = {sw: alloc.get(sw, a) for sw, a in fresh.items()}
        desired = _job_state(job, topology, alloc, record.epoch, record.gen)
        changed = await _rewrite(controller, record, desired, alloc)
        return JobRepair(record.job_id, "rerouted" if changed else "kept", "",
                         tuple(sorted(job.nodes)))
    gen = (record.gen + 1) % 256
    workers = sorted(record.workers)
    slots = record.slots
    try:
        room = {sw: capacity(others.get(sw, []), slots) for sw in topology.switches}
        job = plan_job(topology, record.job_id, workers, Op.SUM, None, slots, room).job
        alloc = allocate(job, topology, others)
    except (PlanError, CapacityError) as exc:
        desired = {sw: list[Entity](es) for sw, es in
                   on_hosts_plan(record.job_id, workers, slots, topology, gen).items()}
        await _rewrite(controller, record, desired, {})
        reason = "; ".join(exc.problems)
        if record.mode == ON_HOSTS:
            return JobRepair(record.job_id, "on hosts", f"still no plan fits: {reason}")
        LOG.warning("job %d falls back to its hosts: %s", record.job_id, reason)
        return JobRepair(record.job_id, "on hosts", f"no switch can aggregate it: {reason}")
    epoch = secrets.randbits(32) | 1
    desired = _job_state(job, topology, alloc, epoch, gen)
    await _rewrite(controller, record, desired, alloc)
    action = "back on switches" if record.mode == ON_HOSTS else "re-planned"
    return JobRepair(record.job_id, action, f"generation {gen}", tuple(sorted(job.nodes)))


def _job_state(job: Job, topology: Topology, alloc: Mapping[str, Allocation], epoch: int,
               gen: int) -> dict[str, list[Entity]]:
    plan = job_plan(job, topology, alloc, epoch, gen)
    groups = job_groups(job, topology, alloc)
    return {sw: ([groups[sw]] if sw in groups else []) + list(es) for sw, es in plan.items()}


async def _rewrite(controller: Controller, record: JobRecord,
                   desired: Mapping[str, Sequence[Entity]],
                   alloc: Mapping[str, Allocation]) -> bool:
    """The job from what ``record`` read to ``desired``; the counters of a job index
    new to a switch start at zero."""
    old = record.allocations()
    current = {sw: [*record.entries.get(sw, ()), *([record.groups[sw]] if sw in record.groups
                                                    else [])]
               for sw in set(record.entries) | set(record.groups)}
    new_indices = {sw: a.job_index for sw, a in alloc.items()
                   if sw not in old or old[sw].job_index != a.job_index}
    return await controller.rewrite_job(record.job_id, current, desired, new_indices)
