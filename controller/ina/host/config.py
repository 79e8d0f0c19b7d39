"""What a worker knows about its job (``WorkerConfig``, from the topology and job
files), and, for a job that no switch aggregates, where the ring of its workers
listens (``ring_port``) and the secret its peers prove they hold
(``ring_secret_from_environment``; ina.host.onhosts, ina.host.baselines.Ring).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ina.errors import JobError
from ina.protocol.constants import INA_UDP_PORT, Op
from ina.spec.job import Job, JobSpec, check_names, validate_job
from ina.spec.topology import Topology

#: The ring on hosts (a job no switch aggregates): rank r of job j listens on TCP port
#: RING_PORT_BASE + RING_RANKS * (j mod RING_JOBS) + (r mod RING_RANKS), below the
#: ephemeral ports (see ring_port; WorkerConfig.ring_port overrides the base).
RING_PORT_BASE = INA_UDP_PORT + 1000
RING_RANKS = 32
RING_JOBS = 256
#: The environment variable that holds the secret a job's launcher gives its workers
#: (any string): the ring on hosts admits only peers that hold it (ina.host.baselines.Ring).
RING_SECRET_ENV = "INA_RING_SECRET"


def ring_secret_from_environment() -> bytes:
    """The job's ring secret from $INA_RING_SECRET (empty if unset)."""
    return os.environ.get(RING_SECRET_ENV, "").encode()


def ring_port(job_id: int, rank: int, base: int | None = None) -> int:
    """The TCP port on which rank ``rank`` of job ``job_id`` listens when the job is
    reduced on hosts: ``base + rank`` if a base is given, else RING_PORT_BASE +
    RING_RANKS * (job_id mod RING_JOBS) + (rank mod RING_RANKS). Ranks of one job
    share a port only RING_RANKS apart, on different hosts (one worker per host)."""
    if base is not None:
        return base + rank
    return RING_PORT_BASE + RING_RANKS * (job_id % RING_JOBS) + rank % RING_RANKS


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker must know about its job. A worker sends every packet, its
    SYNCs included, to its edge switch, which steers them (to the job's root, to
    the worker's parent VAT node) in the job's current plan: so the VAT may change
    under the worker. If no switch aggregates the job, the workers reduce among
    themselves on a ring (``addresses``, ``rank``, ``ring_port``), whose peers prove
    that they hold ``ring_secret`` (see ina.host.baselines.Ring). ``bfr_ids`` name
    the workers a chunk's data may go to alone (its ``dest``: a Reduce's root, a
    Reduce-scatter's owners)."""

    job_id: int
    op: Op
    pbm: int  # the worker's own bit
    target: str  # where its packets go: its edge switch's loopback
    window: int  # the sliding window: the job's slots (half of them outstanding at most)
    workers: int = 1  # workers in the job (float SUM needs the headroom)
    root: str = ""  # where its SYNCs go, if not to target
    name: str = "worker"  # this worker, for messages
    peers: tuple[str, ...] = ()  # every worker of the job, in the job's order
    addresses: tuple[str, ...] = ()  # their IP addresses (the ring on hosts)
    rank: int = 0  # this worker's index in peers
    ring_port: int | None = None  # the ring's port base (None: see ring_port())
    ring_secret: bytes = field(default=b"", repr=False)  # shared by the job's workers only
    bfr_ids: tuple[int, ...] = ()  # every worker's BFR-id, in the job's order (dest)
    #: Broadcast and Allgather send each chunk once from its owner (OP_COPY, by BIER
    #: from its edge switch) instead of with the others' zeros: every uplink but the
    #: owners' carries headers. Every worker of the job must say the same (the call's
    #: descriptor tells). Off by default: slower on BMv2 (docs/limits.md).
    owned: bool = False

    @property
    def sync_target(self) -> str:
        return self.root or self.target

    def ring_address(self, rank: int) -> tuple[str, int]:
        return self.addresses[rank], ring_port(self.job_id, rank, self.ring_port)

    @classmethod
    def from_files(cls, topology: str | Path, job: str | Path, worker: str,
                   ring_port: int | None = None) -> WorkerConfig:
        """The config of ``worker`` for a job file with its VAT (aggregators) or
        without (a planned job): the worker needs only the job's workers, op and
        slots, since its edge switch steers its packets."""
        topo = Topology.load(topology)
        spec = JobSpec.load(job)
        if spec.aggregators is not None:
            return cls.for_job(validate_job(spec, topo), topo, worker, ring_port)
        problems = [p for p in check_names(spec, topo) if not p.startswith("root")]
        if problems:
            raise JobError(problems, str(job))
        return cls.of(spec.job_id, spec.op, spec.workers, spec.slots, topo, worker, ring_port)

    @classmethod
    def for_job(cls, job: Job, topology: Topology, worker: str,
                ring_port: int | None = None) -> WorkerConfig:
        return cls.of(job.job_id, job.op, job.workers, job.slots, topology, worker, ring_port)

    @classmethod
    def of(cls, job_id: int, op: Op, workers: Sequence[str], slots: int, topology: Topology,
           worker: str, ring_port: int | None = None) -> WorkerConfig:
        if worker not in workers:
            raise JobError([f"{worker} is not a worker of job {job_id} ({', '.join(workers)})"])
        edge, _ = topology.host_attachment(worker)
        edge_ip = topology.address(edge)
        return cls(job_id, op, topology.hosts[worker].bit, edge_ip, slots, len(workers),
                   edge_ip, worker, tuple(workers), tuple(topology.address(w) for w in workers),
                   list(workers).index(worker), ring_port, ring_secret_from_environment(),
                   tuple(topology.hosts[w].bfr_id for w in workers))
