"""The control plane: initialise switches, deploy and tear down jobs, report status.

Every operation reads what the switches hold before it writes, so the switches
are the only record of what is deployed: ``inactl`` keeps no state of its own
and a restarted controller sees the same jobs. Writes go to all switches at
once. A job is either on every switch of its plan or on none: when a write
fails, what this write inserted is removed again before the error is raised
(never what another writer holds, even if it looks the same).

One writer at a time: every operation that writes first makes this controller
the only writer of every switch (``writing``: ``SwitchClient.claim``, over
P4Runtime the primary client of each), and only then reads what it will change.
Another controller's read-allocate-write can then never interleave with ours:
two deploys choosing the same job index and slots, or one's rollback removing
what the other wrote, cannot happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ina.control import p4names as n
from ina.control.allocation import Allocation, allocate, capacity
from ina.control.entities import Entity, McastGroup, TableEntry
from ina.control.switch import CounterValue, SwitchClient
from ina.control.switch_state import (
    base_plan,
    job_group_id,
    job_groups,
    job_plan,
    on_hosts_plan,
)
from ina.control.vat_planner import resolve
from ina.errors import (
    CapacityError,
    ControllerError,
    DeployError,
    InputError,
    JobError,
    PlanError,
    SwitchError,
    UsageError,
)
from ina.protocol.bitmaps import bfr_ids_of, join_set
from ina.protocol.constants import JOB_GROUP_BASE, JOB_STAT_STRIDE, JobStat, SwitchStat
from ina.protocol.frames import ip_str
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Topology

LOG = logging.getLogger(__name__)
T = TypeVar("T")
#: Seconds a controller waits to become the only writer of a switch (another
#: controller finishing its operation) before it gives up.
CLAIM_TIMEOUT = 10.0


@dataclass(frozen=True)
class BaseChanges:
    """What ``Controller.init`` wrote on one switch."""

    inserted: tuple[Entity, ...] = ()
    modified: tuple[Entity, ...] = ()
    deleted: tuple[Entity, ...] = ()
    unchanged: int = 0  # entries and groups that were already right

    @property
    def written(self) -> int:
        return len(self.inserted) + len(self.modified) + len(self.deleted)

    def describe(self) -> str:
        """``2 modified (ipv4_routes 2), 0 inserted, 0 deleted, 25 unchanged``."""
        parts = []
        for what, entities in (("inserted", self.inserted), ("modified", self.modified),
                               ("deleted", self.deleted)):
            by_kind: dict[str, int] = {}
            for e in entities:
                kind = "multicast group" if isinstance(e, McastGroup) \
                    else e.table.rpartition(".")[2]
                by_kind[kind] = by_kind.get(kind, 0) + 1
            detail = ", ".join(f"{kind} {count}" for kind, count in sorted(by_kind.items()))
            parts.append(f"{len(entities)} {what}" + (f" ({detail})" if detail else ""))
        return ", ".join(parts) + f", {self.unchanged} unchanged"


@dataclass(frozen=True)
class Deployment:
    job: Job | None  # None: on hosts (no switch could take it; see ``fallback``)
    allocations: dict[str, Allocation]
    epoch: int
    entries: dict[str, list[TableEntry]]
    groups: dict[str, McastGroup]  # the job's BIER group on each switch of its delivery tree
    fallback: str = ""  # why the job runs on its hosts, if it does


@dataclass(frozen=True)
class JobOnSwitch:
    """A job's entry on one switch, decoded for people."""

    switch: str
    entry: TableEntry
    abm: int = 0  # over all BIER sets, from the node's vat_sets entries

    @property
    def job_id(self) -> int:
        return _job_id(self.entry)

    @property
    def role(self) -> str:
        return {n.VAT_ROOT.name: "root", n.VAT_NODE.name: "aggregator",
                n.TRANSIT.name: "transit"}[self.entry.action]

    @property
    def job_index(self) -> int:
        return self.entry.param("job_index")

    def describe(self) -> str:
        e = self.entry
        if self.role == "transit":
            return "transit (forwards and counts the job's packets)"
        text = (f"{self.role}: A-BM bfr-ids {bfr_ids_of(self.abm)}, "
                f"slots {e.param('slot_base')}..{e.param('slot_base') + e.param('slot_mask')}")
        if self.role == "aggregator":
            text += f", parent {ip_str(e.param('parent_ip'))}"
        return text


