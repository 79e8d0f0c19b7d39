"""Job specs and their validation against a topology and draft-song-ina-00.

Format (YAML)::

    job_id: 1
    op: sum                 # sum, min or max over signed 32-bit integers
    workers: [w1, w2, w3, w4]
    root: s6                # the VAT root, a switch or a server; it covers every worker
    aggregators:            # every other VAT node: switch -> the workers it covers (its A-BM)
      s1: [w1, w2]
      s7: [w3, w4]
    slots: 16               # optional: aggregation slots per VAT node (power of two)

Without ``aggregators`` the job is planned (ina.planner), and ``root`` is
optional: give it to fix the root, leave it out to let the planner choose.

A VAT node's parent is the smallest other node that covers all its workers; a
worker's parent is the smallest node that covers it. Each child sends to its
parent's address; a partial result carries ``P-BM = A-BM`` of its sender.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ina.constants import AGG_SLOTS, Op
from ina.errors import InputError
from ina.topology import Topology
from ina.wire import split_sets
from ina.yamlfile import load_yaml

DEFAULT_SLOTS = 16
MAX_JOB_ID = 0xFFFF


class JobError(InputError):
    """An invalid job; ``problems`` lists every problem found."""

    what = "job"


@dataclass(frozen=True)
class JobSpec:
    """A job as the user wrote it, not yet checked."""

    job_id: Any
    op: Any
    workers: Any
    root: Any = None
    aggregators: Any = None  # None: plan the VAT (ina.planner)
    slots: Any = DEFAULT_SLOTS

    @classmethod
    def load(cls, path: str | Path) -> JobSpec:
        try:
            data = load_yaml(path)
        except (OSError, yaml.YAMLError) as exc:
            raise JobError([f"{path}: cannot read: {exc}"]) from exc
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "job") -> JobSpec:
        if not isinstance(data, dict):
            raise JobError([f"{source}: expected a mapping"])
        known = {"job_id", "op", "workers", "root", "aggregators", "slots"}
        problems = [f"{source}: unknown key {k!r}" for k in sorted(set(data) - known, key=str)]
        required = ("job_id", "op", "workers") + (("root",) if "aggregators" in data else ())
        problems += [f"{source}: missing {k!r}" for k in required if k not in data]
        if problems:
            raise JobError(problems)
        return cls(
            job_id=data["job_id"], op=data["op"], workers=data["workers"], root=data.get("root"),
            aggregators=(data["aggregators"] or {}) if "aggregators" in data else None,
            slots=data.get("slots", DEFAULT_SLOTS),
        )


@dataclass(frozen=True)
class VatNode:
    switch: str
    abm: int
    covers: tuple[str, ...]  # worker names, in job order
    parent: str | None  # parent switch; None at the root
    children: tuple[str, ...]  # switches and workers, in name order

    @property
    def is_root(self) -> bool:
        return self.parent is None


@dataclass(frozen=True)
class Job:
    """A validated job: its VAT with A-BMs and parents."""

    job_id: int
    op: Op
    workers: tuple[str, ...]
    root: str
    nodes: dict[str, VatNode]  # by switch
    worker_parent: dict[str, str]  # worker -> the switch it sends to
    worker_bit: dict[str, int]  # worker -> its P-BM
    slots: int

    @property
    def abm(self) -> int:
        return self.nodes[self.root].abm

    def target_of(self, worker: str, topology: Topology) -> str:
        """The address a worker sends its packets to: its parent's (a switch's
        loopback, or the server root's address)."""
        return topology.address(self.worker_parent[worker])

    def root_is_server(self, topology: Topology) -> bool:
        return self.root in topology.hosts

    def to_spec(self) -> dict[str, Any]:
        """This job as an explicit job file (YAML-ready), e.g. after planning."""
        return {
            "job_id": self.job_id, "op": self.op.name.lower(), "workers": list(self.workers),
            "root": self.root,
            "aggregators": {sw: list(n.covers) for sw, n in sorted(self.nodes.items())
                            if not n.is_root},
            "slots": self.slots,
        }

    def edges(self) -> list[tuple[str, str]]:
        """(child, parent) for every VAT edge; children are workers or switches."""
        result = [(w, self.worker_parent[w]) for w in self.workers]
        result += [(n.switch, n.parent) for n in self.nodes.values() if n.parent is not None]
        return result


def _op(value: Any, problems: list[str]) -> Op:
    if isinstance(value, str) and value.upper() in Op.__members__:
        return Op[value.upper()]
    problems.append(f"op {value!r} is not one of {[o.name.lower() for o in Op]}")
    return Op.SUM


def _names(value: Any, what: str, problems: list[str]) -> list[str]:
    if not isinstance(value, list) or not value:
        problems.append(f"{what} must be a non-empty list of names")
        return []
    names = [str(v) for v in value]
    dups = sorted(n for n, k in Counter(names).items() if k > 1)
    if dups:
        problems.append(f"{what} lists {dups} more than once")
    return list(dict.fromkeys(names))


