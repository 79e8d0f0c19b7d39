"""One rank as a worker of an INA job: what the torch backend and the DDP hook share.

``Settings`` is what the environment says (INA_TOPOLOGY, INA_JOB, INA_WORKER,
INA_NETWORK, INA_TIMEOUT). ``Member.join`` makes a rank the worker of the job it
names: it checks the rank, the world size and the worker against the job, agrees
with every other rank through the process group's store (same job, same network,
no worker twice: any mismatch is one clear error at every rank, never a hang),
draws the secret of the ring on hosts for them (unless INA_RING_SECRET gives one),
reaches the job's network (a lab host's own UDP socket, or a link of the embedded
network, which rank 0 starts when the ranks are not on hosts of a lab), and runs
the rank's calls one after another, in the order they are submitted, on a thread
of its own (``submit``). A heartbeat in the store tells a slow peer from a dead
one: a call that waits keeps waiting while every rank is alive (up to the process
group's timeout) and fails once one has stopped.

No torch here: the store is anything with torch's Store methods used below.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from ina.errors import InaError, UsageError
from ina.host.config import WorkerConfig
from ina.host.link import LinkTransport, on_loopback
from ina.host.transport import Transport, UdpTransport, is_local_address
from ina.host.worker import Worker
from ina.model.embedded import Endpoints, SpawnedNetwork, spawn
from ina.spec.job import JobSpec
from ina.spec.topology import Topology

LOG = logging.getLogger(__name__)

ENV_TOPOLOGY = "INA_TOPOLOGY"
ENV_JOB = "INA_JOB"
ENV_WORKER = "INA_WORKER"
ENV_NETWORK = "INA_NETWORK"
ENV_TIMEOUT = "INA_TIMEOUT"
#: INA_NETWORK: ``auto`` (a lab if this machine has the worker's address, else the
#: embedded network), ``lab``, ``embedded``, or a file with an embedded network's
#: endpoints (``inanet --endpoints FILE``).
NETWORKS = ("auto", "lab", "embedded")
#: Seconds without a new result before a call asks whether every rank is alive.
DEFAULT_TIMEOUT = 5.0
#: A rank is dead once its heartbeat has not moved for this many seconds.
HEARTBEAT_GRACE = 5.0
HEARTBEAT_PERIOD = 0.5
#: How long a rank waits at init for the others to say who they are.
JOIN_TIMEOUT = timedelta(seconds=120)


class Store(Protocol):
    """The part of torch.distributed.Store a member uses."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def add(self, key: str, value: int) -> int: ...

    def wait(self, keys: list[str], timeout: timedelta) -> None: ...


@dataclass(frozen=True)
class Settings:
    """What the environment tells a rank about its job."""

    topology: Path
    job: Path
    worker: str | None = None  # None: the job's worker at the rank's index
    network: str = "auto"
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        missing = [v for v in (ENV_TOPOLOGY, ENV_JOB) if not environ.get(v)]
        if missing:
            raise UsageError(
                f"the ina backend needs {' and '.join(missing)}: set {ENV_TOPOLOGY} to a "
                f"topology file and {ENV_JOB} to a job file (e.g. {ENV_TOPOLOGY}="
                f"topologies/figure1.yaml {ENV_JOB}=jobs/figure1-sum.yaml)")
        network = environ.get(ENV_NETWORK, "auto") or "auto"
        if network not in NETWORKS and not Path(network).is_file():
            raise UsageError(f"{ENV_NETWORK}={network}: give one of {', '.join(NETWORKS)}, "
                             "or an embedded network's endpoints file (inanet --endpoints)")
        try:
            timeout = float(environ.get(ENV_TIMEOUT, DEFAULT_TIMEOUT))
        except ValueError:
            timeout = -1.0
        if not timeout > 0:
            raise UsageError(f"{ENV_TIMEOUT} must be a positive number of seconds, not "
                             f"{environ.get(ENV_TIMEOUT)!r}")
        return cls(Path(environ[ENV_TOPOLOGY]), Path(environ[ENV_JOB]),
                   environ.get(ENV_WORKER) or None, network, timeout)


def choose_worker(spec: JobSpec, topology: Topology, rank: int, size: int,
                  settings: Settings) -> tuple[str, str]:
    """(this rank's worker, the network it reaches the job through), or UsageError."""
    workers = list(spec.workers)
    where = f"job {spec.job_id} ({settings.job}) has {len(workers)} workers ({', '.join(workers)})"
    if size != len(workers):
        raise UsageError(f"the world size is {size} but {where}: start {len(workers)} ranks, "
                         "or name a job with as many workers as ranks")
    worker = settings.worker or workers[rank]
    if worker not in workers:
        raise UsageError(f"{ENV_WORKER}={worker} is not a worker of {where}")
    network = settings.network
    if network in ("auto", "lab"):
        local = [w for w in workers if is_local_address(topology.hosts[w].ip)]
        if worker in local:
            return worker, "lab"
        if local:
            raise UsageError(
                f"rank {rank} is {worker}, but this machine is {local[0]} "
                f"({topology.hosts[local[0]].ip}) of the lab: run rank "
                f"{workers.index(local[0])} here, or set {ENV_WORKER}={local[0]}")
        if network == "lab":
            raise UsageError(
                f"{ENV_NETWORK}=lab, but {worker}'s address {topology.hosts[worker].ip} is "
                f"not on this machine: run the rank on its lab host (inalab -t "
                f"{settings.topology} host {worker} -- ...), or use {ENV_NETWORK}=embedded")
        network = "embedded"
    return worker, network


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


