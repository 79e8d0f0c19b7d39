"""Job specs and their validation against a topology and draft-song-ina-00.

Format (YAML)::

    job_id: 1
    op: sum                 # sum, min or max over signed 32-bit integers
    workers: [w1, w2, w3, w4]
    root: s6                # the VAT root, a switch or a server; it covers every worker
    aggregators:            # every other VAT node: switch -> the workers it covers (its A-BM)
      s1: [w1, w2]
      s7: [w3, w4]
    slots: 32               # optional: aggregation slots per VAT node (power of two;
                            # default 32; a worker keeps half of them outstanding)

Without ``aggregators`` the job is planned (ina.control.vat_planner), and ``root`` is
optional: give it to fix the root, leave it out to let the planner choose.

A VAT node's parent is the smallest other node that covers all its workers; a
worker's parent is the smallest node that covers it. Each child sends to its
parent's address; a partial result carries ``P-BM = A-BM`` of its sender.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ina.errors import JobError, YamlFileError
from ina.protocol.bitmaps import split_sets
from ina.protocol.constants import AGG_SLOTS, Op
from ina.spec.topology import Topology
from ina.spec.yamlfile import load_yaml, show

DEFAULT_SLOTS = 32
MAX_JOB_ID = 0xFFFF


@dataclass(frozen=True)
class RouteConflict:
    """A child's packets to its parent cross ``switch``, another VAT node of the job
    whose A-BM overlaps the child's: that switch would absorb them (the draft's AND
    test) and the parent would wait forever."""

    child: str  # a worker or a VAT node's switch
    parent: str
    switch: str

    def __str__(self) -> str:
        return (f"{self.child}'s packets to its parent {self.parent} cross {self.switch}, "
                f"a VAT node that covers some of the same workers: {self.switch} would "
                "absorb them")


KEYS = ("job_id", "op", "workers", "root", "aggregators", "slots")


@dataclass(frozen=True)
class JobSpec:
    """A job's own fields, parsed and checked: types, ranges, duplicates. What
    depends on a topology (names, coverage, routes) is checked by ``validate_job``,
    or by the planner for a job without aggregators.

    ``from_dict`` and ``load`` parse a job file and report every problem at once;
    constructing one directly checks the same things.
    """

    job_id: int
    op: Op
    workers: tuple[str, ...]
    root: str | None = None  # None: the planner chooses (only without aggregators)
    aggregators: Mapping[str, tuple[str, ...]] | None = None  # None: plan the VAT
    slots: int = DEFAULT_SLOTS
    source: str | None = field(default=None, compare=False)  # the file, for messages

    def __post_init__(self) -> None:
        given = {k for k in KEYS if getattr(self, k) is not None}
        problems = _field_problems({k: getattr(self, k) for k in KEYS}, given)
        if problems:
            raise JobError(problems, self.source)
        # Plain values in, typed values kept: "sum" -> Op.SUM, lists -> tuples.
        if isinstance(self.op, str):
            object.__setattr__(self, "op", Op[self.op.upper()])
        object.__setattr__(self, "workers", tuple(self.workers))
        if self.aggregators is not None:
            object.__setattr__(self, "aggregators",
                               {sw: tuple(ws) for sw, ws in self.aggregators.items()})

    @classmethod
    def load(cls, path: str | Path) -> JobSpec:
        try:
            data = load_yaml(path)
        except YamlFileError as exc:
            raise JobError([f"cannot read it: {exc}"], str(path)) from exc
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> JobSpec:
        """Parse a job document (the YAML mapping); JobError lists every problem."""
        if not isinstance(data, dict):
            raise JobError([f"expected a mapping of {', '.join(KEYS)}, got {show(data)}"],
                           source)
        problems = [f"unknown key {show(k)} (a job has {', '.join(KEYS)})"
                    for k in data if k not in KEYS]
        # `root:` left empty is no root; `aggregators:` left empty is a VAT of the root only.
        given = {k for k in KEYS if k in data and not (k == "root" and data[k] is None)}
        problems += _field_problems(data, given)
        if problems:
            raise JobError(problems, source)
        fields = {k: data[k] for k in given}
        if "aggregators" in fields:
            fields["aggregators"] = fields["aggregators"] or {}
        return cls(**fields, source=source)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _name_list(value: Any, what: str, problems: list[str]) -> None:
    if not isinstance(value, (list, tuple)) or not value:
        problems.append(f"{what}: expected a non-empty list of names, got {show(value)}")
        return
    bad = [v for v in value if not _is_name(v)]
    if bad:
        problems.append(f"{what}: {', '.join(show(v) for v in bad[:3])}"
                        f"{' ...' if len(bad) > 3 else ''} "
                        f"{'is not a name' if len(bad) == 1 else 'are not names'}")
        return
    dups = sorted(n for n, k in Counter(value).items() if k > 1)
    if dups:
        problems.append(f"{what} lists {dups} more than once")


def _field_problems(data: Mapping[str, Any], given: set[str]) -> list[str]:
    """What is wrong with a job's own fields (``given``: the keys it has)."""
    problems = [f"missing {k!r}" for k in ("job_id", "op", "workers") if k not in given]
    if "aggregators" in given and "root" not in given:
        problems.append("missing 'root' (a job with aggregators names its root)")
    if "job_id" in given:
        job_id = data["job_id"]
        if (not isinstance(job_id, int) or isinstance(job_id, bool)
                or not 1 <= job_id <= MAX_JOB_ID):
            problems.append(f"job_id {show(job_id)} is not an integer in 1..{MAX_JOB_ID}")
    if "op" in given:
        op = data["op"]
        if not isinstance(op, Op) and not (isinstance(op, str)
                                           and op.upper() in Op.__members__):
            problems.append(f"op {show(op)} is not one of "
                            f"{', '.join(o.name.lower() for o in Op)}")
    if "workers" in given:
        _name_list(data["workers"], "workers", problems)
    if "root" in given and data["root"] is not None and not _is_name(data["root"]):
        problems.append(f"root {show(data['root'])} is not a name (a switch or a host)")
    if "aggregators" in given:
        aggregators = data["aggregators"]
        if aggregators is not None and not isinstance(aggregators, Mapping):
            problems.append("aggregators: expected a mapping of switch to the workers it "
                            f"covers, got {show(aggregators)}")
        elif aggregators:
            for sw, covers in aggregators.items():
                if not _is_name(sw):
                    problems.append(f"aggregators: {show(sw)} is not a switch name")
                else:
                    _name_list(covers, f"aggregator {sw}", problems)
    if "slots" in given:
        slots = data["slots"]
        if (not isinstance(slots, int) or isinstance(slots, bool) or slots < 1
                or slots & (slots - 1) or slots > AGG_SLOTS):
            problems.append(f"slots {show(slots)} is not a power of two in 1..{AGG_SLOTS}")
    return problems


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

    def to_yaml(self) -> str:
        """This job as the text of an explicit job file."""
        return yaml.safe_dump(self.to_spec(), sort_keys=False)

    def save(self, path: Path) -> None:
        """Write this job as an explicit job file (OSError if it cannot)."""
        path.write_text(self.to_yaml())

    def edges(self) -> list[tuple[str, str]]:
        """(child, parent) for every VAT edge; children are workers or switches."""
        result = [(w, self.worker_parent[w]) for w in self.workers]
        result += [(n.switch, n.parent) for n in self.nodes.values() if n.parent is not None]
        return result


