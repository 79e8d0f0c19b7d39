"""Job validation: the draft's constraints, each refused with a clear message."""

from typing import Any

import pytest

from ina.errors import JobError
from ina.protocol.bitmaps import format_bitmap
from ina.protocol.constants import Op
from ina.spec.job import JobSpec, RouteConflict, validate_job
from ina.spec.topology import Topology

from inatest import figure1_job


def _problems(topology: Topology, **overrides: Any) -> list[str]:
    with pytest.raises(JobError) as err:
        figure1_job(topology, **overrides)
    return err.value.problems


def test_figure1_vat_has_the_drafts_bitmaps_and_parents(figure1: Topology) -> None:
    job = figure1_job(figure1)
    assert {sw: format_bitmap(n.abm, 8) for sw, n in job.nodes.items()} == {
        "s1": "11000000", "s7": "00110000", "s6": "11110000"}
    assert job.nodes["s1"].parent == "s6" and job.nodes["s7"].parent == "s6"
    assert job.nodes["s6"].is_root
    assert job.worker_parent == {"w1": "s1", "w2": "s1", "w3": "s7", "w4": "s7"}
    assert job.target_of("w3", figure1) == "10.0.100.7"


def test_unknown_worker_is_refused(figure1: Topology) -> None:
    assert any("'w9' is not a host" in p for p in _problems(figure1, workers=["w1", "w9"],
                                                            aggregators={}))


def test_worker_listed_twice_is_refused(figure1: Topology) -> None:
    assert any("more than once" in p
               for p in _problems(figure1, workers=["w1", "w1", "w2", "w3", "w4"]))


def test_unknown_root_is_refused(figure1: Topology) -> None:
    assert any("root 'x9' is neither a switch nor a host" in p
               for p in _problems(figure1, root="x9"))


def test_a_server_root_must_not_be_a_worker(figure1: Topology) -> None:
    assert any("root w1 is a worker too" in p for p in _problems(figure1, root="w1"))


def test_a_server_root_is_a_vat_node_above_the_switches(figure1: Topology) -> None:
    job = figure1_job(figure1, root="w5")
    assert job.nodes["w5"].is_root and job.nodes["s1"].parent == "w5"
    assert job.root_is_server(figure1)


def test_aggregator_covering_a_non_worker_is_refused(figure1: Topology) -> None:
    problems = _problems(figure1, aggregators={"s1": ["w1", "w2", "w5"], "s7": ["w3", "w4"]})
    assert any("covers ['w5'], which are not workers" in p for p in problems)


def test_overlapping_siblings_are_refused(figure1: Topology) -> None:
    problems = _problems(figure1, aggregators={"s1": ["w1", "w2"], "s7": ["w2", "w3"]})
    assert any("both cover ['w2']" in p for p in problems)


def test_child_equal_to_its_parent_is_refused(figure1: Topology) -> None:
    problems = _problems(figure1, aggregators={"s7": ["w1", "w2", "w3", "w4"]})
    assert any("cover the same workers" in p for p in problems)


def test_root_listed_as_aggregator_is_refused(figure1: Topology) -> None:
    problems = _problems(figure1, aggregators={"s6": ["w1", "w2", "w3", "w4"]})
    assert any("is the root" in p for p in problems)


def test_path_through_an_overlapping_vat_node_is_refused(figure1: Topology) -> None:
    # w3 sends to its parent s6 along w3-s2-s5-s7-s6; the root s5 covers w3
    # too and would absorb those packets, leaving s6 waiting forever.
    crossing = {"job_id": 2, "op": "sum", "workers": ["w1", "w2", "w3", "w4"], "root": "s5",
                "aggregators": {"s1": ["w1", "w2"], "s6": ["w3", "w4"]}}
    with pytest.raises(JobError, match="w3's packets to its parent s6 cross s5"):
        validate_job(JobSpec.from_dict(crossing), figure1)


def test_path_through_a_disjoint_vat_node_is_allowed(figure1: Topology) -> None:
    # Figure 1 itself: s1's partial result crosses s7, whose A-BM is disjoint.
    assert "s7" in figure1.path("s1", "s6")
    figure1_job(figure1)


def test_bad_op_slots_and_job_id_are_all_reported_at_once(figure1: Topology) -> None:
    problems = _problems(figure1, op="avg", slots=3, job_id=0)
    assert len(problems) == 3


def test_unknown_key_in_a_job_file_is_refused() -> None:
    with pytest.raises(JobError, match="unknown key 'roots'"):
        JobSpec.from_dict({"job_id": 1, "op": "sum", "workers": ["w1"], "root": "s1",
                           "roots": "s2"})


def test_a_routing_conflict_is_reported_as_data_too(figure1: Topology) -> None:
    crossing = {"job_id": 2, "op": "sum", "workers": ["w1", "w2", "w3", "w4"], "root": "s5",
                "aggregators": {"s1": ["w1", "w2"], "s6": ["w3", "w4"]}}
    with pytest.raises(JobError) as err:
        validate_job(JobSpec.from_dict(crossing), figure1)
    assert err.value.conflicts == (RouteConflict("w3", "s6", "s5"),
                                   RouteConflict("w4", "s6", "s5"))


def test_a_job_spec_built_in_code_is_checked_like_a_job_file() -> None:
    with pytest.raises(JobError, match="slots 3 is not a power of two"):
        JobSpec(1, Op.SUM, ("w1", "w2"), slots=3)


def test_a_job_files_fields_are_parsed_into_typed_values() -> None:
    spec = JobSpec.from_dict({"job_id": 1, "op": "MAX", "workers": ["w1", "w2"], "root": "s1",
                              "aggregators": None})
    assert (spec.op, spec.workers, spec.aggregators) == (Op.MAX, ("w1", "w2"), {})
