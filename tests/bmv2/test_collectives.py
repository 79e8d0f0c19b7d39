"""Every collective on Figure 1 over Mininet + BMv2, each worker an ``inaworker
--collective`` on its host: exact, over lossy links, with nothing at the hosts outside
the job; and the same collective through the reference model gives the same results
and the same counters on every switch, packet for packet and byte for byte (16-bit
elements included). Run with `make test`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from ina.host.arrays import random_array, random_floats
from ina.host.config import WorkerConfig
from ina.host.results import AllreduceResult
from ina.lab.deploy import deploy
from ina.model.harness import deployed_network
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import JobStat, SwitchStat
from ina.spec.job import Job, JobSpec

from bmv2.bmv2lab import Labs, NetLab
from bmv2.test_differential import _counters, _delta
from colltest import COLLECTIVES, Lockstep, body_of, check
from inatest import FIGURE1, FIGURE1_SPEC

#: inaworker's --collective for each of colltest's collective names.
CLI = {"allreduce": "allreduce", "reduce": "reduce", "reduce_scatter": "reduce-scatter",
       "broadcast": "broadcast", "allgather": "allgather", "barrier": "barrier"}
ROOT_RANK = 2
OUTSIDERS = ("w5", "w6", "w7", "w8")


def _options(collective: str, width: int | None = None, floats: bool = False) -> list[str]:
    """inaworker's options for ``collective`` (its root: ROOT_RANK)."""
    extra = ["--collective", CLI[collective]]
    if collective in ("reduce", "broadcast"):
        extra += ["--root", str(ROOT_RANK)]
    if width is not None:
        extra += ["--width", str(width)]
    return extra + (["--float"] if floats else [])


def _run(lab: NetLab, path: Path, job: Job, collective: str, size: int, seed: int,
         width: int | None = None, floats: bool = False, extra: Sequence[str] = ()
         ) -> tuple[dict[str, npt.NDArray[Any]], list[npt.NDArray[Any]]]:
    """Every worker's inaworker making ``collective`` (worker i's array: ``--random size
    --seed seed+i``): (each worker's result, the arrays they gave)."""
    n = len(job.workers)
    results = lab.finish_workers(job, lab.start_workers(
        path, job, None if collective == "barrier" else size, seed, timeout=30,
        extra=[*_options(collective, width, floats), *extra]))
    if floats:
        return results, [random_floats(size, seed + i) for i in range(n)]
    return results, [random_array(size, seed + i, width or 32) for i in range(n)]


def _outcomes(job: Job, results: dict[str, npt.NDArray[Any]]) -> list[AllreduceResult]:
    return [AllreduceResult(results[w], False, 0) for w in job.workers]


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_each_collective_is_exact_and_reaches_no_outsider(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job], collective: str) -> None:
    path, job = figure1_job
    listeners = {h: figure1_lab.listen(h) for h in OUTSIDERS}
    try:
        results, arrays = _run(figure1_lab, path, job, collective, 9 * P + 7, seed=40)
    finally:
        heard = {h: figure1_lab.stop_listening(p) for h, p in listeners.items()}
    check(collective, arrays, _outcomes(job, results), root=ROOT_RANK)
    assert heard == {h: 0 for h in OUTSIDERS}


def test_16_bit_reduce_scatter_is_exact(figure1_lab: NetLab,
                                        figure1_job: tuple[Path, Job]) -> None:
    path, job = figure1_job
    results, arrays = _run(figure1_lab, path, job, "reduce_scatter", 9 * P + 7, seed=41,
                           width=16)
    check("reduce_scatter", arrays, _outcomes(job, results), width=16)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_each_collective_is_exact_over_lossy_links(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job], collective: str) -> None:
    path, job = figure1_job
    figure1_lab.lab.impair(loss=0.05)
    retransmissions = 0
    for call in range(5 if collective == "barrier" else 1):  # a barrier is one packet
        results, arrays = _run(figure1_lab, path, job, collective, 40 * P + 3, seed=50 + call)
        check(collective, arrays, _outcomes(job, results), root=ROOT_RANK)
        retransmissions += sum(figure1_lab.reports[w]["retransmissions"] for w in job.workers)
    assert retransmissions > 0


# --- differential: BMv2 and the model ---------------------------------------------------

