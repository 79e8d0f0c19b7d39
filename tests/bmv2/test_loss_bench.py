"""``inabench loss`` in small on Mininet + BMv2: Figure 1, every link losing 5% of its
frames each way, two rounds against no loss. Every result is checked (the benchmark
raises on an inexact one); the switches' counters account for the retransmissions'
copies. Run with `make test` (``-s`` shows the report)."""

from __future__ import annotations

from pathlib import Path

from ina.bench.loss import LossFigures, measure_on_bench
from ina.bench.onlab import Bench
from ina.spec.job import Job

from bmv2.bmv2lab import NetLab

#: Values per worker: 100 packets, enough that 5% loss per link loses some.
SIZE = 32_000


def test_under_loss_every_worker_resends_and_the_switches_count_the_copies(
        figure1_lab: NetLab, figure1_job: tuple[Path, Job]) -> None:
    path, job = figure1_job
    bench = Bench(figure1_lab.lab, figure1_lab.topology, figure1_lab.topology_path, job, path)
    lossless, lossy = measure_on_bench(bench, [0.0, 0.05], SIZE, rounds=2)
    print(LossFigures([lossless, lossy]).render())
    assert lossy.retransmissions > 0
    # Some retransmission met its own contribution at a switch, or a complete round.
    assert lossy.duplicates + lossy.resent > 0
    # Every value crosses a worker's link at least once; the busiest is a switch's port.
    assert lossless.busiest >= SIZE * 4 and lossy.busiest >= SIZE * 4
    assert lossless.busiest_at.split()[0] in figure1_lab.topology.switches
