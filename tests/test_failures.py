"""A topology with failed switches and links: routes, BIER tables and job plans on
what is left (property tests over random failures of the committed fabrics).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ina.control.vat_planner import plan_job
from ina.errors import PlanError, TopologyError, Unreachable
from ina.spec.bier import port_fbms
from ina.spec.topology import Failures, Topology

from inatest import ROOT

FABRICS = {name: Topology.load(ROOT / "topologies" / f"{name}.yaml")
           for name in ("leaf-spine-2x4", "fat-tree-4", "figure1")}


def _links(topology: Topology) -> list[frozenset[str]]:
    return sorted({frozenset((link.a.node, link.b.node)) for link in topology.links}, key=sorted)


@st.composite
def failures(draw: st.DrawFn, name: str) -> tuple[Topology, Failures]:
    topology = FABRICS[name]
    switches = draw(st.sets(st.sampled_from(sorted(topology.switches)), max_size=2))
    links = draw(st.sets(st.sampled_from(_links(topology)), max_size=3))
    return topology, Failures(frozenset(switches), frozenset(links))


def _components(topology: Topology) -> dict[str, set[str]]:
    """Every node of a degraded topology -> the nodes it can reach, by breadth-first
    search over the links that are left (independent of the routes under test)."""
    adjacent: dict[str, set[str]] = {n: set() for n in [*topology.switches, *topology.hosts]}
    for link in topology.links:
        adjacent[link.a.node].add(link.b.node)
        adjacent[link.b.node].add(link.a.node)
    reach: dict[str, set[str]] = {}
    for start in adjacent:
        seen, todo = {start}, [start]
        while todo:
            node = todo.pop()
            if node in topology.hosts and node != start:
                continue  # hosts do not forward
            for nb in adjacent[node] - seen:
                seen.add(nb)
                todo.append(nb)
        reach[start] = seen
    return reach


@given(st.sampled_from(sorted(FABRICS)).flatmap(failures))
def test_routes_reach_exactly_what_the_remaining_links_connect(case: tuple[Topology, Failures]
                                                                ) -> None:
    full, down = case
    topo = full.without(down)
    reach = _components(topo)
    for sw in topo.switches:
        for dest in [*topo.switches, *topo.hosts]:
            assert topo.reaches(sw, dest) == (dest in reach[sw]), (sw, dest)
            if dest in reach[sw] and dest != sw:
                path = topo.path(sw, dest)
                assert path[0] == sw and path[-1] == dest
                assert not set(path) & down.switches


@given(st.sampled_from(sorted(FABRICS)).flatmap(failures))
def test_fbms_are_disjoint_and_cover_every_reachable_bfer(case: tuple[Topology, Failures]
                                                          ) -> None:
    full, down = case
    topo = full.without(down)
    for sw in topo.switches:
        fbms = port_fbms(topo, sw)
        union = 0
        for fbm in fbms.values():
            assert union & fbm == 0, f"{sw}: F-BMs overlap"
            union |= fbm
        reachable = sum(h.bit for h in topo.hosts.values() if topo.reaches(sw, h.name))
        assert union == reachable, sw


@given(st.sampled_from(["leaf-spine-2x4", "fat-tree-4"]).flatmap(failures),
       st.data())
def test_replan_covers_every_worker_once_or_names_the_cut_off_ones(
        case: tuple[Topology, Failures], data: st.DataObject) -> None:
    full, down = case
    topo = full.without(down)
    workers = data.draw(st.lists(st.sampled_from(sorted(full.hosts)), min_size=2, max_size=6,
                                 unique=True))
    cut = [w for w in workers if not topo.attached(w)]
    try:
        plan = plan_job(topo, 7, workers)
    except PlanError as exc:
        if cut:
            assert all(w in str(exc) for w in cut)
        else:
            # The workers are attached but some are cut off from each other.
            assert "cannot reach" in str(exc)
            assert not any(all(topo.reaches(w, r) for w in workers) for r in topo.switches)
        return
    assert not cut
    job = plan.job
    assert job.root in topo.switches and not set(job.nodes) & down.switches
    assert job.abm == sum(full.hosts[w].bit for w in workers)
    for w in workers:  # each worker sends to one node, and is counted once on its way up
        node: str | None = job.worker_parent[w]
        seen = 0
        while node is not None:
            seen += 1
            assert job.nodes[node].abm & full.hosts[w].bit
            node = job.nodes[node].parent
        assert seen >= 1


def test_a_failed_switch_cuts_off_its_hosts() -> None:
    topo = FABRICS["leaf-spine-2x4"].without(Failures(switches=frozenset({"leaf1"})))
    assert not topo.attached("h1_1")
    with pytest.raises(Unreachable, match="leaf1"):
        topo.host_attachment("h1_1")
    with pytest.raises(PlanError, match="h1_1"):
        plan_job(topo, 7, ["h1_1", "h2_1"])


def test_a_failed_spine_moves_the_plan_to_the_other_spine() -> None:
    full = FABRICS["leaf-spine-2x4"]
    workers = ["h1_1", "h2_1", "h3_1", "h4_1"]
    before = plan_job(full, 7, workers).job
    assert before.root.startswith("spine")
    after = plan_job(full.without(Failures(switches=frozenset({before.root}))), 7, workers).job
    assert after.root.startswith("spine") and after.root != before.root


def test_without_names_what_the_topology_lacks() -> None:
    with pytest.raises(TopologyError, match=r"no switch 'nope'\n.*no link a-b"):
        FABRICS["figure1"].without(Failures(frozenset({"nope"}), frozenset({frozenset("ab")})))


def test_without_nothing_is_the_topology_again() -> None:
    full = FABRICS["fat-tree-4"]
    again = full.without(Failures())
    for sw in full.switches:
        for h in full.hosts:
            assert again.next_hop(sw, h) == full.next_hop(sw, h)