#: Case -> (collective, element width, float values); job ids apart from the others'.
DIFFERENTIAL: dict[str, tuple[str, int | None, bool]] = {
    "allreduce-16": ("allreduce", 16, False),
    "reduce": ("reduce", None, False),
    "reduce_scatter-float-16": ("reduce_scatter", 16, True),
    "broadcast": ("broadcast", None, False),
    "allgather": ("allgather", None, False),
    "barrier": ("barrier", None, False),
    # Each chunk once from its owner, by BIER from its edge switch (OP_COPY).
    "broadcast-owned": ("broadcast", None, False),
    "allgather-owned": ("allgather", None, False),
}
SIZE = 5 * P + 9
#: What each worker's report says of its packets, shown when the counters differ.
WORKER_COUNTS = ("elapsed", "packets", "retransmissions", "early_retransmissions", "rto",
                 "log")


def _differences(bmv2: dict[str, dict[str, int]], model: dict[str, dict[str, int]]) -> str:
    """The counters that differ, switch by switch: BMv2's, then the model's."""
    return ", ".join(f"{sw} {k}: {bmv2.get(sw, {}).get(k)} != {model.get(sw, {}).get(k)}"
                     for sw in sorted({*bmv2, *model})
                     for k in sorted({*bmv2.get(sw, {}), *model.get(sw, {})})
                     if bmv2.get(sw, {}).get(k) != model.get(sw, {}).get(k))


def _model(job: Job, lab: NetLab, collective: str, arrays: Sequence[npt.NDArray[Any]],
           width: int | None, owned: bool) -> tuple[dict[str, AllreduceResult], dict[str, Any]]:
    net, ctl = deployed_network(lab.topology, job)
    step = Lockstep(net, job)
    configs = {w: replace(WorkerConfig.for_job(job, lab.topology, w), owned=owned)
               for w in job.workers}
    bodies = {w: body_of(collective, configs[w], arrays[r], job.op, ROOT_RANK, width)
              for r, w in enumerate(job.workers)}
    outcomes = step.run(bodies)
    results = {}
    for w, o in outcomes.items():
        assert isinstance(o, AllreduceResult), (w, o)
        results[w] = o
    counters = _delta(_counters(asyncio.run(ctl.status()), job.job_id),
                      {sw: {} for sw in lab.topology.switches})
    return results, counters


@pytest.mark.parametrize("name", sorted(DIFFERENTIAL))
def test_bmv2_and_the_model_agree_on_each_collective(labs: Labs, name: str) -> None:
    collective, width, floats = DIFFERENTIAL[name]
    lab = labs.get(FIGURE1)
    spec = JobSpec.from_dict({**FIGURE1_SPEC, "job_id": 21})
    before = _counters(lab.controller_call(lambda ctl: ctl.status()), spec.job_id)
    path = lab.workdir / f"job{spec.job_id}.yaml"
    job = deploy(lab.lab, spec, path)
    # A least RTO of 10 s: no retransmission, so both see exactly the same packets.
    try:
        owned = name.endswith("-owned")
        bmv2_results, arrays = _run(lab, path, job, collective, SIZE, 2000, width, floats,
                                    ["--min-rto", "10", *(["--owned"] if owned else [])])
        bmv2 = _delta(_counters(lab.controller_call(lambda ctl: ctl.status()), spec.job_id),
                      before)
    finally:
        lab.teardown(spec.job_id)

    model_results, model = _model(job, lab, collective, arrays, width, owned)
    for w in job.workers:
        assert np.array_equal(bmv2_results[w], model_results[w].values), w
    packets = {sw: {k: p for k, (p, _) in c.items()} for sw, c in bmv2.items()}
    expected = {sw: {k: p for k, (p, _) in c.items()} for sw, c in model.items()}
    assert packets == expected, _differences(packets, expected) + "; " + "; ".join(
        f"{w}: " + ", ".join(f"{k} {lab.reports[w][k]}" for k in WORKER_COUNTS)
        for w in job.workers)  # what the workers counted
    assert any(f"job.{JobStat.ABSORBED.name}" in c for c in model.values())
    assert any(f"job.{JobStat.OWNED.name}" in c for c in model.values()) == owned
    assert any(f"switch.{SwitchStat.BIER_COPY_DELIVERED.name}" in c for c in model.values())
    assert bmv2 == model, "byte counts differ"
