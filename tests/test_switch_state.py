"""What the controller computes for switches: base state and job allocation."""

import pytest

from ina.control import p4names as n
from ina.control.allocation import allocate, job_switches
from ina.control.entities import Lpm, McastGroup
from ina.control.switch_state import base_plan, job_plan
from ina.errors import CapacityError
from ina.protocol.constants import AGG_SLOTS, BIER_MCAST_GROUP
from ina.protocol.frames import ip_int
from ina.spec.job import DEFAULT_SLOTS
from ina.spec.topology import Topology

from inatest import figure1_job


def test_base_plan_routes_every_other_address(figure1: Topology) -> None:
    entries = base_plan(figure1, "s1")
    routes = {e.match_value("dst_addr"): e.param("port") for e in entries
              if not isinstance(e, McastGroup) and e.table == n.IPV4_ROUTES.name}
    assert len(routes) == 8 + 6  # every host, every other switch
    assert routes[Lpm(ip_int("10.0.0.1"), 32)] == 2
    assert routes[Lpm(ip_int("10.0.0.8"), 32)] == 1
    assert Lpm(ip_int("10.0.100.1"), 32) not in routes  # its own address is local


def test_base_plan_multicasts_to_every_port_with_an_fbm(figure1: Topology) -> None:
    groups = [e for e in base_plan(figure1, "s6") if isinstance(e, McastGroup)]
    one_set = ((1, 0), (2, 0), (3, 0))  # Figure 1's hosts all lie in set 0
    assert groups == [McastGroup(BIER_MCAST_GROUP, one_set)]


def test_job_touches_vat_nodes_and_the_switches_its_packets_cross(figure1: Topology) -> None:
    job = figure1_job(figure1)
    assert job_switches(job, figure1) == ["s1", "s2", "s5", "s6", "s7"]
    plan = job_plan(job, figure1, allocate(job, figure1, {}), epoch=5)
    actions = {sw: es[0].action for sw, es in plan.items()}
    assert actions == {"s1": n.VAT_NODE.name, "s2": n.TRANSIT.name, "s5": n.TRANSIT.name,
                       "s6": n.VAT_ROOT.name, "s7": n.VAT_NODE.name}
    assert plan["s1"][0].param("parent_ip") == ip_int("10.0.100.6")


def test_second_job_gets_other_slots_and_counter_blocks(figure1: Topology) -> None:
    first = figure1_job(figure1)
    existing = job_plan(first, figure1, allocate(first, figure1, {}), epoch=5)
    second = figure1_job(figure1, job_id=2)
    alloc = allocate(second, figure1, existing)
    assert alloc["s1"].job_index == 1 and alloc["s1"].slot_base == first.slots


def test_job_that_does_not_fit_is_refused_with_the_reason(figure1: Topology) -> None:
    big = figure1_job(figure1, slots=AGG_SLOTS)
    existing = job_plan(big, figure1, allocate(big, figure1, {}), epoch=5)
    with pytest.raises(CapacityError,
                       match=f"s1 has no free run of {DEFAULT_SLOTS} aggregation slots"):
        allocate(figure1_job(figure1, job_id=2), figure1, existing)
