"""Running a case on a lab: the networks and jobs the benchmarks share (``CASES``),
and a lab with the case's job deployed (``Bench``), whose links each regime sets
and on whose hosts the measured processes run.

Regimes: ``cpu``, links unlimited (the emulation is CPU-bound: every switch is a
BMv2 process on the machine's cores), and ``link``, every link limited with tc
(htb) to a rate low enough that BMv2 is not the bottleneck, as links are in a
real cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ina.bench.hostprocess import HostProcess
from ina.bench.timing import Procs
from ina.lab.deploy import deploy
from ina.lab.mininet import Lab, LabOptions
from ina.lab.ranks import Rank, rank_env
from ina.protocol.constants import (
    ELEMS_PER_PACKET,
    ETHERNET_BYTES,
    INA_PAYLOAD_BYTES,
    IPV4_UDP_BYTES,
)
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Topology

#: The repository's root: its topologies, jobs and examples.
ROOT = Path(__file__).resolve().parents[3]
#: An INA packet on a host link, and inside BIER between switches: bytes per value.
INA_WIRE_PER_VALUE = (ETHERNET_BYTES + IPV4_UDP_BYTES + INA_PAYLOAD_BYTES) / ELEMS_PER_PACKET
REGIMES = ("cpu", "link")


@dataclass(frozen=True)
class Case:
    """A network and a job to benchmark on it."""

    name: str
    topology: Path
    job: Path  # without aggregators: the controller plans the VAT
    size: int  # values per worker
    ps_host: str  # the parameter server's host (no worker of the job)
    #: Every link's rate in the link-bound regime: low enough that the BMv2 switches,
    #: sharing the machine's cores, are not the bottleneck of any method (INA's
    #: CPU-bound rate here is several times what its links then allow).
    rate_mbit: float

    def adjusted(self, size: int | None = None, rate_mbit: float | None = None) -> Case:
        """This case with another size or link rate (None: the case's own)."""
        return dataclasses.replace(self, size=size or self.size,
                                   rate_mbit=rate_mbit or self.rate_mbit)


CASES = {
    "figure1": Case("figure1", ROOT / "topologies" / "figure1.yaml",
                    ROOT / "jobs" / "figure1-planned.yaml", 262144, "w5", 4.0),
    # 20 switches on two cores: INA's CPU-bound rate is about what 4 Mbit/s links
    # allow, so the links must be slower to be the bottleneck.
    "fat-tree": Case("fat-tree", ROOT / "topologies" / "fat-tree-4.yaml",
                     ROOT / "jobs" / "fat-tree-4-bench.yaml", 131072, "h0_0_1", 2.0),
}


#: ``inabench collectives``' values S are a multiple of this: every case's worker
#: count (4, 8) divides it into parts of whole packets.
COLLECTIVE_SIZE_QUANTUM = 8 * ELEMS_PER_PACKET
#: Values S per collective, per case (about ``inabench allreduce``'s: 2**18 and 2**17):
#: a full run (both cases, both regimes, 23 measurements each) takes about 8 minutes
#: on a 2-core machine.
COLLECTIVE_SIZES = {"figure1": 102 * COLLECTIVE_SIZE_QUANTUM,
                    "fat-tree": 51 * COLLECTIVE_SIZE_QUANTUM}


def describe_vat(job: Job) -> str:
    below = [f"{sw} aggregates {', '.join(n.covers)}" for sw, n in sorted(job.nodes.items())
             if not n.is_root]
    return f"root {job.root}" + (f"; {'; '.join(below)}" if below else "; no node below it")


class Bench:
    """A lab with a job deployed, and what runs on its hosts."""

    def __init__(self, lab: Lab, topology: Topology, topology_path: Path, job: Job,
                 job_path: Path):
        self.lab, self.topology, self.topology_path = lab, topology, topology_path
        self.job, self.job_path = job, job_path

    def ina(self, size: int, seed: int = 0, extra: tuple[str, ...] = ()) -> tuple[Procs, Procs]:
        """An INA AllReduce of ``size`` random values at every worker (``inaworker``,
        worker i seeded ``seed + i``), waiting to be started together."""
        return {w: HostProcess.on(self.lab, w, [
            sys.executable, "-m", "ina.cli.inaworker", "-t", str(self.topology_path), "--job",
            str(self.job_path), "--worker", w, "--random", str(size), "--seed", str(seed + i),
            "--timeout", "60", "--wait-go", *extra])
            for i, w in enumerate(self.job.workers)}, {}

    def regimes(self, regimes: tuple[str, ...], rate_mbit: float
                ) -> Iterator[tuple[str, float | None]]:
        """Each regime in turn with its link rate (None: unlimited), the lab's links
        set for it while the caller measures; as they were again after each."""
        before = self.lab.topology.queues
        for regime in regimes:
            rate = rate_mbit if regime == "link" else None
            self.lab.limit_links(rate)
            try:
                yield regime, rate
            finally:
                self.lab.set_queues(before)

    def rank_envs(self, master_port: int) -> dict[str, dict[str, str]]:
        """Per worker, the environment ``inalab ranks`` gives rank r on the job's r-th
        worker (ina.lab.ranks.rank_env: the lab's job service too, for a program's
        process groups), with one OpenMP thread."""
        workers = list(self.job.workers)
        master = self.topology.hosts[workers[0]].ip
        envs = {}
        for rank, w in enumerate(workers):
            host = self.lab.host(w)
            env = rank_env(Rank(rank, w, host.pid), len(workers), self.topology,
                           self.topology_path, self.job_path, master, master_port,
                           host.defaultIntf().name, self.lab.jobs_socket)
            envs[w] = {**env, "OMP_NUM_THREADS": "1"}
        return envs


@contextlib.contextmanager
def bench_on_lab(case: Case, build_dir: Path) -> Iterator[Bench]:
    """Inside the sandbox: the case's lab with its job deployed (planned if its file
    has no VAT), for as long as the block runs."""
    topology = Topology.load(case.topology)
    spec = JobSpec.load(case.job)
    with Lab(topology, LabOptions(build_dir=build_dir)) as lab, \
            tempfile.TemporaryDirectory() as tmp:
        lab.init_switches_sync()
        job_path = Path(tmp) / f"job{spec.job_id}.yaml"
        job = deploy(lab, spec, job_path)
        yield Bench(lab, topology, case.topology, job, job_path)
