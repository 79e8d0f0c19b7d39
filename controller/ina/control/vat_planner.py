"""Automatic VAT planning: choose a job's aggregation switches and their A-BMs.

Objective: the fewest bytes on links in the aggregation phase, that is the
fewest link crossings per chunk, summed over the job's streams (each VAT edge
child -> parent carries one stream along the route between them). Ties go to
fewer VAT nodes (less switch state), then to names.

Algorithm. For a root r, take the routes of every worker toward r: they form a
tree (one routing tree per destination, see ina.spec.topology). A stream can only
be merged where routes meet, so the best plan on that tree puts a VAT node at
every switch where the routes of two or more children meet (a branching
switch), and nothing elsewhere: every link then carries one stream, which no
plan along these routes can beat. Switches without capacity (no free job
index or slot run) are skipped: their children go to the next node up, and so
are switches whose workers lie in more than one BIER set (only the root may
span sets: a node's result travels in one packet with one set's P-BM). The
plan is then checked with the job validator against the real routes between
each child and its parent; a node whose edges would cross another node is
dropped and the plan rebuilt. Without a given root, every switch is tried and
the cheapest plan kept. Cost: O(S * W * D) for S switches, W workers, path
length D.

The naive plan for comparison sends every worker straight to the root.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ina.control.allocation import Capacity
from ina.errors import JobError, PlanError
from ina.protocol.bitmaps import set_of
from ina.protocol.constants import Op
from ina.spec.job import DEFAULT_SLOTS, Job, JobSpec, check_names, validate_job
from ina.spec.topology import Topology


@dataclass(frozen=True)
class VatPlan:
    """A planned job and what its VAT costs."""

    job: Job
    cost: int  # link crossings per chunk in the aggregation phase
    naive_cost: int  # the same with every worker sending to the root directly


def root_only(job: Job, topology: Topology) -> Job:
    """The naive plan: the same workers and root, every worker sending to the root."""
    return validate_job(JobSpec(job.job_id, job.op, job.workers, job.root, {}, job.slots),
                        topology)


def stream_cost(job: Job, topology: Topology) -> int:
    """Link crossings per chunk of the aggregation phase: each VAT edge, along its route."""
    return sum(len(topology.path(child, parent)) - 1 for child, parent in job.edges())


def _tree_plan(topology: Topology, workers: list[str], root: str,
               usable: set[str], banned: set[str]) -> dict[str, tuple[str, ...]]:
    """Aggregators (switch -> covered workers) at the branching switches of the
    workers' routes toward ``root``."""
    below: dict[str, set[str]] = {}  # switch -> the route nodes just below it
    covers: dict[str, set[str]] = {}
    for w in workers:
        path = topology.path(w, root)
        for lower, upper in zip(path, path[1:], strict=False):
            below.setdefault(upper, set()).add(lower)
            covers.setdefault(upper, set()).add(w)
    return {sw: tuple(sorted(covers[sw])) for sw, children in below.items()
            if sw != root and len(children) >= 2 and sw in usable and sw not in banned
            and len({set_of(topology.hosts[w].bfr_id) for w in covers[sw]}) == 1}


def plan_job(topology: Topology, job_id: int, workers: Sequence[str], op: Op | str = Op.SUM,
             root: str | None = None, slots: int = DEFAULT_SLOTS,
             capacity: Mapping[str, Capacity] | None = None) -> VatPlan:
    """The cheapest valid plan, or PlanError saying why there is none (JobError,
    once, if the job's own fields are invalid)."""
    spec = JobSpec(job_id, Op[op.upper()] if isinstance(op, str) else op, tuple(workers),
                   root, None, slots)
    capacity = capacity or {}

    def fits(sw: str) -> bool:
        c = capacity.get(sw, Capacity())
        return c.job_indices > 0 and c.free_slot_run >= slots

    cut = [w for w in workers if w in topology.hosts and not topology.attached(w)]
    if cut:
        raise PlanError([f"workers {', '.join(cut)} are cut off "
                         f"({topology.failures.describe()} down)"])
    usable = {sw for sw in topology.switches if fits(sw)}
    if root is not None:
        if root not in topology.switches and root not in topology.hosts:
            raise PlanError([f"root {root!r} is neither a switch nor a host of topology "
                             f"{topology.name!r}"])
        if root in topology.switches and root not in usable:
            raise PlanError([f"root {root} has no room for job {job_id} "
                             f"(needs a job index and {slots} free slots)"])
        candidates = [root]
    else:
        candidates = sorted(usable)
        if not candidates:
            raise PlanError([f"no switch has room for job {job_id} (needs a job index and "
                             f"{slots} free slots)"])
    best: tuple[int, int, str] | None = None  # (cost, VAT nodes, root) of the best job
    best_job: Job | None = None
    reasons = []
    for r in candidates:
        if not all(topology.reaches(w, r) for w in workers):
            reasons.append(f"root {r}: cannot reach every worker "
                           f"({topology.failures.describe()} down)")
            continue
        try:
            job = _plan_for_root(topology, spec, r, usable)
        except JobError as exc:
            reasons.append(f"root {r}: {exc.problems[0]}")
            continue
        key = (stream_cost(job, topology), len(job.nodes), r)
        if best is None or key < best:
            best, best_job = key, job
    if best is None or best_job is None:
        raise PlanError([f"no valid plan for job {job_id}: " + "; ".join(reasons[:3])])
    return VatPlan(best_job, best[0], stream_cost(root_only(best_job, topology), topology))


def _plan_for_root(topology: Topology, spec: JobSpec, root: str, usable: set[str]) -> Job:
    banned: set[str] = set()
    workers = list(spec.workers)
    while True:
        aggregators = _tree_plan(topology, workers, root, usable, banned)
        try:
            job = validate_job(dataclasses.replace(spec, root=root, aggregators=aggregators),
                               topology)
        except JobError as exc:
            # Only routing conflicts can be fixed here: drop one node that takes part
            # in one (the first by name) and try again; the others stay.
            if len(exc.conflicts) < len(exc.problems):
                raise
            involved = {sw for c in exc.conflicts for sw in (c.child, c.parent, c.switch)}
            offenders = sorted(sw for sw in aggregators if sw in involved)
            if not offenders:
                raise
            banned.add(offenders[0])
            continue
        return job


def resolve(spec: JobSpec, topology: Topology,
            capacity: Mapping[str, Capacity] | None = None) -> Job:
    """The job a spec describes: validated as given, or planned when it has no
    ``aggregators`` (then ``root`` is optional). The names it uses are checked
    once, before any planning."""
    if spec.aggregators is not None:
        return validate_job(spec, topology)
    problems = check_names(spec, topology)
    if problems:
        raise JobError(problems, spec.source)
    try:
        plan = plan_job(topology, spec.job_id, spec.workers, spec.op, spec.root, spec.slots,
                        capacity)
    except PlanError as exc:
        raise PlanError(exc.problems, spec.source) from exc
    return plan.job
