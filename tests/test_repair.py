"""Repair after failures and the fallback to hosts, on switches held in memory: what
the controller writes when a switch or link goes down and comes back."""

from __future__ import annotations

import asyncio

import pytest

from ina.control import p4names as n
from ina.control.controller import Controller
from ina.control.entities import TableEntry
from ina.control.memory_switch import MemorySwitch
from ina.control.repair import (
    ON_HOSTS,
    ON_SWITCHES,
    RepairReport,
    read_jobs,
    repair,
)
from ina.errors import PlanError
from ina.protocol.constants import AGG_SLOTS, Op
from ina.protocol.frames import ip_int
from ina.spec.job import JobSpec
from ina.spec.topology import Failures, Topology

from inatest import ROOT

LEAF_SPINE = Topology.load(ROOT / "topologies" / "leaf-spine-2x4.yaml")
#: A worker on every leaf: the planner aggregates them on a spine, their root.
SPREAD = JobSpec(1, Op.SUM, ("h1_1", "h2_1", "h3_1", "h4_1"))
#: Workers on one leaf: aggregated there, no spine involved.
LOCAL = JobSpec(2, Op.SUM, ("h4_1", "h4_2"))


class Fabric:
    """The leaf-spine fabric on memory switches, initialised, with its jobs."""

    def __init__(self, *specs: JobSpec, fallback: bool = False):
        self.stores = {s: MemorySwitch(s) for s in LEAF_SPINE.switches}
        self.down = Failures()
        ctl = Controller(LEAF_SPINE, self.stores)
        asyncio.run(ctl.init())
        for spec in specs:
            asyncio.run(ctl.deploy(spec, fallback=fallback))

    def deploy(self, spec: JobSpec) -> None:
        asyncio.run(Controller(LEAF_SPINE, self.live()).deploy(spec))

    def repair(self, failures: Failures) -> RepairReport:
        self.down = failures
        return asyncio.run(repair(LEAF_SPINE, failures, self.live()))

    def live(self) -> dict[str, MemorySwitch]:
        return {s: c for s, c in self.stores.items() if s not in self.down.switches}

    def entries(self, job_id: int, switch: str) -> list[TableEntry]:
        return [e for spec in n.JOB_TABLES for e in self.stores[switch].tables.get(
            spec.name, {}).values() if e.match_value("job_id") == job_id]

    def root(self, job_id: int) -> str:
        return next(sw for sw in self.live() for e in self.entries(job_id, sw)
                    if e.action == n.VAT_ROOT.name)

    def members(self, job_id: int) -> list[TableEntry]:
        return [e for sw in self.live() for e in self.entries(job_id, sw)
                if e.table == n.JOB_MEMBERS.name]

    def job_state(self, job_id: int) -> dict[str, list[TableEntry]]:
        return {sw: sorted(self.entries(job_id, sw), key=repr) for sw in self.stores
                if self.entries(job_id, sw)}

    def writes(self) -> int:
        return sum(len(s.writes) for s in self.stores.values())


def test_a_job_whose_root_spine_fails_is_replanned_without_it() -> None:
    fabric = Fabric(SPREAD)
    dead = fabric.root(1)
    assert dead.startswith("spine")
    report = fabric.repair(Failures(switches=frozenset({dead})))
    assert [j.action for j in report.jobs] == ["re-planned"]
    assert dead not in report.jobs[0].switches and fabric.root(1) != dead


def test_a_replan_moves_to_the_next_generation_and_a_new_epoch() -> None:
    fabric = Fabric(SPREAD)
    epoch = next(e.param("epoch") for e in fabric.entries(1, fabric.root(1))
                 if e.table == n.VAT_JOBS.name)
    fabric.repair(Failures(switches=frozenset({fabric.root(1)})))
    assert {e.param("gen") for e in fabric.members(1)} == {1}
    root_entry = next(e for e in fabric.entries(1, fabric.root(1)) if e.table == n.VAT_JOBS.name)
    assert root_entry.param("gen") == 1 and root_entry.param("epoch") != epoch


def test_a_replan_steers_every_worker_to_its_new_parent_and_root() -> None:
    fabric = Fabric(SPREAD)
    fabric.repair(Failures(switches=frozenset({fabric.root(1)})))
    root_ip = ip_int(LEAF_SPINE.switches[fabric.root(1)].loopback)
    members = fabric.members(1)
    assert len(members) == len(SPREAD.workers)
    assert {e.param("root_ip") for e in members} == {root_ip}
    parents = {e.param("parent_ip") for e in members}
    live = {ip_int(LEAF_SPINE.switches[s].loopback) for s in fabric.live()
            if fabric.entries(1, s)}
    assert parents <= live


def test_a_failure_leaves_a_job_that_does_not_use_the_element_untouched() -> None:
    fabric = Fabric(SPREAD, LOCAL)
    before = fabric.job_state(2)
    report = fabric.repair(Failures(switches=frozenset({fabric.root(1)})))
    assert {j.job_id: j.action for j in report.jobs}[2] == "kept"
    assert fabric.job_state(2) == before


def test_a_failed_link_off_the_vat_keeps_the_vat_and_its_generation() -> None:
    fabric = Fabric(SPREAD)
    root = fabric.root(1)
    other = "spine2" if root == "spine1" else "spine1"
    report = fabric.repair(Failures(links=frozenset({frozenset({"leaf4", other})})))
    assert report.jobs[0].action in ("kept", "rerouted")
    assert fabric.root(1) == root and {e.param("gen") for e in fabric.members(1)} == {0}


