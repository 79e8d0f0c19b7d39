"""The chaos soak's plan of what fails, without a lab (``inabench soak``,
ina.bench.soak runs it), decided by a seed so that a soak can be repeated:
``faults`` lists the elements that may fail (spines, aggregation and core
switches, edge switches without a worker of the job, links between switches;
never a worker's edge switch or host link, which would cut the worker off until it
is back), and ``schedule`` when each fails and comes back, never leaving the job's
workers unable to reach each other. The calls are ina.bench.chaos_calls', what the
misbehaving member and the outsider send ina.bench.chaos_frames'.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ina.bench.chaos_frames import MEMBER_KINDS, OUTSIDER_KINDS
from ina.spec.topology import Failures, Topology

# --- What fails -----------------------------------------------------------------------

#: Kinds of element that may fail, in the order reports list them.
FAULT_KINDS = ("spine", "aggregation switch", "core switch", "edge switch (no worker)", "link")


@dataclass(frozen=True)
class Fault:
    """An element that may fail: ("switch", name) or ("link", a, b)."""

    kind: str
    target: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.target[0]} {'-'.join(self.target[1:])}"

    def failures(self) -> Failures:
        if self.target[0] == "switch":
            return Failures().with_switch(self.target[1])
        return Failures().with_link(self.target[1], self.target[2])


def switch_roles(topology: Topology) -> dict[str, str]:
    """Each switch's place in the fabric: "edge" (hosts attached), "spine" (only
    edge switches around it: a two-tier fabric), "aggregation switch" (edge switches
    and others) or "core switch" (no edge switch around it)."""
    edges = {sw for sw in topology.switches
             if any(nb.is_host for nb in topology.ports(sw).values())}
    roles = {}
    for sw in topology.switches:
        around = {nb.node for nb in topology.ports(sw).values() if not nb.is_host}
        if sw in edges:
            roles[sw] = "edge"
        elif around and around <= edges:
            roles[sw] = "spine"
        elif around & edges:
            roles[sw] = "aggregation switch"
        else:
            roles[sw] = "core switch"
    return roles


def faults(topology: Topology, workers: Sequence[str]) -> list[Fault]:
    """Every element the soak may fail: switches (but the edge switch of a worker) and
    links between switches (no host's link)."""
    roles = switch_roles(topology)
    worker_edges = {topology.host_attachment(w)[0] for w in workers}
    result = [Fault("edge switch (no worker)" if roles[sw] == "edge" else roles[sw],
                    ("switch", sw))
              for sw in sorted(topology.switches) if sw not in worker_edges]
    pairs = {tuple(sorted((lk.a.node, lk.b.node))) for lk in topology.links
             if lk.a.node in topology.switches and lk.b.node in topology.switches}
    result += [Fault("link", ("link", *pair)) for pair in sorted(pairs)]
    return result


def workers_connected(topology: Topology, workers: Sequence[str], down: Failures) -> bool:
    """Whether every worker still reaches every other with ``down`` failed."""
    left = topology.without(down)
    if not all(left.attached(w) for w in workers):
        return False
    first = left.host_attachment(workers[0])[0]
    return all(left.reaches(w, first) for w in workers)


@dataclass(frozen=True)
class ChaosEvent:
    """Something the soak does at ``at`` seconds from its start: ``fail`` or
    ``recover`` ``target`` (a fault of ``kind``), or a ``member`` or ``outsider``
    misbehaviour of ``kind``, its frames drawn from ``seed``."""

    at: float
    action: str
    kind: str
    target: tuple[str, ...] = ()
    seed: int = 0

    def describe(self) -> str:
        if self.action in ("fail", "recover"):
            return f"{self.action} {self.kind} {self.target[0]} {'-'.join(self.target[1:])}"
        return f"{self.action}: {self.kind}"


@dataclass(frozen=True)
class ChaosSettings:
    """How often things happen (seconds between events, drawn uniformly)."""

    fail_every: tuple[float, float] = (2.0, 5.0)
    max_down: int = 2  # elements down at once, at most
    member_every: tuple[float, float] = (2.0, 5.0)
    outsider_every: tuple[float, float] = (1.0, 3.0)
    start: float = 2.0  # nothing before this (the loop's first calls)


def schedule(topology: Topology, workers: Sequence[str], seed: int, duration: float,
             settings: ChaosSettings = ChaosSettings(),
             member_kinds: Sequence[str] | None = None,
             outsider_kinds: Sequence[str] | None = None) -> list[ChaosEvent]:
    """The soak's events over ``duration`` seconds, in time order. Failures: every
    few seconds either an element fails (a kind drawn first, then an element of it,
    so that the many links do not crowd out the few switches) or, if
    ``max_down`` are down or at random, the one down longest comes back; never a
    failure that would cut workers off from each other. Whatever is still down at
    the end is the soak's to recover (not listed)."""
    member_kinds = MEMBER_KINDS if member_kinds is None else member_kinds
    outsider_kinds = OUTSIDER_KINDS if outsider_kinds is None else outsider_kinds
    events: list[ChaosEvent] = []
    rng = random.Random(seed)
    candidates = faults(topology, workers)
    down: list[Fault] = []
    t = settings.start
    while True:
        t += rng.uniform(*settings.fail_every)
        if t >= duration:
            break
        state = Failures()
        for f in down:
            state = state | f.failures()
        possible = [f for f in candidates if f not in down
                    and workers_connected(topology, workers, state | f.failures())]
        if down and (len(down) >= settings.max_down or not possible or rng.random() < 0.5):
            back = down.pop(0)
            events.append(ChaosEvent(round(t, 3), "recover", back.kind, back.target))
        elif possible:
            fault_kinds = sorted({f.kind for f in possible}, key=FAULT_KINDS.index)
            kind = rng.choice(fault_kinds)
            chosen = rng.choice([f for f in possible if f.kind == kind])
            down.append(chosen)
            events.append(ChaosEvent(round(t, 3), "fail", chosen.kind, chosen.target))
    for action, kinds, every, stream in (("member", member_kinds, settings.member_every, 1),
                                         ("outsider", outsider_kinds, settings.outsider_every,
                                          2)):
        r = random.Random(seed * 7919 + stream)
        t = settings.start
        while kinds:
            t += r.uniform(*every)
            if t >= duration:
                break
            events.append(ChaosEvent(round(t, 3), action, r.choice(list(kinds)),
                                     seed=r.getrandbits(32)))
    return sorted(events, key=lambda e: (e.at, e.action))
