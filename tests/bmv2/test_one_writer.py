"""One writer at a time on Mininet + BMv2 (Figure 1): `inactl deploy` commands
started at once, and a deploy beside the watcher's repair, end with every job
deployed right (an exact AllReduce each) or one refused clearly, nothing of the
other's removed; a deploy while another controller holds the switches fails
clearly, writing nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ina.control.access import Access
from ina.control.localstate import FileLock
from ina.control.p4runtime import connect
from ina.control.repair import RepairReport, repair_switches
from ina.control.vat_planner import resolve
from ina.control.watch import WatchOptions
from ina.errors import ControllerError
from ina.lab.labstate import LabRecord
from ina.lab.watching import WatcherThread
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Failures

from bmv2.bmv2lab import NetLab
from inatest import FIGURE1, FIGURE1_SPEC

#: Figure 1's job (w1..w4, VAT s1, s7, s6) and a planned one on the other side's
#: hosts: both need s6, so two deploys at once would pick the same job index there.
LEFT = FIGURE1_SPEC
RIGHT = {"job_id": 2, "op": "sum", "workers": ["w5", "w6", "w7", "w8"], "root": "s6"}
SIZE = 3000


@pytest.fixture
def lab(figure1_lab: NetLab) -> Iterator[NetLab]:
    """The Figure 1 lab; whatever a test deployed is torn down after it."""
    yield figure1_lab
    jobs = figure1_lab.controller_call(lambda ctl: ctl.jobs(), write=False)
    for job_id in jobs:
        figure1_lab.teardown(job_id)


def _inactl(lab: NetLab, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ina.cli.inactl", "-t", str(FIGURE1), "--p4info",
         str(lab.lab.p4info), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def _finish(*procs: subprocess.Popen[str]) -> list[tuple[int, str]]:
    """Each command's exit code and what it said."""
    return [(p.returncode, out + err) for p in procs for out, err in [p.communicate(timeout=120)]]


def _exact(lab: NetLab, path: Path, job: Job, seed: int) -> bool:
    results, expected = lab.allreduce(path, job, SIZE, seed)
    return all(np.array_equal(results[w], expected) for w in job.workers)


def _job(lab: NetLab, spec: dict[str, object]) -> tuple[Path, Job]:
    """The job's file, and the job (planned on the idle fabric if it has no VAT: only
    its workers and op matter to its AllReduce, which the switches steer)."""
    path = lab.write_job(**spec)
    return path, resolve(JobSpec.load(path), lab.topology)


def test_two_deploys_started_at_once_both_deploy_their_jobs(lab: NetLab) -> None:
    (left_path, left), (right_path, right) = _job(lab, LEFT), _job(lab, RIGHT)
    outcomes = _finish(_inactl(lab, "deploy", "--job", str(left_path)),
                       _inactl(lab, "deploy", "--job", str(right_path)))
    assert [code for code, _ in outcomes] == [0, 0], outcomes
    assert _exact(lab, left_path, left, seed=10) and _exact(lab, right_path, right, seed=20)


def test_one_job_deployed_twice_at_once_is_deployed_once_and_the_other_refused(
        lab: NetLab) -> None:
    path, job = _job(lab, LEFT)
    outcomes = sorted(_finish(_inactl(lab, "deploy", "--job", str(path)),
                              _inactl(lab, "deploy", "--job", str(path))))
    assert [code for code, _ in outcomes] == [0, 2], outcomes
    assert "job 1 is already deployed" in outcomes[1][1]
    assert _exact(lab, path, job, seed=30)


def test_a_deploy_while_another_controller_holds_the_switches_fails_clearly(
        lab: NetLab) -> None:
    """Another controller (one that does not share this machine's lock: a primary
    client of every switch) keeps its connections open: the deploy waits its timeout
    for the role, then gives up, writing nothing."""
    path, _ = _job(lab, LEFT)
    tls = lab.lab.access.tls

    async def beside_another_controller() -> tuple[int, str]:
        async with connect(lab.topology, lab.lab.p4info, access=Access(tls)):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "ina.cli.inactl", "-t", str(FIGURE1), "--p4info",
                str(lab.lab.p4info), "--timeout", "2", "deploy", "--job", str(path),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await proc.communicate()
            assert proc.returncode is not None
            return proc.returncode, (out + err).decode()

    code, said = asyncio.run(beside_another_controller())
    assert code == ControllerError.exit_code, said
    assert "not writing: another controller was still writing to s1 after 2s" in said
    assert "another P4Runtime client is its primary (election id 10" in said
    assert lab.controller_call(lambda ctl: ctl.jobs(), write=False) == {}


def test_a_deploy_beside_the_watchers_repair_leaves_both_jobs_right(lab: NetLab) -> None:
    (left_path, left), (right_path, right) = _job(lab, LEFT), _job(lab, RIGHT)
    lab.deploy(left_path)
    repaired: list[RepairReport] = []
    down = Failures().with_link("s5", "s7")

    async def repair(failures: Failures) -> None:  # what inactl watch does on a change
        repaired.append(await repair_switches(lab.topology, failures, lab.lab.p4info,
                                              lab.lab.p4blob, lab.lab.access))

    watcher = WatcherThread(lab.lab, WatchOptions(), repair)
    lock = FileLock(LabRecord(lab.topology.name).lock_file, "the test, holding both back")
    try:
        watcher.settled()
        lock.acquire(10)
        lab.lab.set_link("s5", "s7", up=False)  # on the left job's paths: it is re-planned
        deploying = _inactl(lab, "deploy", "--job", str(right_path))
        watcher.wait_for(lambda: watcher.failures == down, 5, "the link to be reported down")
        lock.release()  # the repair and the deploy, both waiting, go one after the other
        watcher.wait_for(lambda: bool(repaired), 60, "the repair")
        assert _finish(deploying)[0][0] == 0
        assert [j.action for j in repaired[0].jobs if j.job_id == 1] == ["re-planned"]
        assert _exact(lab, left_path, left, seed=40) and _exact(lab, right_path, right, seed=50)
    finally:
        lock.release()
        lab.lab.set_link("s5", "s7", up=True)
        try:
            watcher.wait_for(lambda: not watcher.failures and len(repaired) > 1, 60,
                             "the link to come back, repaired")
        finally:
            watcher.stop()

