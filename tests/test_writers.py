"""One writer at a time, on in-memory switches: controllers that write to the same
switches at once take turns (each reads what it changes only once it is the only
writer), and a failed write removes what it inserted, never what another writer
holds."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from ina.control import p4names as n
from ina.control.controller import Controller, Deployment
from ina.control.entities import Entity, McastGroup
from ina.control.switch_state import job_group_id
from ina.errors import ControllerError, DeployError, JobError, SwitchError
from ina.spec.job import Job
from ina.spec.topology import Topology

from inatest import ModelLab, figure1_job, make_model_lab


def _job_state(lab: ModelLab) -> dict[str, tuple[set[Any], set[McastGroup]]]:
    """Every switch's job entries and job groups."""
    return {sw: ({e for t in n.JOB_TABLES for e in s.tables.get(t.name, {}).values()},
                 {g for g in s.groups.values() if g.group_id >= job_group_id(0)})
            for sw, s in lab.stores.items()}


def _one_after_another(topology: Topology, *jobs: tuple[Job, int]) -> ModelLab:
    """A fresh lab with ``jobs`` (each with its epoch) deployed one after the other."""
    lab = make_model_lab(topology)
    for job, epoch in jobs:
        asyncio.run(lab.ctl.deploy(job, epoch=epoch))
    return lab


async def _at_once(lab: ModelLab, *jobs: tuple[Job, int]) -> list[Deployment | BaseException]:
    """Each job deployed by a controller of its own, all at once (as separate
    `inactl deploy` commands would)."""
    controllers = [Controller(lab.topology, lab.stores) for _ in jobs]
    return await asyncio.gather(*(ctl.deploy(job, epoch=epoch)
                                  for ctl, (job, epoch) in zip(controllers, jobs, strict=True)),
                                return_exceptions=True)


def test_two_jobs_deployed_at_once_are_both_deployed_as_one_after_the_other(
        model_lab: ModelLab) -> None:
    first, second = figure1_job(model_lab.topology), figure1_job(model_lab.topology, job_id=2)
    outcomes = asyncio.run(_at_once(model_lab, (first, 11), (second, 13)))
    assert all(isinstance(o, Deployment) for o in outcomes), outcomes
    expected = _one_after_another(model_lab.topology, (first, 11), (second, 13))
    assert _job_state(model_lab) == _job_state(expected)


def test_one_job_deployed_twice_at_once_is_deployed_once_and_the_other_refused(
        model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    outcomes = asyncio.run(_at_once(model_lab, (job, 11), (job, 11)))
    assert isinstance(outcomes[0], Deployment)
    assert isinstance(outcomes[1], JobError) and "already deployed" in str(outcomes[1])
    assert _job_state(model_lab) == _job_state(_one_after_another(model_lab.topology, (job, 11)))


def test_a_controller_that_cannot_become_the_only_writer_writes_nothing(
        model_lab: ModelLab) -> None:
    for store in model_lab.stores.values():
        store.writes.clear()  # what init wrote

    async def attempt() -> None:
        await model_lab.stores["s5"].claim("another controller", 0)
        ctl = Controller(model_lab.topology, model_lab.stores, claim_timeout=0.05)
        with pytest.raises(ControllerError,
                           match="another controller was still writing to s5 after 0.05s"):
            await ctl.deploy(figure1_job(model_lab.topology))

    asyncio.run(attempt())
    assert not any(s.writes for s in model_lab.stores.values())
    # The switches it had claimed meanwhile are free again.
    assert all(s.writer is None for sw, s in model_lab.stores.items() if sw != "s5")


def _inserting_first(lab: ModelLab, switch: str, intruder: Entity) -> None:
    """Another writer puts ``intruder`` on ``switch`` just before the controller's
    next insert there (as a controller that ignores the turns would)."""
    store = lab.stores[switch]
    insert = store.insert

    async def insert_after_it(entities: Sequence[Entity]) -> None:
        await insert([intruder])
        await insert(entities)

    store.insert = insert_after_it  # type: ignore[method-assign]


def test_a_failed_deploy_removes_what_it_inserted_and_not_an_equal_group_it_did_not(
        model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    deployed = _one_after_another(model_lab.topology, (job, 11))
    theirs = next(g for g in deployed.stores["s6"].groups.values()
                  if g.group_id >= job_group_id(0))
    _inserting_first(model_lab, "s6", theirs)
    with pytest.raises(DeployError, match="writing failed on s6"):
        asyncio.run(model_lab.ctl.deploy(job, epoch=11))
    state = _job_state(model_lab)
    assert state["s6"] == (set(), {theirs})
    assert all(state[sw] == (set(), set()) for sw in state if sw != "s6")


def test_a_write_whose_outcome_the_switch_cannot_tell_is_removed_all_the_same(
        model_lab: ModelLab) -> None:
    store = model_lab.stores["s7"]
    insert = store.insert

    async def lost_on_the_way_back(entities: Sequence[Entity]) -> None:
        await insert(entities)
        raise SwitchError("s7", "connection lost")  # written, but it cannot say so

    store.insert = lost_on_the_way_back  # type: ignore[method-assign]
    with pytest.raises(DeployError, match="every entry written for it was removed again"):
        asyncio.run(model_lab.ctl.deploy(figure1_job(model_lab.topology)))
    assert all(state == (set(), set()) for state in _job_state(model_lab).values())
