"""Every collective through the switches against gloo and the ring on hosts, on the
same Mininet network, in one run (``inabench collectives``, ``make bench-collectives``).

Per case (Figure 1 with 4 workers, the k=4 fat-tree with 8) and regime (links
unlimited, CPU-bound; every link limited with tc htb, link-bound: ``inabench
allreduce``'s two), each collective (Broadcast, Reduce, Reduce-scatter, Allgather,
AllReduce) on an array of S float32 values three ways:

- ``INA``: through the switches (ina.host.worker.Worker; reductions through the block
  quantization in 32-bit elements, movements bit for bit);
- ``gloo``: torch.distributed's same collective on the same hosts (TCP between them
  through the switches' IPv4 forwarding), on the same float32 arrays;
- ``hosts``: the ring of hosts the fallback uses when no switch aggregates a job
  (ina.host.onhosts), the same call bodies as through the switches.

Barrier: latency only, the mean of BARRIER_REPEAT in a row. And an AllReduce of a
float16 array with 16-bit elements, with 32-bit elements, and gloo's float16 one.

Each rank is one process per worker's host for the whole case (ina.bench.collective_rank),
so torch's import and gloo's set-up are in no figure; every measurement starts all
ranks at once (ina.bench.timing.start_together) and takes the slowest rank's time.
Bytes come from the switch-side interface counters (ina.bench.timing.Traffic): the
busiest link direction, and each worker's uplink and downlink, per value of S. Every
result is checked at every rank against the exact one: bit for bit for movements,
within the reported bound for the switches' reductions (and within float rounding
for gloo's). The issue's goals (issue 17) are printed next to what was measured.
"""
from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ina.bench.collective_rank import OWNED, Command
from ina.bench.collectives_figures import CollectivesFigures
from ina.bench.collectives_plan import CollectiveRun, CollectivesCase, CollectivesRegime, commands
from ina.bench.hostprocess import HostProcess, stop_all
from ina.bench.onlab import (
    CASES,
    COLLECTIVE_SIZES,
    Bench,
    Case,
    bench_on_lab,
    describe_vat,
)
from ina.bench.timing import CpuTime, Procs, Traffic, busiest, start_together
from ina.errors import LabError

#: The store's port on rank 0's host (gloo).
MASTER_PORT = 29510
#: Seconds a rank waits without progress before its collective fails.
RANK_TIMEOUT = 120.0
#: Seconds the ranks have to be up (torch imported, gloo's group set up), and to
#: report one measurement.
UP_TIMEOUT = 300.0
MEASURE_TIMEOUT = 1800.0


# --- Measuring on a lab ----------------------------------------------------------------


class Ranks:
    """The rank processes (ina.bench.collective_rank) on the job's workers' hosts."""

    def __init__(self, bench: Bench, workdir: Path):
        self.bench = bench
        self.workers = list(bench.job.workers)
        self.procs: Procs = {}
        try:
            for w, env in bench.rank_envs(MASTER_PORT).items():
                self.procs[w] = HostProcess.on(
                    bench.lab, w, [sys.executable, "-m", "ina.bench.collective_rank",
                                   "--worker", w, "--timeout", str(RANK_TIMEOUT)],
                    workdir / f"{w}.log", env=env, ask=b"quit")
            for proc in self.procs.values():
                proc.ready(b"up", UP_TIMEOUT)
        except BaseException:
            self.close()
            raise

    def _report(self, worker: str) -> dict[str, Any]:
        proc = self.procs[worker]
        line = proc.next_line(MEASURE_TIMEOUT)
        if not line:
            what = "ended" if line == b"" else f"did not answer within {MEASURE_TIMEOUT:g}s"
            raise LabError(f"the rank on {worker} {what}: {proc.tail()}")
        report: dict[str, Any] = json.loads(line)
        return report

    def measure(self, command: Command) -> CollectiveRun:
        """``command`` at every rank at once; its figures."""
        topology = self.bench.topology
        for proc in self.procs.values():
            proc.send(asdict(command))
        traffic = Traffic(topology)
        pids: dict[str, Sequence[int]] = {
            "switches": list(self.bench.lab.switch_pids().values()),
            "ranks": [proc.proc.pid for proc in self.procs.values()]}
        counted: list[CpuTime] = []
        start_together(self.procs, on_ready=lambda: counted.append(CpuTime(pids)))
        reports = {w: self._report(w) for w in self.workers}
        link_bytes = traffic.since()
        used = counted[0].since()
        per = command.size * command.repeat
        top = busiest(link_bytes)
        edges = {w: topology.host_attachment(w)[0] for w in self.workers}
        seconds = max(r["seconds"] for r in reports.values()) / command.repeat
        errors = [f"{w}: {r['error']}" for w, r in reports.items() if r["error"]]
        return CollectiveRun(
            command.collective, command.method, command.dtype,
            command.width if command.method == "INA" and command.dtype != "float32" else None,
            seconds, 0.0 if command.collective == "barrier" else command.size / seconds,
            top, link_bytes[top] / per, sum(link_bytes.values()) / per,
            {w: link_bytes[(w, edges[w])] / per for w in self.workers},
            {w: link_bytes[(edges[w], w)] / per for w in self.workers},
            all(r["correct"] for r in reports.values()),
            max((r["max_error"] for r in reports.values() if not r["error"]), default=0.0),
            sum(r["retransmissions"] for r in reports.values()),
            sum(1 for r in reports.values()
                if r["on_hosts"] and command.method in ("INA", OWNED)),
            errors, used["switches"], used["ranks"], per)

    def close(self) -> None:
        stop_all(self.procs.values(), grace=30)


@contextmanager
def ranks_on(bench: Bench) -> Iterator[Ranks]:
    with tempfile.TemporaryDirectory() as tmp:
        ranks = Ranks(bench, Path(tmp))
        try:
            yield ranks
        finally:
            ranks.close()


def measure_on_bench(bench: Bench, case: Case, regimes: tuple[str, ...], size: int,
                     plan: list[Command] | None = None) -> CollectivesCase:
    """On a lab with the job deployed: every command of ``plan`` (default: every
    collective, ``commands(size)``) in each regime, by the same rank processes."""
    job = bench.job
    plan = plan or commands(size)
    result = CollectivesCase(case.name, bench.topology.name, list(job.workers),
                             describe_vat(job), size, job.slots)
    with ranks_on(bench) as ranks:
        for regime, rate in bench.regimes(regimes, case.rate_mbit):
            runs = [ranks.measure(c) for c in plan]
            result.regimes.append(CollectivesRegime(regime, rate, runs))
    return result


def run_case(case: Case, build_dir: Path, regimes: tuple[str, ...], size: int
             ) -> CollectivesCase:
    """Inside the sandbox: the case's lab, its job deployed, every measurement."""
    with bench_on_lab(case, build_dir) as bench:
        return measure_on_bench(bench, case, regimes, size)


def run(case_names: list[str], build_dir: Path, regimes: tuple[str, ...],
        size: int | None, rate_mbit: float | None) -> CollectivesFigures:
    """Inside the sandbox: every case, in one run."""
    import torch

    from ina.lab.mininet import bmv2_build

    cases = [run_case(CASES[name].adjusted(rate_mbit=rate_mbit), build_dir, regimes,
                      size or COLLECTIVE_SIZES[name])
             for name in case_names]
    return CollectivesFigures(cases, bmv2_build(), torch.__version__)
