"""Switch resources of a job: a job index (its block of counters) on every switch
the job crosses, and an aligned run of aggregation slots on each of its VAT nodes,
chosen around what the switch's existing job entries take."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ina.control import p4names as n
from ina.control.entities import TableEntry
from ina.errors import CapacityError
from ina.protocol.constants import AGG_SLOTS, MAX_JOBS
from ina.spec.job import Job
from ina.spec.topology import Topology


@dataclass(frozen=True)
class Allocation:
    """Per-switch resources of one job."""

    job_index: int  # its block in the job_stats counters
    slot_base: int = 0  # first aggregation slot (VAT nodes only)


@dataclass(frozen=True)
class Capacity:
    """What a switch can still take: job counter blocks, and free aggregation slots
    (at least this many in one aligned run)."""

    job_indices: int = MAX_JOBS
    free_slot_run: int = AGG_SLOTS


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


def _free_run(ranges: Sequence[range], slots: int) -> int | None:
    """The first aligned run of ``slots`` slots that none of ``ranges`` takes."""
    return next((start for start in range(0, AGG_SLOTS, slots)
                 if all(start + slots <= r.start or start >= r.stop for r in ranges)), None)


def capacity(existing: Sequence[TableEntry], slots: int) -> Capacity:
    """What a switch holding ``existing`` job entries can still take, for a job
    of ``slots`` slots."""
    indices, ranges = used_resources(existing)
    return Capacity(MAX_JOBS - len(indices), 0 if _free_run(ranges, slots) is None else slots)


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
            found = _free_run(ranges, job.slots)
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
        raise CapacityError(problems)
    return result
