"""The controller against in-memory switches: all-or-nothing deploys, exact teardown."""

import asyncio

import pytest
import yaml

from ina.control import p4names as n
from ina.control.controller import Controller
from ina.control.entities import Entity, Lpm, McastGroup, TableEntry
from ina.control.memory_switch import MemorySwitch
from ina.control.switch_state import base_plan
from ina.errors import ControllerError, DeployError, JobError
from ina.spec.topology import Queues, Topology

from inatest import FIGURE1, ModelLab, figure1_job


def _job_entries(lab: ModelLab) -> dict[str, list[TableEntry]]:
    return {sw: list(s.tables.get(n.VAT_JOBS.name, {}).values())
            for sw, s in lab.stores.items() if s.tables.get(n.VAT_JOBS.name)}


def _writes(lab: ModelLab) -> dict[str, list[tuple[str, Entity]]]:
    """What the controller wrote on each switch since the last call."""
    result = {sw: list(s.writes) for sw, s in lab.stores.items() if s.writes}
    for s in lab.stores.values():
        s.writes.clear()
    return result


def _with_switch_mac(topology: Topology, switch: str, mac: str) -> Topology:
    data = yaml.safe_load(FIGURE1.read_text())
    data["switches"][switch]["mac"] = mac
    return Topology.from_dict(data)


def test_init_twice_writes_nothing_the_second_time(model_lab: ModelLab) -> None:
    _writes(model_lab)
    again = asyncio.run(model_lab.ctl.init())
    assert {c.written for c in again.values()} == {0}
    assert _writes(model_lab) == {}


def test_init_modifies_a_changed_route_in_place(model_lab: ModelLab) -> None:
    routes = model_lab.stores["s1"].tables[n.IPV4_ROUTES.name]
    key, entry = next(iter(routes.items()))
    routes[key] = TableEntry(entry.table, entry.match, entry.action,
                             tuple((p, 63 if p == "port" else v) for p, v in entry.params))
    _writes(model_lab)
    changes = asyncio.run(model_lab.ctl.init())["s1"]
    assert (len(changes.inserted), len(changes.modified), len(changes.deleted)) == (0, 1, 0)
    assert _writes(model_lab) == {"s1": [("modify", entry)]}
    assert routes[key] == entry


def test_a_changed_switch_mac_modifies_entries_and_never_deletes_or_inserts(
        model_lab: ModelLab) -> None:
    before = {sw: {(e.table, e.match): e for e in base_plan(model_lab.topology, sw)
                   if isinstance(e, TableEntry)} for sw in model_lab.stores}
    changed = _with_switch_mac(model_lab.topology, "s5", "02:aa:00:00:00:05")
    _writes(model_lab)
    asyncio.run(Controller(changed, model_lab.stores).init())
    writes = _writes(model_lab)
    expected = {sw: {e for e in base_plan(changed, sw)
                     if isinstance(e, TableEntry) and before[sw][(e.table, e.match)] != e}
                for sw in model_lab.stores}
    assert {sw: {op for op, _ in w} for sw, w in writes.items()} == {
        sw: {"modify"} for sw, es in expected.items() if es}
    assert {sw: {e for _, e in w} for sw, w in writes.items()} == {
        sw: es for sw, es in expected.items() if es}
    assert sorted(writes) == ["s1", "s2", "s5", "s7"]  # s5 and its neighbours


def test_init_modifies_a_multicast_group_in_place(model_lab: ModelLab) -> None:
    groups = model_lab.stores["s7"].groups
    gid, group = next(iter(groups.items()))
    groups[gid] = McastGroup(gid, group.replicas[:1])
    _writes(model_lab)
    asyncio.run(model_lab.ctl.init())
    assert _writes(model_lab) == {"s7": [("modify", group)]}
    assert groups[gid] == group


def test_init_inserts_what_is_missing_and_deletes_what_is_stale(model_lab: ModelLab) -> None:
    routes = model_lab.stores["s3"].tables[n.IPV4_ROUTES.name]
    key, entry = next(iter(routes.items()))
    del routes[key]
    stale = TableEntry(entry.table, (("dst_addr", Lpm(0x0A0A0A0A, 32)),), entry.action,
                       entry.params)
    routes[stale.match] = stale
    _writes(model_lab)
    asyncio.run(model_lab.ctl.init())
    assert _writes(model_lab) == {"s3": [("insert", entry), ("delete", stale)]}


def test_init_leaves_deployed_job_entries_alone(model_lab: ModelLab) -> None:
    asyncio.run(model_lab.ctl.deploy(figure1_job(model_lab.topology)))
    jobs = _job_entries(model_lab)
    _writes(model_lab)
    changed = _with_switch_mac(model_lab.topology, "s7", "02:bb:00:00:00:07")
    asyncio.run(Controller(changed, model_lab.stores).init())
    written_tables = {e.table for w in _writes(model_lab).values() for _, e in w
                      if isinstance(e, TableEntry)}
    assert written_tables and not written_tables & {t.name for t in n.JOB_TABLES}
    assert _job_entries(model_lab) == jobs


