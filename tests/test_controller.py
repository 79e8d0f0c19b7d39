"""The controller against in-memory switches: all-or-nothing deploys, exact teardown."""

import asyncio

import pytest

from ina import p4names as n
from ina.controller import Controller, ControllerError, DeployError
from ina.job import JobError
from ina.plan import TableEntry
from ina.switchapi import MemorySwitch
from ina.topology import Topology

from inatest import ModelLab, figure1_job


def _job_entries(lab: ModelLab) -> dict[str, list[TableEntry]]:
    return {sw: list(s.tables.get(n.VAT_JOBS.name, {}).values())
            for sw, s in lab.stores.items() if s.tables.get(n.VAT_JOBS.name)}


def test_init_twice_writes_nothing_the_second_time(model_lab: ModelLab) -> None:
    again = asyncio.run(model_lab.ctl.init())
    assert set(again.values()) == {(0, 0)}


def test_init_replaces_stale_base_entries(model_lab: ModelLab) -> None:
    routes = model_lab.stores["s1"].tables[n.IPV4_ROUTES.name]
    key, entry = next(iter(routes.items()))
    routes[key] = TableEntry(entry.table, entry.match, entry.action,
                             tuple((p, 63 if p == "port" else v) for p, v in entry.params))
    assert asyncio.run(model_lab.ctl.init())["s1"] == (1, 1)
    assert routes[key] == entry


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
