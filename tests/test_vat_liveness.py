"""Every VAT the controller accepts is live under loss: hand-written VATs (a VAT node
may aggregate workers attached to other switches, as the draft allows) and planned
ones, at 5% and 10% loss per link with duplication and reordering, every collective
completes at every worker with the exact result (reference model, virtual clock).

CI runs VAT_CASES jobs per topology and loss; ``INA_VAT_CASES=200 make test
PYTEST_ARGS=tests/test_vat_liveness.py`` a longer campaign."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import numpy as np
import pytest

from ina.control.vat_planner import plan_job
from ina.errors import JobError, PlanError
from ina.model.network import Impairment
from ina.protocol.constants import Op
from ina.spec.job import Job, JobSpec, validate_job
from ina.spec.topology import Topology

from colltest import COLLECTIVES, Lockstep, body_of, check
from inatest import ROOT, make_model_lab

VAT_CASES = int(os.environ.get("INA_VAT_CASES", "3"))
TOPOLOGIES = ("leaf-spine-2x4.yaml", "fat-tree-4.yaml")


def hand_written(topology: Topology, rng: np.random.Generator) -> Job | None:
    """A random VAT as an operator may write it: random workers, a random root, and
    nodes on random switches, each covering a random part of its parent's workers
    (attached anywhere); None if the controller refuses it."""
    hosts, switches = sorted(topology.hosts), sorted(topology.switches)
    workers = [str(w) for w in rng.choice(hosts, size=int(rng.integers(3, 7)), replace=False)]
    root = str(rng.choice(switches))
    aggregators: dict[str, tuple[str, ...]] = {}
    free = [s for s in switches if s != root]

    def split(covered: list[str], depth: int) -> None:
        if len(covered) < 3 or depth > 2 or not free:
            return
        for _ in range(int(rng.integers(1, 3))):
            part = [str(w) for w in rng.choice(covered, size=int(rng.integers(2, len(covered))),
                                               replace=False)]
            if any(set(part) & set(taken) for taken in aggregators.values()
                   if set(taken) <= set(covered) and taken != tuple(covered)):
                continue
            switch = free.pop(int(rng.integers(0, len(free))))
            aggregators[switch] = tuple(sorted(part))
            split(part, depth + 1)
            if not free:
                return

    split(workers, 0)
    spec = JobSpec(job_id=3, op=Op.SUM, workers=tuple(workers), root=root,
                   aggregators=aggregators, slots=4)
    try:
        return validate_job(spec, topology)
    except JobError:
        return None


def jobs(topology: Topology, seed: int, count: int) -> Iterator[Job]:
    """``count`` hand-written VATs the controller accepts, then ``count`` planned ones."""
    rng = np.random.default_rng(seed)
    made = 0
    while made < count:
        job = hand_written(topology, rng)
        if job is not None and job.nodes.keys() - {job.root}:  # a node below the root
            made += 1
            yield job
    made = 0
    hosts, switches = sorted(topology.hosts), sorted(topology.switches)
    while made < count:
        workers = sorted(str(w) for w in rng.choice(hosts, size=int(rng.integers(3, 7)),
                                                    replace=False))
        try:
            yield plan_job(topology, 3, workers, root=str(rng.choice(switches)), slots=4).job
        except PlanError:
            continue
        made += 1


@pytest.mark.parametrize("loss", [0.05, 0.10])
@pytest.mark.parametrize("name", TOPOLOGIES)
def test_every_accepted_vat_is_live_under_loss(name: str, loss: float) -> None:
    topology = Topology.load(ROOT / "topologies" / name)
    rng = np.random.default_rng(int(loss * 100))
    for i, job in enumerate(jobs(topology, int(loss * 1000), VAT_CASES)):
        collective = COLLECTIVES[i % len(COLLECTIVES)]
        lab = make_model_lab(topology)
        asyncio.run(lab.ctl.deploy(job))
        lab.net.impairment = Impairment(loss=loss, duplicate=0.02, reorder=0.05, seed=i)
        step = Lockstep(lab.net, job)
        arrays = [rng.integers(-(2**20), 2**20, 3 * 320 + 5, dtype=np.int32)
                  for _ in job.workers]
        root = i % len(job.workers)
        bodies = {w: body_of(collective, step.configs[w], arrays[r], Op.SUM, root, None)
                  for r, w in enumerate(job.workers)}
        outcomes = step.run(bodies)
        check(collective, arrays, [outcomes[w] for w in job.workers], root=root)