def test_deploy_writes_one_entry_on_each_switch_of_the_job(model_lab: ModelLab) -> None:
    asyncio.run(model_lab.ctl.deploy(figure1_job(model_lab.topology)))
    assert sorted(_job_entries(model_lab)) == ["s1", "s2", "s5", "s6", "s7"]


def test_duplicate_job_id_is_refused_before_any_write(model_lab: ModelLab) -> None:
    asyncio.run(model_lab.ctl.deploy(figure1_job(model_lab.topology)))
    before = _job_entries(model_lab)
    other = figure1_job(model_lab.topology, workers=["w5", "w6"], root="s3", aggregators={})
    with pytest.raises(JobError, match="job 1 is already deployed"):
        asyncio.run(model_lab.ctl.deploy(other))
    assert _job_entries(model_lab) == before


def test_failed_write_leaves_no_half_deployed_job(model_lab: ModelLab) -> None:
    model_lab.stores["s7"].fail_insert = lambda e: True
    with pytest.raises(DeployError, match="writing failed on s7") as err:
        asyncio.run(model_lab.ctl.deploy(figure1_job(model_lab.topology)))
    assert "every entry written for it was removed again" in str(err.value)
    assert _job_entries(model_lab) == {}


def test_deploy_on_uninitialised_switches_is_refused(figure1: Topology) -> None:
    ctl = Controller(figure1, {s: MemorySwitch(s) for s in figure1.switches})
    with pytest.raises(ControllerError, match="run `inactl init` first"):
        asyncio.run(ctl.deploy(figure1_job(figure1)))


def test_teardown_removes_exactly_the_jobs_entries(model_lab: ModelLab) -> None:
    asyncio.run(model_lab.ctl.deploy(figure1_job(model_lab.topology)))
    second = figure1_job(model_lab.topology, job_id=2, workers=["w5", "w6"], root="s3",
                         aggregators={})
    asyncio.run(model_lab.ctl.deploy(second))
    removed = asyncio.run(model_lab.ctl.teardown(1))
    assert removed == ["s1", "s2", "s5", "s6", "s7"]
    remaining = {sw: [e.match_value("job_id") for e in es]
                 for sw, es in _job_entries(model_lab).items()}
    assert remaining == {"s3": [2]}


def test_teardown_of_an_unknown_job_is_an_error(model_lab: ModelLab) -> None:
    with pytest.raises(JobError, match="job 9 is not deployed"):
        asyncio.run(model_lab.ctl.teardown(9))


def test_status_lists_each_switchs_role(model_lab: ModelLab) -> None:
    asyncio.run(model_lab.ctl.deploy(figure1_job(model_lab.topology)))
    status = asyncio.run(model_lab.ctl.status())
    roles = {sw: [j.role for j in s.jobs] for sw, s in status.items()}
    assert roles == {"s1": ["aggregator"], "s2": ["transit"], "s3": [], "s4": [],
                     "s5": ["transit"], "s6": ["root"], "s7": ["aggregator"]}


def test_writing_one_switch_after_another_deploys_the_same_entries(figure1: Topology) -> None:
    plans = []
    for concurrent in (True, False):
        stores = {s: MemorySwitch(s) for s in figure1.switches}
        ctl = Controller(figure1, stores, concurrent=concurrent)
        asyncio.run(ctl.init())
        plans.append(asyncio.run(ctl.deploy(figure1_job(figure1), epoch=9)).entries)
    assert plans[0] == plans[1]


def test_init_writes_each_ports_phantom_queue_and_follows_the_queues(
        model_lab: ModelLab) -> None:
    """The topology's queues become a port_queues entry on every port of every
    switch; init with other queues modifies them in place, with none deletes them."""
    def queues_of(sw: str) -> dict[int, tuple[int, int, int]]:
        table = model_lab.stores[sw].tables.get(n.PORT_QUEUES.name, {})
        return {int(str(e.match_value("egress_port"))): (e.param("rate"), e.param("mark"),
                                                          e.param("limit"))
                for e in table.values()}

    assert all(queues_of(sw) == {} for sw in model_lab.stores)
    ports = sum(len(model_lab.topology.declared_ports(sw)) for sw in model_lab.stores)
    _writes(model_lab)
    slow = model_lab.topology.with_queues(Queues(rate=2.0, buffer=30000, mark=7500))
    asyncio.run(Controller(slow, model_lab.stores).init())
    writes = _writes(model_lab)
    assert sum(len(w) for w in writes.values()) == ports
    assert {op for w in writes.values() for op, _ in w} == {"insert"}
    assert queues_of("s5") == {1: (256, 7500, 30000), 2: (256, 7500, 30000),
                               3: (256, 7500, 30000)}
    faster = slow.with_queues(Queues(rate=4.0, buffer=30000, mark=7500))
    asyncio.run(Controller(faster, model_lab.stores).init())
    writes = _writes(model_lab)
    assert {op for w in writes.values() for op, _ in w} == {"modify"}
    assert sum(len(w) for w in writes.values()) == ports and queues_of("s1")[1][0] == 512
    asyncio.run(Controller(faster.with_queues(None), model_lab.stores).init())
    assert {op for w in _writes(model_lab).values() for op, _ in w} == {"delete"}
    assert all(queues_of(sw) == {} for sw in model_lab.stores)