def check_names(spec: JobSpec, topology: Topology) -> list[str]:
    """What is wrong with the names a job uses, on this topology: its workers must
    be hosts, its root a switch or a host that is no worker."""
    problems = []
    for w in spec.workers:
        if w not in topology.hosts:
            problems.append(
                f"worker {w!r} is not a host of topology {topology.name!r}"
                + (" (it is a switch)" if w in topology.switches else "")
            )
    root = spec.root
    if root is not None:
        if root in topology.hosts:
            if root in spec.workers:
                problems.append(f"root {root} is a worker too: a server root only aggregates")
        elif root not in topology.switches:
            problems.append(f"root {root!r} is neither a switch nor a host of topology "
                            f"{topology.name!r}")
    return problems


def validate_job(spec: JobSpec, topology: Topology) -> Job:
    """Check a job with aggregators against the topology and the draft; all
    problems at once. Routing conflicts are also in ``JobError.conflicts``."""
    if spec.aggregators is None:
        raise JobError(["the job has no aggregators (no VAT): plan it first (inactl plan "
                        "--job JOB -o FILE, or ina.control.vat_planner.resolve)"], spec.source)
    assert spec.root is not None  # JobSpec requires it with aggregators
    problems = check_names(spec, topology)
    aggregators = _aggregators(spec, topology, problems)
    if problems:
        raise JobError(problems, spec.source)
    covers = {sw: frozenset(ws) for sw, ws in aggregators.items()}
    covers[spec.root] = frozenset(spec.workers)
    problems += _nesting_problems(covers)
    if problems:
        raise JobError(problems, spec.source)
    job = _tree(spec, topology, covers)
    problems += _set_problems(job) + unreachable(job, topology)
    if problems:
        raise JobError(problems, spec.source)
    conflicts = route_conflicts(job, topology)
    problems += [str(c) for c in conflicts]
    if problems:
        raise JobError(problems, spec.source, conflicts)
    return job