@dataclass
class CallCounts:
    """Collectives this member ran, by name and by where they went."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, collective: str, where: str) -> None:
        by_where = self.counts.setdefault(collective, {})
        by_where[where] = by_where.get(where, 0) + 1


class Heartbeat:
    """Every rank adds to its counter in the store; a counter that stops moving is
    a rank that stopped. Read only when a call waits."""

    def __init__(self, store: Store, rank: int, size: int):
        self.store, self.rank, self.size = store, rank, size
        self.key = f"ina/alive/{rank}"
        self._stop = threading.Event()
        self._seen: dict[int, tuple[int, float]] = {}  # rank -> (counter, when it moved)
        store.add(self.key, 1)
        self._thread = threading.Thread(target=self._beat, name="ina-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_PERIOD):
            try:
                self.store.add(self.key, 1)
            except Exception as exc:  # the store's host is gone; the check will say
                LOG.debug("heartbeat stopped: %s", exc)
                return

    def stopped(self) -> list[int]:
        """The ranks whose heartbeat has not moved for HEARTBEAT_GRACE seconds, as far
        as this rank has watched them (since its first call of this)."""
        now = time.monotonic()
        dead = []
        for r in range(self.size):
            if r == self.rank:
                continue
            count = self.store.add(f"ina/alive/{r}", 0)
            last = self._seen.get(r)
            if last is None or last[0] != count:
                self._seen[r] = (count, now)
            elif now - last[1] > HEARTBEAT_GRACE:
                dead.append(r)
        return dead

    def close(self) -> None:
        """Stop, and wait for the thread: one left inside a store call while the
        process group is destroyed makes torch abort the process."""
        self._stop.set()
        self._thread.join(HEARTBEAT_PERIOD + 5.0)


class CallQueue:
    """Runs calls one after another, in the order submitted, on a thread of its own:
    every rank makes its calls in the same order, as the job's calls must be."""

    def __init__(self, name: str):
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any],
                                             Callable[[Any, BaseException | None], None]]
                                       | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], Any],
               done: Callable[[Any, BaseException | None], None]) -> None:
        """Run ``call`` after those submitted before it; then ``done(result, None)``
        or ``done(None, exception)``."""
        self._queue.put((call, done))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            call, done = item
            try:
                result = call()
            except BaseException as exc:
                done(None, exc)
            else:
                done(result, None)

    def close(self, wait: float = 60.0) -> None:
        """No more calls; wait up to ``wait`` seconds for those under way to end (a
        thread still running when the process exits aborts it in torch's C++)."""
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(wait)
            if self._thread.is_alive():
                LOG.warning("calls still under way after %gs at close", wait)