def validate_job(spec: JobSpec, topology: Topology) -> Job:
    """Check a job against the topology and the draft; all problems at once."""
    if spec.aggregators is None:
        raise JobError(["the job has no aggregators: plan it (ina.planner.resolve)"])
    problems: list[str] = []
    job_id = spec.job_id
    if not isinstance(job_id, int) or isinstance(job_id, bool) or not 1 <= job_id <= MAX_JOB_ID:
        problems.append(f"job_id {job_id!r} is not an integer in 1..{MAX_JOB_ID}")
    op = _op(spec.op, problems)
    slots = spec.slots
    if (not isinstance(slots, int) or isinstance(slots, bool) or slots < 1
            or slots & (slots - 1) or slots > AGG_SLOTS):
        problems.append(f"slots {slots!r} is not a power of two in 1..{AGG_SLOTS}")

    workers = _names(spec.workers, "workers", problems)
    worker_set = set(workers)
    for w in workers:
        if w not in topology.hosts:
            problems.append(
                f"worker {w!r} is not a host of topology {topology.name!r}"
                + (" (it is a switch)" if w in topology.switches else "")
            )
    root = str(spec.root)
    if root in topology.hosts:
        if root in workers:
            problems.append(f"root {root} is a worker too: a server root only aggregates")
    elif root not in topology.switches:
        problems.append(f"root {root!r} is neither a switch nor a host of topology "
                        f"{topology.name!r}")

    if not isinstance(spec.aggregators, dict):
        problems.append("aggregators must map switch names to lists of workers")
        aggregators: dict[str, list[str]] = {}
    else:
        aggregators = {}
        for sw, covers in spec.aggregators.items():
            sw = str(sw)
            if sw == root:
                problems.append(
                    f"aggregator {sw} is the root; the root covers every worker, do not list it"
                )
                continue
            if sw not in topology.switches:
                problems.append(f"aggregator {sw!r} is not a switch of topology {topology.name!r}")
                continue
            names = _names(covers, f"aggregator {sw}", problems)
            outside = [w for w in names if w not in worker_set]
            if outside:
                problems.append(
                    f"aggregator {sw} covers {outside}, which are not workers of the job")
            aggregators[sw] = [w for w in names if w in worker_set]
    if problems:
        raise JobError(problems)

    covers = {sw: frozenset(ws) for sw, ws in aggregators.items()}
    covers[root] = frozenset(workers)
    names = sorted(covers)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ca, cb = covers[a], covers[b]
            common = ca & cb
            if ca == cb:
                problems.append(f"{a} and {b} cover the same workers {sorted(ca)}: "
                                "a parent must cover strictly more than its child")
            elif common and not (ca < cb or cb < ca):
                problems.append(
                    f"{a} and {b} both cover {sorted(common)} but neither covers the other's "
                    "workers: a worker's contributions would be split between two subtrees"
                )
    if problems:
        raise JobError(problems)

    def smallest_cover(workers_needed: frozenset[str], exclude: str | None) -> str:
        candidates = [s for s in covers if s != exclude and workers_needed <= covers[s]]
        best: str = min(candidates, key=lambda s: (len(covers[s]), s))
        return best

    parent = {sw: smallest_cover(covers[sw], sw) for sw in covers if sw != root}
    worker_parent: dict[str, str] = {}
    for sw in sorted(covers, key=lambda s: (len(covers[s]), s)):  # smallest cover first
        for w in covers[sw]:
            worker_parent.setdefault(w, sw)
    worker_parent = {w: worker_parent[w] for w in workers}
    worker_bit = {w: topology.hosts[w].bit for w in workers}
    order = {w: i for i, w in enumerate(workers)}  # covers are listed in the job's order
    children: dict[str, list[str]] = {sw: [] for sw in covers}
    for child, par in list(parent.items()) + list(worker_parent.items()):
        children[par].append(child)
    nodes = {
        sw: VatNode(
            switch=sw,
            abm=_abm(covers[sw], worker_bit),
            covers=tuple(sorted(covers[sw], key=order.__getitem__)),
            parent=parent.get(sw),
            children=tuple(sorted(children[sw])),
        )
        for sw in covers
    }
    job = Job(
        job_id=job_id, op=op, workers=tuple(workers), root=root, nodes=nodes,
        worker_parent=worker_parent, worker_bit=worker_bit, slots=slots,
    )
    for sw, node in sorted(nodes.items()):
        sets = sorted(split_sets(node.abm))
        if node.parent is not None and len(sets) > 1:
            problems.append(
                f"aggregator {sw} covers workers in BIER sets {sets}: a node below the root "
                "must lie within one set (its result travels in one packet with one P-BM)")
    _check_routes(job, topology, problems)
    if problems:
        raise JobError(problems)
    return job


def _abm(workers: frozenset[str], worker_bit: dict[str, int]) -> int:
    result = 0
    for w in workers:
        result |= worker_bit[w]
    return result


def _check_routes(job: Job, topology: Topology, problems: list[str]) -> None:
    """A child's packets to its parent must not cross another VAT node of the job
    whose A-BM overlaps the child's: that switch would absorb them (the draft's
    AND test) and the parent would wait forever."""
    for child, parent in job.edges():
        child_bits = job.worker_bit[child] if child in job.worker_bit else job.nodes[child].abm
        for hop in topology.path(child, parent)[1:-1]:
            node = job.nodes.get(hop)
            if node is not None and node.abm & child_bits:
                problems.append(
                    f"{child}'s packets to its parent {parent} cross {hop}, a VAT node that "
                    f"covers some of the same workers: {hop} would absorb them"
                )