def _aggregators(spec: JobSpec, topology: Topology, problems: list[str]) -> dict[str, list[str]]:
    """The job's aggregators below the root, each with the workers it covers;
    what is wrong with them added to ``problems``."""
    assert spec.aggregators is not None
    worker_set = set(spec.workers)
    aggregators: dict[str, list[str]] = {}
    for sw, names in spec.aggregators.items():
        if sw == spec.root:
            problems.append(
                f"aggregator {sw} is the root; the root covers every worker, do not list it"
            )
            continue
        if sw not in topology.switches:
            problems.append(f"aggregator {sw!r} is not a switch of topology {topology.name!r}"
                            + (" (it is a host)" if sw in topology.hosts else ""))
            continue
        outside = [w for w in names if w not in worker_set]
        if outside:
            problems.append(
                f"aggregator {sw} covers {outside}, which are not workers of the job")
        aggregators[sw] = [w for w in names if w in worker_set]
    return aggregators


def _nesting_problems(covers: dict[str, frozenset[str]]) -> list[str]:
    """What keeps the VAT nodes' covers (root included) from nesting as a tree."""
    problems = []
    nodes_by_name = sorted(covers)
    for i, a in enumerate(nodes_by_name):
        for b in nodes_by_name[i + 1:]:
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
    return problems


def _tree(spec: JobSpec, topology: Topology, covers: dict[str, frozenset[str]]) -> Job:
    """The job whose VAT nodes cover ``covers`` (nested): each node's parent is the
    smallest node that covers more, each worker's the smallest that covers it."""
    assert spec.root is not None
    root, workers = spec.root, list(spec.workers)

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
    return Job(
        job_id=spec.job_id, op=spec.op, workers=tuple(workers), root=root, nodes=nodes,
        worker_parent=worker_parent, worker_bit=worker_bit, slots=spec.slots,
    )


def _set_problems(job: Job) -> list[str]:
    """Nodes below the root whose workers lie in more than one BIER set."""
    problems = []
    for sw, node in sorted(job.nodes.items()):
        sets = sorted(split_sets(node.abm))
        if node.parent is not None and len(sets) > 1:
            problems.append(
                f"aggregator {sw} covers workers in BIER sets {sets}: a node below the root "
                "must lie within one set (its result travels in one packet with one P-BM)")
    return problems


def unreachable(job: Job, topology: Topology) -> list[str]:
    """What a failure cut off in the job: workers, and VAT edges without a route."""
    problems = [f"worker {w} is cut off ({topology.failures.describe()} down)"
                for w in job.workers if not topology.attached(w)]
    if job.root in topology.hosts and not topology.attached(job.root):
        problems.append(f"root {job.root} is cut off ({topology.failures.describe()} down)")
    if problems:
        return problems
    for child, parent in job.edges():
        if not topology.reaches(child, parent):
            problems.append(f"{child} cannot reach its parent {parent} "
                            f"({topology.failures.describe()} down)")
    return problems


def _abm(workers: frozenset[str], worker_bit: dict[str, int]) -> int:
    result = 0
    for w in workers:
        result |= worker_bit[w]
    return result


def route_conflicts(job: Job, topology: Topology) -> list[RouteConflict]:
    """Every child whose packets to its parent cross another VAT node of the job
    whose A-BM overlaps the child's (see RouteConflict)."""
    conflicts = []
    for child, parent in job.edges():
        child_bits = job.worker_bit[child] if child in job.worker_bit else job.nodes[child].abm
        for hop in topology.path(child, parent)[1:-1]:
            node = job.nodes.get(hop)
            if node is not None and node.abm & child_bits:
                conflicts.append(RouteConflict(child, parent, hop))
    return conflicts
