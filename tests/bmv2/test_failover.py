"""Failures on Mininet + BMv2 (R11) and the fallback to hosts (R2): a switch's
process stopped or a link taken down while an AllReduce runs, the controller told
(as ``inactl down`` does), and every worker still gets the exact result; a job no
switch has room for runs on its hosts.

Each test leaves the lab as it found it: what it failed is recovered and repaired.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ina.control.repair import ON_HOSTS, read_jobs
from ina.host.arrays import random_array
from ina.lab.deploy import deploy, fail_during_allreduce, repair_lab
from ina.model.harness import reduce_arrays
from ina.protocol.constants import AGG_SLOTS
from ina.spec.job import Job, JobSpec

from bmv2.bmv2lab import Labs, NetLab
from inatest import ROOT

LEAF_SPINE = ROOT / "topologies" / "leaf-spine-2x4.yaml"
FAT_TREE = ROOT / "topologies" / "fat-tree-4.yaml"
#: Values per worker: an AllReduce of a few seconds, so a failure lands in it.
SIZE = 400_000
TIMEOUT = 60.0


@contextlib.contextmanager
def planned(lab: NetLab, job_id: int, workers: list[str]) -> Iterator[tuple[Path, Job]]:
    """A planned job deployed while the block runs; its file (no VAT: the workers
    need none) and the job as deployed."""
    path = lab.write_job(job_id=job_id, op="sum", workers=workers)
    job = deploy(lab.lab, JobSpec.load(path))
    try:
        yield path, job
    finally:
        lab.teardown(job_id)


@contextlib.contextmanager
def restored(lab: NetLab) -> Iterator[None]:
    """Whatever the block fails is recovered and repaired after it."""
    try:
        yield
    finally:
        for sw in sorted(lab.lab.failures.switches):
            lab.lab.recover_switch(sw)
        for pair in sorted(lab.lab.failures.links, key=sorted):
            a, b = sorted(pair)
            lab.lab.set_link(a, b, up=True)
        repair_lab(lab.lab)


def vat_now(lab: NetLab, job_id: int) -> set[str]:
    """The switches holding a VAT node of the job now."""
    entries, groups = lab.controller_call(lambda ctl: ctl.read_job_state())
    return {sw for sw, es in entries.items() for e in es
            if e.match_value("job_id") == job_id and e.action.endswith(("vat_node", "vat_root"))}


def run_with_failure(lab: NetLab, path: Path, job: Job, fail: tuple[str, ...],
                     seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    procs = lab.start_workers(path, job, SIZE, seed, timeout=TIMEOUT)
    fail_during_allreduce(lab.lab, job, fail)
    return lab.finish_workers(job, procs), expected_of(job, seed)


def expected_of(job: Job, seed: int) -> np.ndarray:
    """The reduction of the workers' arrays (worker i's is random_array(SIZE, seed + i))."""
    return reduce_arrays(job.op, [random_array(SIZE, seed + i)
                                  for i in range(len(job.workers))])


def assert_exact(job: Job, results: dict[str, np.ndarray], expected: np.ndarray) -> None:
    for w in job.workers:
        assert np.array_equal(results[w], expected), w


def test_a_spine_stopped_mid_allreduce_is_replaced_and_every_worker_is_exact(
        labs: Labs) -> None:
    lab = labs.get(LEAF_SPINE)
    with planned(lab, 1, ["h1_1", "h1_2", "h2_1", "h3_1", "h4_1"]) as (path, job), \
            planned(lab, 2, ["h2_2", "h3_2", "h4_2"]) as (other_path, other), restored(lab):
        spine = next(sw for sw in job.nodes if sw.startswith("spine"))
        other_procs = lab.start_workers(other_path, other, SIZE, seed=50, timeout=TIMEOUT)
        results, expected = run_with_failure(lab, path, job, ("switch", spine), seed=10)
        assert_exact(job, results, expected)
        assert spine not in vat_now(lab, 1) and vat_now(lab, 1)
        assert_exact(other, lab.finish_workers(other, other_procs), expected_of(other, 50))


def test_a_link_taken_down_mid_allreduce_and_brought_back_keeps_every_worker_exact(
        labs: Labs) -> None:
    lab = labs.get(LEAF_SPINE)
    with planned(lab, 1, ["h1_1", "h1_2", "h2_1", "h3_1", "h4_1"]) as (path, job):
        spine = next(sw for sw in job.nodes if sw.startswith("spine"))
        with restored(lab):
            results, expected = run_with_failure(lab, path, job, ("link", "leaf2", spine),
                                                 seed=20)
            assert_exact(job, results, expected)
        # The link is back: the next AllReduce is exact too.
        results, expected = lab.allreduce(path, job, SIZE // 10, seed=30, timeout=TIMEOUT)
        assert_exact(job, results, expected)


def test_an_aggregation_switch_of_a_fat_tree_vat_fails_and_the_result_is_exact(
        labs: Labs) -> None:
    lab = labs.get(FAT_TREE)
    workers = ["h0_0_0", "h0_1_1", "h1_0_0", "h2_1_0", "h3_1_1", "h3_0_1"]
    with planned(lab, 3, workers) as (path, job), restored(lab):
        agg = next(sw for sw in sorted(job.nodes) if sw.startswith("a") and sw != job.root)
        results, expected = run_with_failure(lab, path, job, ("switch", agg), seed=40)
        assert_exact(job, results, expected)
        assert agg not in vat_now(lab, 3)


def test_a_job_no_switch_has_room_for_runs_on_its_hosts_and_is_exact(labs: Labs) -> None:
    lab = labs.get(LEAF_SPINE)
    hogs = [JobSpec.from_dict({"job_id": 100 + i, "op": "sum", "workers": ["h1_1", "h1_2"],
                               "root": sw, "aggregators": {}, "slots": AGG_SLOTS})
            for i, sw in enumerate(sorted(lab.topology.switches))]
    try:
        for hog in hogs:
            deploy(lab.lab, hog)
        path = lab.write_job(job_id=4, op="sum", workers=["h1_1", "h2_1", "h3_2", "h4_2"])
        spec = JobSpec.load(path)
        deployment = lab.controller_call(lambda ctl: ctl.deploy(spec, fallback=True))
        assert deployment.job is None
        entries, groups = lab.controller_call(lambda ctl: ctl.read_job_state())
        assert read_jobs(lab.topology, entries, groups)[4].mode == ON_HOSTS
        job = Job(4, spec.op, spec.workers, "", {}, {}, {}, spec.slots)
        results, expected = lab.allreduce(path, job, 50_000, seed=60, timeout=TIMEOUT)
        assert_exact(job, results, expected)
    finally:
        for hog in hogs:
            with contextlib.suppress(Exception):
                lab.teardown(hog.job_id)
        with contextlib.suppress(Exception):
            lab.teardown(4)


@pytest.fixture(autouse=True)
def _healthy_lab_after(labs: Labs) -> Iterator[None]:
    """A test that failed half-way may leave a switch down: the next lab starts afresh."""
    yield
    if labs.current is not None and labs.current.lab.failures:
        labs.stop()
