"""The VAT planner: valid plans on every topology, capacity respected, never worse
than sending every worker to the root, and a clear error when nothing fits."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.control.allocation import Capacity
from ina.control.vat_planner import plan_job, resolve, stream_cost
from ina.errors import JobError, PlanError
from ina.spec.job import JobSpec, validate_job
from ina.spec.topology import Topology

from inatest import ROOT

TOPOLOGIES = {name: Topology.load(ROOT / "topologies" / f"{name}.yaml")
              for name in ("figure1", "leaf-spine-2x4", "leaf-spine-2x4-sets", "fat-tree-4")}


@st.composite
def _case(draw: st.DrawFn) -> tuple[Topology, list[str], set[str]]:
    topo = TOPOLOGIES[draw(st.sampled_from(sorted(TOPOLOGIES)))]
    hosts = sorted(topo.hosts)
    workers = draw(st.lists(st.sampled_from(hosts), min_size=2, max_size=len(hosts),
                            unique=True))
    full = set(draw(st.lists(st.sampled_from(sorted(topo.switches)), max_size=3)))
    return topo, workers, full


@settings(max_examples=150, deadline=None)
@given(_case())
def test_plans_are_valid_within_capacity_and_no_worse_than_naive(
        case: tuple[Topology, list[str], set[str]]) -> None:
    topo, workers, full = case
    capacity = {sw: Capacity(0, 0) for sw in full}
    try:
        plan = plan_job(topo, 7, workers, capacity=capacity)
    except PlanError:
        assert full, "a plan must exist when every switch has room"
        return
    job = plan.job
    # Valid by the job validator, as an explicit job file says it.
    again = validate_job(JobSpec.from_dict(job.to_spec()), topo)
    assert again.nodes == job.nodes
    assert not set(job.nodes) & full
    assert sorted(job.workers) == sorted(workers)
    assert plan.cost == stream_cost(job, topo) <= plan.naive_cost


def test_figure1_plan_beats_the_drafts_hand_made_vat() -> None:
    topo = TOPOLOGIES["figure1"]
    plan = plan_job(topo, 1, ["w1", "w2", "w3", "w4"])
    drawn = validate_job(JobSpec.from_dict({
        "job_id": 1, "op": "sum", "workers": ["w1", "w2", "w3", "w4"], "root": "s6",
        "aggregators": {"s1": ["w1", "w2"], "s7": ["w3", "w4"]}}), topo)
    assert plan.cost == 6 and stream_cost(drawn, topo) == 12


def test_a_given_root_is_kept() -> None:
    plan = plan_job(TOPOLOGIES["fat-tree-4"], 2, ["h0_0_0", "h1_0_0", "h2_0_0"], root="c1_1")
    assert plan.job.root == "c1_1"


def test_no_room_anywhere_is_a_clear_error() -> None:
    topo = TOPOLOGIES["leaf-spine-2x4"]
    full = {sw: Capacity(0, 0) for sw in topo.switches}
    with pytest.raises(PlanError, match="no switch has room for job 4"):
        plan_job(topo, 4, ["h1_1", "h2_1"], capacity=full)


def test_a_job_file_without_aggregators_is_planned(tmp_path: Path) -> None:
    spec = JobSpec.from_dict({"job_id": 5, "op": "max", "workers": ["w1", "w3", "w5"]})
    job = resolve(spec, TOPOLOGIES["figure1"])
    assert job.root in TOPOLOGIES["figure1"].switches and sorted(job.workers) == ["w1", "w3", "w5"]


def test_unknown_workers_are_refused_before_planning() -> None:
    spec = JobSpec.from_dict({"job_id": 5, "op": "sum", "workers": ["w1", "w99"]})
    with pytest.raises(JobError, match="'w99'"):
        resolve(spec, TOPOLOGIES["figure1"])