@dataclass
class SwitchStatus:
    switch: str
    jobs: list[JobOnSwitch]
    job_stats: dict[int, dict[JobStat, CounterValue]]  # by job_id
    switch_stats: dict[SwitchStat, CounterValue]
    base_entries: int
    problems: list[str] = field(default_factory=list)
    #: Per port of the topology: packets sent out of it, those marked as congested,
    #: and packets received by it.
    port_packets: dict[int, CounterValue] = field(default_factory=dict)
    port_marks: dict[int, CounterValue] = field(default_factory=dict)
    port_received: dict[int, CounterValue] = field(default_factory=dict)


class Controller:
    def __init__(self, topology: Topology, clients: Mapping[str, SwitchClient],
                 concurrent: bool = True, claim_timeout: float = CLAIM_TIMEOUT):
        """``concurrent=False`` talks to one switch after another (for comparison)."""
        missing = sorted(set(topology.switches) - set(clients))
        if missing:
            raise UsageError(f"no connection for switches {missing}")
        self.topology = topology
        self.clients = dict(clients)
        self.concurrent = concurrent
        self.claim_timeout = claim_timeout
        self._writing = 0  # depth of nested ``writing`` blocks

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Be the only writer of every switch while the block runs (re-entrant):
        each switch is claimed first, so what the block reads next is what it
        changes. ControllerError, with nothing written, if another controller
        keeps a switch for ``claim_timeout`` seconds."""
        if self._writing:
            self._writing += 1
            try:
                yield
            finally:
                self._writing -= 1
            return
        try:
            # One switch after another, in one order for every controller: two that
            # start at once cannot each hold a switch the other waits for.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.claim_timeout
            for sw in sorted(self.clients):
                try:
                    await self.clients[sw].claim(self, max(0.0, deadline - loop.time()))
                except SwitchError as exc:
                    raise ControllerError(
                        f"not writing: another controller was still writing to {sw} after "
                        f"{self.claim_timeout:g}s:\n  {exc}") from exc
            self._writing = 1
            try:
                yield
            finally:
                self._writing = 0
        finally:
            await self._each(lambda sw, c: c.release(self))

    async def _each(self, fn: Callable[[str, SwitchClient], Awaitable[T]],
                    switches: Sequence[str] | None = None) -> dict[str, T | BaseException]:
        """Run ``fn`` on the switches concurrently; errors are returned, not raised."""
        names = list(switches if switches is not None else sorted(self.topology.switches))
        if self.concurrent:
            results = await asyncio.gather(
                *(fn(sw, self.clients[sw]) for sw in names), return_exceptions=True
            )
            return dict(zip(names, results, strict=True))
        one_by_one: dict[str, T | BaseException] = {}
        for sw in names:
            try:
                one_by_one[sw] = await fn(sw, self.clients[sw])
            except Exception as exc:  # noqa: BLE001 (returned, as gather does)
                one_by_one[sw] = exc
        return one_by_one

    @staticmethod
    def _raise_failures(what: str, results: Mapping[str, object]) -> None:
        failures = {sw: r for sw, r in results.items() if isinstance(r, BaseException)}
        if failures:
            detail = "\n".join(f"  {sw}: {err}" for sw, err in sorted(failures.items()))
            raise ControllerError(f"{what} failed on {', '.join(sorted(failures))}:\n{detail}")

    # --- base state ----------------------------------------------------------------

    async def init(self) -> dict[str, BaseChanges]:
        """Make every switch hold exactly its base plan, changing only what differs:
        insert what is missing, modify in place (P4Runtime MODIFY) an entry or
        multicast group whose key exists with other content, delete what is stale.
        An entry that is already right is not written, so routes and groups keep
        forwarding while init runs.

        Job entries are left alone, so init can run again while jobs are deployed.
        """

        async def reconcile(sw: str, client: SwitchClient) -> BaseChanges:
            desired: dict[object, Entity] = {_key(e): e for e in base_plan(self.topology, sw)}
            current: dict[object, Entity] = {}
            for spec in n.BASE_TABLES:
                for e in await client.read_table(spec.name):
                    current[_key(e)] = e
            for g in await client.read_groups():
                if g.group_id < JOB_GROUP_BASE:  # jobs' groups are not base state
                    current[_key(g)] = g
            changes = BaseChanges(
                inserted=tuple(e for k, e in desired.items() if k not in current),
                modified=tuple(e for k, e in desired.items()
                               if k in current and current[k] != e),
                deleted=tuple(e for k, e in current.items() if k not in desired),
                unchanged=sum(1 for k, e in desired.items() if current.get(k) == e),
            )
            # Missing state first, stale state last: nothing that is still right
            # disappears at any moment.
            await client.insert(changes.inserted)
            await client.modify(changes.modified)
            await client.delete(changes.deleted)
            LOG.info("%s: base state: %s", sw, changes.describe())
            return changes

        async with self.writing():
            results = await self._each(reconcile)
        self._raise_failures("initialising switches", results)
        return {sw: r for sw, r in results.items() if not isinstance(r, BaseException)}

    # --- jobs ----------------------------------------------------------------------------

    async def _read_jobs(self) -> dict[str, list[TableEntry]]:
        """Every entry of the job tables, per switch."""

        async def read(sw: str, client: SwitchClient) -> list[TableEntry]:
            return [e for spec in n.JOB_TABLES for e in await client.read_table(spec.name)]

        results = await self._each(read)
        self._raise_failures("reading the job tables", results)
        return {sw: r for sw, r in results.items() if isinstance(r, list)}

    async def read_job_state(self) -> tuple[dict[str, list[TableEntry]],
                                            dict[str, list[McastGroup]]]:
        """Every entry of the job tables and every job's multicast group, per switch."""
        entries = await self._read_jobs()

        async def read(sw: str, client: SwitchClient) -> list[McastGroup]:
            return [g for g in await client.read_groups() if g.group_id >= JOB_GROUP_BASE]

        results = await self._each(read)
        self._raise_failures("reading the multicast groups", results)
        return entries, {sw: r for sw, r in results.items() if isinstance(r, list)}

    async def jobs(self) -> dict[int, list[JobOnSwitch]]:
        """Every deployed job and its entries, by job id."""
        result: dict[int, list[JobOnSwitch]] = {}
        for sw, entries in sorted((await self._read_jobs()).items()):
            for j in _jobs_on_switch(sw, entries):
                result.setdefault(j.job_id, []).append(j)
        return dict(sorted(result.items()))

    async def deploy(self, spec: JobSpec | Job, epoch: int | None = None,
                     fallback: bool = False) -> Deployment:
        """Validate (or plan, for a spec without aggregators, with the switches' free
        capacity), allocate, write the job to all its switches; all or nothing.

        With ``fallback``, a job that no switch can take (no capacity, or no path)
        is deployed on its hosts instead (R2): its workers' edge switches tell them
        to reduce among themselves (``Deployment.job`` is None)."""
        async with self.writing():
            return await self._deploy(spec, epoch, fallback)

    async def _deploy(self, spec: JobSpec | Job, epoch: int | None,
                      fallback: bool) -> Deployment:
        existing, held_groups = await self.read_job_state()
        job_id = spec.job_id
        holders = sorted(sw for sw, entries in existing.items()
                         if any(_job_id(e) == job_id for e in entries))
        if holders:
            raise JobError([f"job {job_id} is already deployed (on {', '.join(holders)}); "
                            "tear it down first or choose another job_id"])
        slots = spec.slots
        try:
            if isinstance(spec, Job):
                job = spec
            else:
                room = {sw: capacity(existing.get(sw, []), slots)
                        for sw in self.topology.switches}
                job = resolve(spec, self.topology, room)
            alloc = allocate(job, self.topology, existing)
        except (PlanError, CapacityError) as exc:
            if not fallback:
                raise
            await self._check_initialised()
            return await self._deploy_on_hosts(spec, exc, existing)
        await self._check_initialised()
        epoch = epoch if epoch is not None else secrets.randbits(32) | 1
        plan = job_plan(job, self.topology, alloc, epoch)
        groups = job_groups(job, self.topology, alloc)
        # The group first: by the time the job's entries send BIER to it, it exists.
        writes: dict[str, list[Entity]] = {
            sw: ([groups[sw]] if sw in groups else []) + list(entries)
            for sw, entries in plan.items()}

        held: dict[str, set[object]] = {
            sw: {_key(e) for e in [*existing.get(sw, ()), *held_groups.get(sw, ())]}
            for sw in writes}

        async def write(sw: str, client: SwitchClient) -> None:
            await _reset_job_counters(client, alloc[sw].job_index)
            await client.insert(writes[sw])

        await self._insert_all(job.job_id, writes, held, write)
        LOG.info("job %d deployed on %s", job.job_id, ", ".join(plan))
        return Deployment(job, alloc, epoch, plan, groups)

    async def _insert_all(self, job_id: int, writes: Mapping[str, Sequence[Entity]],
                          held: Mapping[str, set[object]],
                          write: Callable[[str, SwitchClient], Awaitable[None]]) -> None:
        """``write`` on each switch of ``writes``; if one fails, remove again what
        this write inserted, and only that, then raise DeployError.

        What was inserted: all of ``writes[sw]`` where ``write`` succeeded; where it
        failed, what the switch says it wrote (``SwitchError.written``), or, if it
        cannot say, what it holds now exactly as written whose key it did not hold
        before (``held``: the keys read before writing, as the only writer)."""
        results = await self._each(write, list(writes))
        failures = {sw: r for sw, r in results.items() if isinstance(r, BaseException)}
        if not failures:
            return

        def inserted(sw: str) -> list[Entity]:
            err = failures.get(sw)
            if err is None:
                return list(writes[sw])
            if isinstance(err, SwitchError) and err.written is not None:
                return [e for e in writes[sw] if e in err.written]
            return [e for e in writes[sw] if _key(e) not in held.get(sw, set())]

        rollback = await self._each(lambda sw, c: self._remove_exact(c, inserted(sw)),
                                    list(writes))
        raise DeployError(job_id, failures, {sw: r for sw, r in rollback.items()
                                             if isinstance(r, BaseException)})

    async def _deploy_on_hosts(self, spec: JobSpec | Job, reason: InputError,
                               existing: Mapping[str, Sequence[TableEntry]]) -> Deployment:
        why = "; ".join(reason.problems)
        # The caller gets the reason (Deployment.fallback) and says it loudly (inactl).
        LOG.info("job %d: no switch can aggregate it (%s): it runs on its hosts",
                 spec.job_id, why)
        plan = on_hosts_plan(spec.job_id, spec.workers, spec.slots, self.topology, 0)
        held = {sw: {_key(e) for e in existing.get(sw, ())} for sw in plan}
        await self._insert_all(spec.job_id, plan, held, lambda sw, c: c.insert(plan[sw]))
        return Deployment(None, {}, 0, plan, {}, why)

    async def rewrite_job(self, job_id: int, current: Mapping[str, Sequence[Entity]],
                          desired: Mapping[str, Sequence[Entity]],
                          new_indices: Mapping[str, int]) -> bool:
        """Change a deployed job's entries and groups from ``current`` to ``desired``
        (per switch), only what differs: new state first (the counters of a job index
        in ``new_indices`` at zero), the member entries (which switch the workers over)
        next, what is stale last, entries before groups. True if anything was written."""
        have = {sw: {_key(e): e for e in es} for sw, es in current.items()}
        want = {sw: {_key(e): e for e in es} for sw, es in desired.items()}
        switches = sorted(set(have) | set(want))

        def changes(sw: str, members: bool) -> tuple[list[Entity], list[Entity]]:
            old, new = have.get(sw, {}), want.get(sw, {})
            pick = [e for e in new.values()
                    if (isinstance(e, TableEntry) and e.table == n.JOB_MEMBERS.name) == members]
            # Groups first: nothing may send to a group that does not exist yet.
            inserts = sorted((e for e in pick if _key(e) not in old),
                             key=lambda e: not isinstance(e, McastGroup))
            return inserts, [e for e in pick if _key(e) in old and old[_key(e)] != e]

        new_state = {sw: changes(sw, members=False) for sw in switches}
        member_state = {sw: changes(sw, members=True) for sw in switches}
        stale = {sw: sorted((e for k, e in have.get(sw, {}).items() if k not in want.get(sw, {})),
                            key=lambda e: isinstance(e, McastGroup)) for sw in switches}
        async with self.writing():
            return await self._rewrite(job_id, switches, new_state, member_state, stale,
                                       new_indices)

    async def _rewrite(self, job_id: int, switches: Sequence[str],
                       new_state: Mapping[str, tuple[list[Entity], list[Entity]]],
                       member_state: Mapping[str, tuple[list[Entity], list[Entity]]],
                       stale: Mapping[str, list[Entity]],
                       new_indices: Mapping[str, int]) -> bool:
        async def write_new(sw: str, client: SwitchClient) -> None:
            if sw in new_indices:
                await _reset_job_counters(client, new_indices[sw])
            await client.insert(new_state[sw][0])
            await client.modify(new_state[sw][1])

        async def switch_over(sw: str, client: SwitchClient) -> None:
            await client.insert(member_state[sw][0])
            await client.modify(member_state[sw][1])

        async def remove_stale(sw: str, client: SwitchClient) -> None:
            await client.delete(stale[sw])

        written = False
        for what, fn, busy in (
                ("writing", write_new, [sw for sw in switches
                                        if any(new_state[sw]) or sw in new_indices]),
                ("switching the workers over for", switch_over,
                 [sw for sw in switches if any(member_state[sw])]),
                ("removing the stale state of", remove_stale,
                 [sw for sw in switches if stale[sw]])):
            self._raise_failures(f"{what} job {job_id}", await self._each(fn, busy))
            written |= bool(busy)
        return written

    @staticmethod
    async def _remove_exact(client: SwitchClient, entities: Sequence[Entity]) -> None:
        """Delete those of ``entities`` the switch holds exactly as given (not another
        writer's entry or group that happens to share a key)."""
        tables = {e.table for e in entities if isinstance(e, TableEntry)}
        held: set[Entity] = {e for t in tables for e in await client.read_table(t)}
        if any(isinstance(e, McastGroup) for e in entities):
            held.update(await client.read_groups())
        # Entries before groups: nothing may point at a group that is gone.
        await client.delete(sorted((e for e in entities if e in held),
                                   key=lambda e: isinstance(e, McastGroup)))

    async def _check_initialised(self) -> None:
        async def check(sw: str, client: SwitchClient) -> bool:
            return bool(await client.read_table(n.LOCAL_ADDRESSES.name))

        results = await self._each(check)
        self._raise_failures("checking the switches", results)
        bare = sorted(sw for sw, ok in results.items() if ok is False)
        if bare:
            raise ControllerError(f"switches {bare} hold no base state: run `inactl init` first")

    async def teardown(self, job_id: int) -> list[str]:
        """Remove every entry of the job; the switches it was removed from."""
        async with self.writing():
            return await self._teardown(job_id)

    async def _teardown(self, job_id: int) -> list[str]:
        existing = await self._read_jobs()
        mine: dict[str, list[Entity]] = {
            sw: [e for e in entries if _job_id(e) == job_id] for sw, entries in existing.items()}
        mine = {sw: es for sw, es in mine.items() if es}
        if not mine:
            raise JobError([f"job {job_id} is not deployed"])
        for entities in mine.values():
            # The job's group, by the job index of its vat_jobs entry (entries first).
            entities += [McastGroup(job_group_id(e.param("job_index")), ())
                         for e in entities
                         if isinstance(e, TableEntry) and e.table == n.VAT_JOBS.name]
        results = await self._each(lambda sw, c: c.delete(mine[sw]), list(mine))
        self._raise_failures(f"tearing down job {job_id}", results)
        LOG.info("job %d removed from %s", job_id, ", ".join(mine))
        return sorted(mine)

    # --- status --------------------------------------------------------------------------

    async def status(self) -> dict[str, SwitchStatus]:
        """Per switch: base state size, job entries and their counters, drops by reason."""

        async def read(sw: str, client: SwitchClient) -> SwitchStatus:
            jobs = _jobs_on_switch(sw, [e for spec in (n.VAT_JOBS, n.VAT_SETS)
                                        for e in await client.read_table(spec.name)])
            base = 0
            for spec in n.BASE_TABLES:
                base += len(await client.read_table(spec.name))
            job_cells: dict[int, CounterValue] = {}
            for name in n.JOB_STAT_COUNTERS:
                for i, v in (await client.read_counter(name)).items():
                    job_cells[i] = job_cells.get(i, CounterValue()) + v
            switch_cells: dict[int, CounterValue] = {}
            for name in n.SWITCH_STAT_COUNTERS:
                for i, v in (await client.read_counter(name)).items():
                    switch_cells[i] = switch_cells.get(i, CounterValue()) + v
            job_stats = {
                j.job_id: {
                    stat: job_cells.get(j.job_index * JOB_STAT_STRIDE + stat, CounterValue())
                    for stat in JobStat
                }
                for j in jobs
            }
            switch_stats = {stat: switch_cells.get(stat, CounterValue()) for stat in SwitchStat}
            ports = sorted(self.topology.declared_ports(sw))
            by_port = {}
            for name in n.PORT_COUNTERS:
                cells = await client.read_counter(name)
                by_port[name] = {p: cells.get(p, CounterValue()) for p in ports}
            problems = []
            if base == 0:
                problems.append("no base state: run `inactl init`")
            return SwitchStatus(sw, sorted(jobs, key=lambda j: j.job_id), job_stats,
                                switch_stats, base, problems, by_port[n.PORT_PACKETS],
                                by_port[n.PORT_MARKS], by_port[n.PORT_RECEIVED])

        results = await self._each(read)
        self._raise_failures("reading status", results)
        return {sw: r for sw, r in results.items() if isinstance(r, SwitchStatus)}