def test_a_failed_link_on_a_workers_path_reroutes_the_job_through_the_other_spine() -> None:
    fabric = Fabric(SPREAD)
    root = fabric.root(1)
    other = "spine2" if root == "spine1" else "spine1"
    assert not fabric.entries(1, other)
    report = fabric.repair(Failures(links=frozenset({frozenset({"leaf1", root})})))
    assert report.jobs[0].action == "rerouted"
    assert fabric.root(1) == root and {e.param("gen") for e in fabric.members(1)} == {0}
    assert [e.action for e in fabric.entries(1, other)] == [n.TRANSIT.name]


def test_repairing_twice_writes_nothing_the_second_time() -> None:
    fabric = Fabric(SPREAD, LOCAL)
    down = Failures(switches=frozenset({fabric.root(1)}))
    fabric.repair(down)
    writes = fabric.writes()
    report = fabric.repair(down)
    assert [j.action for j in report.jobs] == ["kept", "kept"]
    assert fabric.writes() == writes


def test_a_restored_switch_gets_routes_back_and_the_job_stays_where_it_is() -> None:
    fabric = Fabric(SPREAD)
    dead = fabric.root(1)
    fabric.repair(Failures(switches=frozenset({dead})))
    moved = fabric.root(1)
    fabric.stores[dead] = MemorySwitch(dead)  # it restarts empty
    report = fabric.repair(Failures())
    assert fabric.stores[dead].tables.get(n.IPV4_ROUTES.name)
    assert report.jobs[0].action in ("kept", "rerouted") and fabric.root(1) == moved


def test_a_job_with_a_cut_off_worker_is_reported_stalled_and_left_alone() -> None:
    fabric = Fabric(SPREAD)
    before = fabric.job_state(1)
    report = fabric.repair(Failures(links=frozenset({frozenset({"leaf3", "h3_1"})})))
    assert report.jobs[0].action == "stalled" and "h3_1" in report.jobs[0].detail
    assert fabric.job_state(1) == before


def _hog_every_slot(fabric: Fabric) -> None:
    """A job that takes every aggregation slot of every switch: none is left."""
    for i, sw in enumerate(sorted(LEAF_SPINE.switches)):
        hog = JobSpec(100 + i, Op.SUM, ("h1_1", "h1_2"), sw, {}, AGG_SLOTS)
        # A root-only VAT on each switch (workers reach every switch).
        asyncio.run(Controller(LEAF_SPINE, fabric.stores).deploy(hog))


def test_deploy_without_capacity_falls_back_to_the_hosts() -> None:
    fabric = Fabric()
    _hog_every_slot(fabric)
    deployment = asyncio.run(Controller(LEAF_SPINE, fabric.stores).deploy(SPREAD, fallback=True))
    assert deployment.job is None and "room" in deployment.fallback
    assert {e.action for e in fabric.members(1)} == {n.MEMBER_ON_HOSTS.name}
    assert all(e.table == n.JOB_MEMBERS.name for sw in fabric.stores
               for e in fabric.entries(1, sw))


def test_deploy_without_capacity_and_without_fallback_is_refused() -> None:
    fabric = Fabric()
    _hog_every_slot(fabric)
    with pytest.raises(PlanError, match="room"):
        asyncio.run(Controller(LEAF_SPINE, fabric.stores).deploy(SPREAD))


def test_a_replan_without_capacity_falls_back_to_the_hosts_in_a_new_generation() -> None:
    fabric = Fabric()
    half = AGG_SLOTS // 2
    for i, sw in enumerate(sorted(LEAF_SPINE.switches)):
        fabric.deploy(JobSpec(100 + i, Op.SUM, ("h1_1", "h1_2"), sw, {}, half))
    fabric.deploy(SPREAD)
    dead = fabric.root(1)
    for i, sw in enumerate(sorted(set(LEAF_SPINE.switches) - {dead})):
        fabric.deploy(JobSpec(200 + i, Op.SUM, ("h1_1", "h1_2"), sw, {}, half))
    report = fabric.repair(Failures(switches=frozenset({dead})))
    assert {j.job_id: j.action for j in report.jobs}[1] == "on hosts"
    assert {(e.action, e.param("gen"), e.param("slots")) for e in fabric.members(1)} == {
        (n.MEMBER_ON_HOSTS.name, 1, SPREAD.slots)}


def test_a_job_on_hosts_moves_back_to_switches_when_a_plan_fits() -> None:
    fabric = Fabric()
    _hog_every_slot(fabric)
    asyncio.run(Controller(LEAF_SPINE, fabric.stores).deploy(SPREAD, fallback=True))
    for i in range(len(LEAF_SPINE.switches)):
        asyncio.run(Controller(LEAF_SPINE, fabric.stores).teardown(100 + i))
    report = fabric.repair(Failures())
    assert {j.job_id: j.action for j in report.jobs}[1] == "back on switches"
    assert {e.action for e in fabric.members(1)} == {n.MEMBER.name}
    assert {e.param("gen") for e in fabric.members(1)} == {1}


def test_the_switches_record_where_each_job_runs() -> None:
    fabric = Fabric()
    _hog_every_slot(fabric)
    asyncio.run(Controller(LEAF_SPINE, fabric.stores).deploy(SPREAD, fallback=True))
    entries, groups = asyncio.run(Controller(LEAF_SPINE, fabric.stores).read_job_state())
    records = read_jobs(LEAF_SPINE, entries, groups)
    assert records[1].mode == ON_HOSTS and records[1].workers == set(SPREAD.workers)
    assert records[100].mode == ON_SWITCHES and records[100].slots == AGG_SLOTS

