"""Deploy time (``inabench deploy``, ``make bench-deploy``): a job over every host of
the k=4 fat-tree deployed with all switches written at once, and one switch after
another."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from ina.bench.onlab import ROOT
from ina.control.controller import Controller
from ina.lab.mininet import Lab, LabOptions
from ina.spec.job import JobSpec
from ina.spec.topology import Topology

#: Every host of the k=4 fat-tree in one job.
DEPLOY_TOPOLOGY = ROOT / "topologies" / "fat-tree-4.yaml"
DEPLOY_JOB = ROOT / "jobs" / "fat-tree-4-all.yaml"


def run(build_dir: Path, topology_path: Path = DEPLOY_TOPOLOGY,
        job_path: Path = DEPLOY_JOB, repeat: int = 5) -> str:
    """Inside the sandbox: deploy and tear down a job ``repeat`` times with all switches
    written at once, and as many times one switch after another; report both."""
    from ina.control.p4runtime import connect

    topology = Topology.load(topology_path)
    spec = JobSpec.load(job_path)
    times: dict[bool, list[float]] = {True: [], False: []}
    with Lab(topology, LabOptions(build_dir=build_dir)) as lab:
        lab.init_switches_sync()

        async def measure() -> None:
            async with connect(topology, lab.p4info, access=lab.access) as clients:
                for _ in range(repeat):
                    for concurrent in (True, False):
                        ctl = Controller(topology, clients, concurrent=concurrent)
                        started = time.perf_counter()
                        await ctl.deploy(spec)
                        times[concurrent].append(time.perf_counter() - started)
                        await ctl.teardown(spec.job_id)

        asyncio.run(measure())
    at_once, serial = statistics.median(times[True]), statistics.median(times[False])
    switches = len(topology.switches)
    return (f"Deploying {job_path} on {topology.name} ({switches} switches), median of "
            f"{repeat}:\n  all switches at once:   {at_once * 1000:7.1f} ms\n"
            f"  one after another:      {serial * 1000:7.1f} ms\n"
            f"  speed-up: {serial / at_once:.2f}x")
