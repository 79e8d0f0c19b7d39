"""``inabench collectives`` in small on Mininet + BMv2: Figure 1, links unlimited,
4,096 values, every measurement of a regime (each collective through the switches,
gloo and the ring on hosts, Barrier, float16 AllReduce in 16 and 32 bits and gloo's):
every result checked at every rank, the bytes where the collective puts them, and the
report made from the figures. Run with `make test` (``-s`` shows the report)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ina.bench.collective_rank import Command
from ina.bench.collectives import measure_on_bench
from ina.bench.collectives_figures import CollectivesFigures
from ina.bench.collectives_plan import ARRAY_COLLECTIVES
from ina.bench.onlab import CASES, Bench
from ina.spec.job import Job

from bmv2.bmv2lab import NetLab
from inatest import FIGURE1_SPEC

pytest.importorskip("torch", reason="torch is not installed: pip install 'ina[torch]' "
                                    "(make setup installs it)")

SIZE = 4096


@pytest.fixture
def figure1_job(figure1_lab: NetLab) -> Iterator[tuple[Bench, Job]]:
    path = figure1_lab.write_job(**{**FIGURE1_SPEC, "job_id": 17})
    job = figure1_lab.deploy(path)
    yield Bench(figure1_lab.lab, figure1_lab.topology, figure1_lab.topology_path, job,
                path), job
    figure1_lab.teardown(job.job_id)


def test_a_small_run_measures_every_collective_correctly_at_every_rank(
        figure1_job: tuple[Bench, Job]) -> None:
    bench, job = figure1_job
    measured = measure_on_bench(bench, CASES["figure1"], ("cpu",), SIZE)
    figures = CollectivesFigures([measured], "BMv2", "torch")
    print(figures.render())
    (regime,) = measured.regimes
    wanted = {(m, c) for c in ARRAY_COLLECTIVES for m in ("INA", "gloo", "hosts")}
    assert wanted <= {(r.method, r.collective) for r in regime.runs}
    assert [(r.label, r.collective) for r in regime.runs if not r.ok] == []
    assert {r.label for r in regime.runs if r.dtype == "float16"} == {
        "INA 16-bit", "INA 32-bit", "gloo float16"}


def test_reduce_scatter_through_the_switches_sends_each_worker_less_than_it_sends(
        figure1_job: tuple[Bench, Job]) -> None:
    bench, _ = figure1_job
    measured = measure_on_bench(bench, CASES["figure1"], ("cpu",), SIZE,
                                plan=[Command("INA", "reduce_scatter", SIZE)])
    (run,) = measured.regimes[0].runs
    assert run.ok
    for w in measured.workers:
        # S/4 of data and completions come down; S goes up.
        assert run.downlink_bytes_per_value[w] < 0.6 * run.uplink_bytes_per_value[w], w
