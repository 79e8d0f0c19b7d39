"""The Figure 1 AllReduce end to end: deploy a job, run its workers, check results.

On Mininet + BMv2 when the toolchain is here (inside the sandbox), otherwise on
the reference model. Both return a ``DemoResult``; ``inalab demo`` prints it and
says which data plane ran, and why.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ina.control.controller import SwitchStatus
from ina.control.report import render_status
from ina.host.arrays import random_array
from ina.model.harness import allreduce_on_model, deployed_network, reduce_arrays
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Topology

Arrays = dict[str, npt.NDArray[np.int32]]


def worker_arrays(job: Job, size: int, seed: int) -> Arrays:
    """Worker i's array is ``random_array(size, seed + i)``."""
    return {w: random_array(size, seed + i) for i, w in enumerate(job.workers)}


@dataclass
class DemoResult:
    """What one AllReduce of the demo gave, and what the switches counted."""

    job: Job
    size: int
    expected: npt.NDArray[np.int32]
    results: Arrays  # by worker; a worker that failed has none
    status: dict[str, SwitchStatus]
    data_plane: str  # where the counters were read
    failures: dict[str, str] = field(default_factory=dict)  # worker -> "(exit code): why"
    outsiders: list[str] = field(default_factory=list)  # non-workers that got packets
    elapsed: float | None = None  # seconds the workers took, on BMv2
    events: list[str] = field(default_factory=list)  # what happened during the AllReduce

    def exact(self, worker: str) -> bool:
        got = self.results.get(worker)
        return (got is not None and got.shape == self.expected.shape
                and bool((got == self.expected).all()))

    @property
    def ok(self) -> bool:
        return all(self.exact(w) for w in self.job.workers) and not self.outsiders

    def render(self) -> str:
        job = self.job
        lines = [f"  {w} failed {why}" for w, why in self.failures.items()]
        lines += ["", f"job {job.job_id}: {job.op.name.lower()} of {self.size} int32 values "
                  f"from {len(job.workers)} workers; expected head {self.expected[:4].tolist()}"]
        for w in job.workers:
            got = self.results.get(w)
            head = got[:4].tolist() if got is not None else None
            lines.append(f"  {w}: {'exact' if self.exact(w) else 'WRONG'} (head {head})")
        if self.outsiders:
            lines.append(f"  hosts outside the job received packets: {self.outsiders}")
        if self.elapsed is not None:
            lines.append(f"  workers finished in {self.elapsed:.1f}s")
        if self.events:
            lines += ["", "during the AllReduce:"] + [f"  {e}" for e in self.events]
        lines += ["", f"counters ({self.data_plane}):",
                  render_status(self.status, job.job_id)]
        return "\n".join(lines)


def run_on_model(topology: Topology, job: Job, size: int, seed: int) -> DemoResult:
    net, ctl = deployed_network(topology, job)
    arrays = worker_arrays(job, size, seed)
    sessions = allreduce_on_model(net, job, dict(arrays))
    return DemoResult(
        job, size, reduce_arrays(job.op, list(arrays.values())),
        {w: s.outcome().values for w, s in sessions.items()}, asyncio.run(ctl.status()),
        "reference model",
        outsiders=[h for h in topology.hosts if h not in job.workers and net.inbox[h]])


def run_on_bmv2(topology_path: Path, job_path: Path, size: int, seed: int,
                build_dir: Path, log_dir: Path | None,
                fail: Sequence[str] = ()) -> DemoResult:
    """Inside the sandbox: start the lab, deploy, run the workers on their hosts.
    ``fail``: ("switch", NAME) or ("link", A, B), failed once the AllReduce is
    under way (the root has multicast results) and declared to the controller,
    which repairs the job while the workers run."""
    from ina.lab.deploy import controller_call, deploy, fail_during_allreduce
    from ina.lab.mininet import Lab, LabOptions

    topology = Topology.load(topology_path)
    with Lab(topology, LabOptions(build_dir=build_dir, log_dir=log_dir)) as lab:
        lab.init_switches_sync()
        job = deploy(lab, JobSpec.load(job_path))
        arrays = worker_arrays(job, size, seed)
        out_dir = Path("/tmp/ina-demo")
        out_dir.mkdir(exist_ok=True)
        procs = {}
        started = time.monotonic()
        for i, w in enumerate(job.workers):
            procs[w] = lab.host(w).popen(
                [sys.executable, "-m", "ina.cli.inaworker", "-t", str(topology_path),
                 "--job", str(job_path), "--worker", w, "--random", str(size),
                 "--seed", str(seed + i), "--output", str(out_dir / f"{w}.npy")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
        events = fail_during_allreduce(lab, job, fail, started) if fail else []
        results, failures = {}, {}
        for w, proc in procs.items():
            _, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                failures[w] = f"({proc.returncode}): {err.decode().strip()}"
            else:
                results[w] = np.load(out_dir / f"{w}.npy")
        elapsed = time.monotonic() - started
        status = controller_call(lab, lambda ctl: ctl.status(), write=False)
    return DemoResult(job, size, reduce_arrays(job.op, list(arrays.values())), results, status,
                      "BMv2, read over P4Runtime", failures, elapsed=elapsed, events=events)