@dataclass
class Member:
    """A rank of a process group as a worker of an INA job."""

    rank: int
    size: int
    worker: Worker
    topology: Topology
    spec: JobSpec
    network: str  # "lab" or "embedded"
    heartbeat: Heartbeat
    calls: CallQueue
    deadline: float  # seconds a call may wait on while every rank is alive
    counts: CallCounts = field(default_factory=CallCounts)
    spawned: SpawnedNetwork | None = None
    transport: Transport | None = None

    @classmethod
    def join(cls, store: Store, rank: int, size: int, settings: Settings | None = None,
             timeout: timedelta = timedelta(minutes=30)) -> Member:
        """This rank as its worker of the job ``settings`` name (default: the
        environment's), once every rank agrees; UsageError (or JobError, TopologyError)
        naming the problem otherwise, at every rank."""
        try:
            settings = settings or Settings.from_env()
            topology = Topology.load(settings.topology)
            spec = JobSpec.load(settings.job)
            worker, network = choose_worker(spec, topology, rank, size, settings)
            config = WorkerConfig.from_files(settings.topology, settings.job, worker)
        except InaError as exc:
            store.set(f"ina/rank/{rank}", json.dumps({"error": str(exc)}))
            raise
        mine = {"worker": worker, "network": network,
                "job": _digest(spec.job_id, spec.workers, spec.op, spec.slots),
                "topology": _digest(sorted(topology.hosts), sorted(topology.switches))}
        store.set(f"ina/rank/{rank}", json.dumps(mine))
        _agree(store, rank, size, mine, spec, settings)
        if not config.ring_secret:
            config = dataclasses.replace(config, ring_secret=_ring_secret(store, rank))
        spawned: SpawnedNetwork | None = None
        transport: Transport
        if network == "lab":
            transport = UdpTransport(config.target)
        else:
            endpoints, spawned = _embedded(store, rank, settings)
            transport = LinkTransport(topology, worker, endpoints.of(worker), config.target)
            config = on_loopback(config)
        heartbeat = Heartbeat(store, rank, size)
        member = cls(rank, size, Worker(config, transport, timeout=settings.timeout), topology,
                     spec, network, heartbeat, CallQueue(f"ina-calls-{rank}"),
                     timeout.total_seconds(), spawned=spawned, transport=transport)
        member.worker.patience = member._patience
        atexit.register(member.close)
        LOG.info("rank %d of %d is %s of job %d (%s network)", rank, size, worker,
                 spec.job_id, network)
        return member

    @property
    def name(self) -> str:
        return self.worker.config.name

    def _patience(self, waited: float) -> str | None:
        """Keep a waiting call waiting while every rank is alive, up to the process
        group's timeout."""
        try:
            stopped = self.heartbeat.stopped()
        except Exception as exc:  # the store's host (rank 0, or torchrun's agent) is gone
            return f"the process group's store is unreachable ({exc}): rank 0 or the " \
                   "launcher stopped"
        if stopped:
            names = ", ".join(f"rank {r} ({self.spec.workers[r]})" for r in stopped)
            return f"{names} stopped (no heartbeat for {HEARTBEAT_GRACE:g}s)"
        if waited > self.deadline:
            return f"every rank is alive but none answered for {waited:.0f}s (the process " \
                   "group's timeout): is every rank making the same collectives?"
        return None

    def close(self) -> None:
        """Stop the calls' thread and the heartbeat; close the network (rank 0's
        embedded one ends with it)."""
        atexit.unregister(self.close)
        self.calls.close()
        self.heartbeat.close()
        if self.transport is not None and hasattr(self.transport, "close"):
            self.transport.close()
        if self.spawned is not None:
            self.spawned.close()


def _agree(store: Store, rank: int, size: int, mine: dict[str, str], spec: JobSpec,
           settings: Settings) -> None:
    """Every rank's record, compared with this one's; UsageError at the first
    problem (the same one at every rank)."""
    keys = [f"ina/rank/{r}" for r in range(size)]
    try:
        store.wait(keys, JOIN_TIMEOUT)
    except Exception as exc:
        raise UsageError(f"rank {rank}: not every rank joined the ina process group within "
                         f"{JOIN_TIMEOUT.total_seconds():.0f}s ({exc})") from exc
    records = [json.loads(store.get(k)) for k in keys]
    for r, rec in enumerate(records):
        if "error" in rec:
            raise UsageError(f"rank {r} could not join job {spec.job_id}: {rec['error']}")
    for what in ("job", "topology", "network"):
        values = {rec[what] for rec in records}
        if len(values) > 1:
            detail = {r: rec[what] for r, rec in enumerate(records)}
            raise UsageError(f"the ranks do not name the same {what} ({ENV_TOPOLOGY}, "
                             f"{ENV_JOB}, {ENV_NETWORK}): {detail}")
    seen: dict[str, int] = {}
    for r, rec in enumerate(records):
        if rec["worker"] in seen:
            raise UsageError(f"ranks {seen[rec['worker']]} and {r} are both {rec['worker']}: "
                             f"each rank must be another worker of job {spec.job_id} "
                             f"({ENV_WORKER})")
        seen[rec["worker"]] = r


def _ring_secret(store: Store, rank: int) -> bytes:
    """The secret the ranks' ring on hosts authenticates with (a job no switch takes
    runs there), unless INA_RING_SECRET gave one: rank 0 draws it, the others read it
    from the process group's store."""
    key = "ina/ring_secret"
    if rank == 0:
        store.set(key, secrets.token_hex(32))
    store.wait([key], JOIN_TIMEOUT)
    return bytes.fromhex(store.get(key).decode())


def _embedded(store: Store, rank: int, settings: Settings
              ) -> tuple[Endpoints, SpawnedNetwork | None]:
    """The embedded network's endpoints: from a file, or from the one rank 0 starts
    (published in the store)."""
    if settings.network not in NETWORKS:
        return Endpoints.from_json(Path(settings.network).read_text()), None
    key = "ina/embedded"
    spawned = None
    if rank == 0:
        try:
            spawned = spawn(settings.topology, [settings.job])
        except InaError as exc:
            store.set(key, json.dumps({"error": str(exc)}))
            raise
        store.set(key, spawned.endpoints.to_json())
    store.wait([key], JOIN_TIMEOUT)
    text = store.get(key).decode()
    if "error" in json.loads(text):
        raise UsageError(f"rank 0 could not start the embedded network: "
                         f"{json.loads(text)['error']}")
    return Endpoints.from_json(text), spawned
