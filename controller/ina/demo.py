"""The Figure 1 AllReduce end to end: deploy a job, run its workers, check results.

On Mininet + BMv2 when the toolchain is here (inside the sandbox), otherwise on
the reference model; it says which, and why.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ina.control.controller import Controller
from ina.control.report import render_status
from ina.host.arrays import random_array
from ina.model.harness import allreduce_on_model, deployed_network, reduce_arrays
from ina.spec.job import Job, JobSpec, validate_job
from ina.spec.topology import Topology

LOG = logging.getLogger(__name__)
Arrays = dict[str, npt.NDArray[np.int32]]


def worker_arrays(job: Job, size: int, seed: int) -> Arrays:
    """Worker i's array is ``random_array(size, seed + i)``."""
    return {w: random_array(size, seed + i) for i, w in enumerate(job.workers)}


def _report(job: Job, arrays: Arrays, results: dict[str, npt.NDArray[np.int32]],
            size: int) -> bool:
    expected = reduce_arrays(job.op, list(arrays.values()))
    ok = True
    print(f"\njob {job.job_id}: {job.op.name.lower()} of {size} int32 values from "
          f"{len(job.workers)} workers; expected head {expected[:4].tolist()}")
    for w in job.workers:
        got = results.get(w)
        good = got is not None and got.shape == expected.shape and bool((got == expected).all())
        ok &= good
        head = got[:4].tolist() if got is not None else None
        print(f"  {w}: {'exact' if good else 'WRONG'} (head {head})")
    return ok


def run_on_model(topology: Topology, job: Job, size: int, seed: int) -> bool:
    net, ctl = deployed_network(topology, job)
    arrays = worker_arrays(job, size, seed)
    sessions = allreduce_on_model(net, job, dict(arrays))
    others = [h for h in topology.hosts if h not in job.workers and net.inbox[h]]
    ok = _report(job, arrays, {w: s.outcome().values for w, s in sessions.items()}, size)
    if others:
        print(f"  hosts outside the job received packets: {others}")
        ok = False
    print("\ncounters (reference model):")
    print(render_status(asyncio.run(ctl.status()), job.job_id))
    return ok


def run_on_bmv2(topology_path: Path, job_path: Path, size: int, seed: int,
                build_dir: Path, log_dir: Path | None) -> bool:
    """Inside the sandbox: start the lab, deploy, run the workers on their hosts."""
    from ina.control.p4runtime import connect
    from ina.lab import Lab, LabOptions

    topology = Topology.load(topology_path)
    job = validate_job(JobSpec.load(job_path), topology)
    arrays = worker_arrays(job, size, seed)
    with Lab(topology, LabOptions(build_dir=build_dir, log_dir=log_dir)) as lab:
        lab.init_switches_sync()

        async def deploy() -> None:
            async with connect(topology, lab.p4info) as clients:
                await Controller(topology, clients).deploy(job)

        asyncio.run(deploy())
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
        results = {}
        for w, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                print(f"  {w} failed ({proc.returncode}): {err.decode().strip()}")
            else:
                results[w] = np.load(out_dir / f"{w}.npy")
        elapsed = time.monotonic() - started
        ok = _report(job, arrays, results, size)
        print(f"  workers finished in {elapsed:.1f}s")

        async def status() -> str:
            async with connect(topology, lab.p4info) as clients:
                text: str = render_status(await Controller(topology, clients).status(),
                                          job.job_id)
            return text

        print("\ncounters (BMv2, read over P4Runtime):")
        print(asyncio.run(status()))
    return ok