async def _reset_job_counters(client: SwitchClient, job_index: int) -> None:
    """A job index may have served another job: its counters start at zero."""
    cells = range(job_index * JOB_STAT_STRIDE, (job_index + 1) * JOB_STAT_STRIDE)
    for counter in n.JOB_STAT_COUNTERS:
        await client.reset_counter(counter, cells)


def _jobs_on_switch(switch: str, entries: Sequence[TableEntry]) -> list[JobOnSwitch]:
    """The vat_jobs entries among ``entries``, each with its A-BM (over all sets: from
    the entry for a node in one set, from vat_sets for a root spanning several)."""
    abm: dict[int, int] = {}
    for e in entries:
        if e.table == n.VAT_SETS.name:
            si = e.match_value("si")
            assert isinstance(si, int)
            abm[_job_id(e)] = abm.get(_job_id(e), 0) | join_set(si, e.param("abm"))
        elif e.table == n.VAT_JOBS.name and e.action != n.TRANSIT.name and e.param("abm"):
            abm[_job_id(e)] = abm.get(_job_id(e), 0) | join_set(e.param("set_id"),
                                                                e.param("abm"))
    return [JobOnSwitch(switch, e, abm.get(_job_id(e), 0))
            for e in entries if e.table == n.VAT_JOBS.name]


def _job_id(e: TableEntry) -> int:
    value = e.match_value("job_id")
    assert isinstance(value, int)
    return value


def _key(e: Entity) -> object:
    return ("group", e.group_id) if isinstance(e, McastGroup) else e.key
