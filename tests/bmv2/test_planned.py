"""Planned jobs on generated fabrics, on Mininet + BMv2: leaf-spine, fat-tree k=4,
and the leaf-spine with each leaf in a BIER set of its own (the root spans four
sets, each leaf aggregates in one).

The controller plans each job (no aggregators in the spec) with the capacity it
reads from the switches; the workers run with the explicit plan it returns.
"""

from __future__ import annotations

import numpy as np
import pytest

from ina.lab.deploy import deploy
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.spec.job import JobSpec

from bmv2.bmv2lab import Labs, NetLab
from inatest import ROOT

CASES = {
    "leaf-spine-2x4": ["h1_1", "h1_2", "h2_1", "h3_2", "h4_1"],
    "fat-tree-4": ["h0_0_0", "h0_1_1", "h1_0_0", "h2_1_0", "h3_1_1", "h3_0_1"],
    "leaf-spine-2x4-sets": ["h1_1", "h1_2", "h2_2", "h3_1", "h3_2", "h4_1"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_planned_job_is_exact_at_every_worker_and_silent_elsewhere(
        labs: Labs, name: str) -> None:
    lab: NetLab = labs.get(ROOT / "topologies" / f"{name}.yaml")
    workers = CASES[name]
    spec = JobSpec.from_dict({"job_id": 9, "op": "sum", "workers": workers})
    path = lab.workdir / "job9.yaml"
    job = deploy(lab.lab, spec, path)
    assert len(job.nodes) >= 2, "the planner should aggregate below the root here"
    try:
        others = [h for h in sorted(lab.topology.hosts) if h not in workers]
        listeners = {h: lab.listen(h) for h in others}
        results, expected = lab.allreduce(path, job, P * 20 + 3, seed=900)
        for w in job.workers:
            assert np.array_equal(results[w], expected), w
        assert {h: lab.stop_listening(p) for h, p in listeners.items()} == {h: 0 for h in others}
    finally:
        lab.teardown(9)
