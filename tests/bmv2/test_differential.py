"""Differential tests: the same AllReduce through BMv2 and through the reference
model gives the same results and the same counters, packet for packet and byte
for byte, on Figure 1, on the fat-tree k=4, and on a leaf-spine whose hosts lie
in four BIER sets."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ina.control.controller import SwitchStatus
from ina.control.switch import CounterValue
from ina.host.arrays import random_array
from ina.lab.deploy import deploy
from ina.model.harness import allreduce_on_model, deployed_network
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import JobStat, SwitchStat
from ina.spec.job import JobSpec

from bmv2.bmv2lab import Labs
from inatest import ROOT

CASES = {
    "figure1": {"job_id": 11, "op": "sum", "workers": ["w1", "w2", "w3", "w4"], "root": "s6",
                "aggregators": {"s1": ["w1", "w2"], "s7": ["w3", "w4"]}},
    "fat-tree-4": {"job_id": 12, "op": "max",
                   "workers": ["h0_0_0", "h0_0_1", "h1_1_0", "h2_0_1", "h3_1_1"]},
    "leaf-spine-2x4-sets": {"job_id": 13, "op": "sum",
                            "workers": ["h1_1", "h1_2", "h2_1", "h3_2", "h4_1", "h4_2"]},
}
SIZE = P * 7 + 5


def _counters(status: dict[str, SwitchStatus], job_id: int
              ) -> dict[str, dict[str, CounterValue]]:
    out = {}
    for sw, s in status.items():
        cells = {f"switch.{k.name}": v for k, v in s.switch_stats.items()}
        cells.update({f"job.{k.name}": v for k, v in s.job_stats.get(job_id, {}).items()})
        out[sw] = cells
    return out


def _delta(after: dict[str, dict[str, CounterValue]], before: dict[str, dict[str, CounterValue]]
           ) -> dict[str, dict[str, tuple[int, int]]]:
    return {sw: {k: (v.packets - before[sw].get(k, CounterValue()).packets,
                     v.bytes - before[sw].get(k, CounterValue()).bytes)
                 for k, v in cells.items()
                 if v.packets != before[sw].get(k, CounterValue()).packets}
            for sw, cells in after.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bmv2_and_the_model_agree(labs: Labs, name: str) -> None:
    lab = labs.get(ROOT / "topologies" / f"{name}.yaml")
    spec = JobSpec.from_dict(CASES[name])
    job_id = spec.job_id
    before = _counters(lab.controller_call(lambda ctl: ctl.status()), job_id)
    path = lab.workdir / f"job{job_id}.yaml"
    job = deploy(lab.lab, spec, path)
    try:
        # A least RTO of 10 s: no retransmission, so both see exactly the same packets.
        bmv2_results = lab.finish_workers(
            job, lab.start_workers(path, job, SIZE, seed=1000, extra=["--min-rto", "10"]))
        bmv2 = _delta(_counters(lab.controller_call(lambda ctl: ctl.status()), job_id), before)
    finally:
        lab.teardown(job_id)

    net, ctl = deployed_network(lab.topology, job)
    sessions = allreduce_on_model(
        net, job, {w: random_array(SIZE, 1000 + i) for i, w in enumerate(job.workers)})
    model = _delta(_counters(asyncio.run(ctl.status()), job_id),
                   {sw: {} for sw in lab.topology.switches})

    for w in job.workers:
        assert np.array_equal(bmv2_results[w], sessions[w].outcome().values), w
    assert {sw: {k: p for k, (p, _) in c.items()} for sw, c in bmv2.items()} == \
        {sw: {k: p for k, (p, _) in c.items()} for sw, c in model.items()}
    assert any(f"job.{JobStat.ABSORBED.name}" in c for c in model.values())
    assert any(f"switch.{SwitchStat.BIER_COPY_DELIVERED.name}" in c for c in model.values())
    assert bmv2 == model, "byte counts differ"
