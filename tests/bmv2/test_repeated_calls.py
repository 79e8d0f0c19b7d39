"""A deployed job is a service (Mininet + BMv2): `inaworker` run again and again
on the same deployed job, a worker that makes a different call, a worker alone."""

from __future__ import annotations

import numpy as np
import pytest

from ina.protocol.constants import ELEMS_PER_PACKET as P

from bmv2.bmv2lab import Deployed, NetLab
from inatest import FIGURE1_SPEC

# Job 3, the Figure 1 job under another id, for every test here.
pytestmark = pytest.mark.parametrize("deployed", [[{**FIGURE1_SPEC, "job_id": 3}]], indirect=True)


def test_inaworker_run_again_on_a_deployed_job_is_exact_every_time(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    (path, job), = deployed
    for run in range(3):  # one inaworker process per worker and call, as per training step
        results, expected = figure1_lab.allreduce(path, job, P * 4 + run, seed=10 * run)
        for w in job.workers:
            assert np.array_equal(results[w], expected), (run, w)


def test_workers_that_make_different_calls_all_fail_saying_so(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    (path, job), = deployed
    procs = figure1_lab.start_workers(path, job, P * 2, seed=1, only=["w1", "w2", "w3"])
    procs.update(figure1_lab.start_workers(path, job, P * 3, seed=1, only=["w4"]))
    for w, proc in procs.items():
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 3, (w, err)
        assert f"do not make the same call: array length from {P * 2} to {P * 3}".encode() in err


def test_a_worker_alone_in_a_call_is_told_the_call_did_not_start(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    (path, job), = deployed
    (proc,) = figure1_lab.start_workers(path, job, P, seed=1, timeout=1, only=["w1"]).values()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert b"the call did not start: not every worker of the job (w1, w2, w3, w4)" in err, err


def test_a_call_after_an_interrupted_one_is_exact(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    (path, job), = deployed
    procs = figure1_lab.start_workers(path, job, P * 400, seed=2, timeout=2)
    procs.pop("w4").kill()  # mid-call, or before it started: either way it never finishes
    for proc in procs.values():
        proc.communicate(timeout=60)
        assert proc.returncode == 3
    results, expected = figure1_lab.allreduce(path, job, P * 8, seed=3)
    for w in job.workers:
        assert np.array_equal(results[w], expected), w
