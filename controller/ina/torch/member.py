"""A rank as a worker of INA jobs: one per process group it belongs to. What the torch
backend and the DDP hook share.

``Settings`` is what the environment says (INA_TOPOLOGY, INA_JOB, INA_WORKER,
INA_NETWORK, INA_JOB_SERVICE, INA_TIMEOUT, INA_HALF_WIDTH).

``Node`` is the process: made once, when the default group is made. It finds this
rank's host (INA_WORKER; the job's r-th worker with INA_JOB; else the lab host whose
address this machine has, or on the embedded network the topology's r-th host),
agrees with every other rank through the store (same topology, job, network and
half width, no host twice: any mismatch is one clear error at every rank, never a
hang), learns every rank's host, reaches the network (a lab host's UDP socket, or a
link of the embedded network, which rank 0 starts when the ranks are not on hosts
of a lab), shares that one transport among every job of the process
(ina.host.transport.SharedTransport: by job id), and holds a connection to every
other rank that tells a slow peer from a dead one (ina.host.liveness: the kernel
closes it with the process, whatever the process's Python is doing).

``Member`` is the rank in one process group: a worker of the group's job. Each
group is a job of its own, its workers the hosts of the group's ranks in group rank
order: the default group's is the job INA_JOB names (deployed by someone else: the
embedded network at its start, or ``inactl deploy`` on a lab), or, without INA_JOB,
one the network deploys, like every other group's. The group's rank 0 asks the
network's job service (ina.host.jobclient) for it and tells the others through the
group's store; where no switch can take the group (no room, no VAT, no service),
the grant says so and the group's every call runs on a ring of its hosts
(ina.host.onhosts), which ``where`` says ("hosts") and ``stats`` counts. The job
goes when the group is destroyed (``close``, by the rank that asked for it, once
every other member has closed or stopped), when the program ends (atexit), and when
that rank dies: its connection to the service closes with it, and the service
tears down what it was granted. A member runs its calls one after another, in the
order they are submitted, on a thread of its own (``calls``), and a call that waits
keeps waiting while every member is alive (up to the process group's timeout) and
fails once one has stopped.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, Protocol

from ina.errors import InaError, LabError, UsageError
from ina.host.config import WorkerConfig
from ina.host.jobclient import JobClient
from ina.host.link import LinkTransport, on_loopback
from ina.host.liveness import Liveness
from ina.host.sync import SyncReply
from ina.host.transport import JobView, SharedTransport, UdpTransport, is_local_address
from ina.host.worker import Worker
from ina.model.embedded import Endpoints, SpawnedNetwork, spawn
from ina.protocol.constants import Op
from ina.spec.job import DEFAULT_SLOTS, JobSpec
from ina.spec.jobservice import FIRST_JOB_ID, JOB_SERVICE_ENV, Grant
from ina.spec.topology import Topology

LOG = logging.getLogger(__name__)

ENV_TOPOLOGY = "INA_TOPOLOGY"
ENV_JOB = "INA_JOB"
ENV_WORKER = "INA_WORKER"
ENV_NETWORK = "INA_NETWORK"
ENV_TIMEOUT = "INA_TIMEOUT"
ENV_JOB_SERVICE = JOB_SERVICE_ENV
#: The elements' width float16 and bfloat16 tensors' SUMs are reduced in: 32 (the
#: default: the float32 path, no coarser than gloo's own float16 sum) or 16 (twice
#: the values per packet, one exponent per 640 values: small values beside a large
#: one lose their bits; docs/limits.md).
ENV_HALF_WIDTH = "INA_HALF_WIDTH"
HALF_WIDTHS = (16, 32)
#: INA_NETWORK: ``auto`` (a lab if this machine has the worker's address, else the
#: embedded network), ``lab``, ``embedded``, or a file with an embedded network's
#: endpoints (``inanet --endpoints FILE``).
NETWORKS = ("auto", "lab", "embedded")
#: Seconds without a new result before a call asks whether every rank is alive.
DEFAULT_TIMEOUT = 5.0
#: How long a rank waits at init for the others to say who they are.
JOIN_TIMEOUT = timedelta(seconds=120)
#: How long the rank that asked for a group's job waits, when the group ends, for the
#: other members to end it too before the job goes (a member still finishing its last
#: call may need the job's cells for a retransmission).
CLOSE_WAIT = 30.0
WHERE_SWITCHES, WHERE_HOSTS = "switches", "hosts"
#: Where a rank on the embedded network listens for its peers' liveness connections.
LOOPBACK = "127.0.0.1"


class Store(Protocol):
    """The part of torch.distributed.Store a member uses."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def add(self, key: str, value: int) -> int: ...

    def wait(self, keys: list[str], timeout: timedelta) -> None: ...


@dataclass(frozen=True)
class Settings:
    """What the environment tells a rank about its jobs."""

    topology: Path
    job: Path | None = None  # None: the default group's job is planned, like any group's
    worker: str | None = None  # None: the job's worker at the rank's index, or found
    network: str = "auto"
    timeout: float = DEFAULT_TIMEOUT
    half_width: int = 32
    job_service: str | None = None  # a lab's job service socket (INA_JOB_SERVICE)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        if not environ.get(ENV_TOPOLOGY):
            raise UsageError(
                f"the ina backend needs {ENV_TOPOLOGY}: set it to a topology file (e.g. "
                f"{ENV_TOPOLOGY}=topologies/figure1.yaml), and {ENV_JOB} to a job file if "
                "the default group's job is given (without it, the network deploys one)")
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
        half = environ.get(ENV_HALF_WIDTH) or "32"
        if half not in {str(w) for w in HALF_WIDTHS}:
            raise UsageError(f"{ENV_HALF_WIDTH} must be 16 or 32 (the elements' width for "
                             f"float16 and bfloat16 tensors), not {half!r}")
        job = environ.get(ENV_JOB)
        return cls(Path(environ[ENV_TOPOLOGY]), Path(job) if job else None,
                   environ.get(ENV_WORKER) or None, network, timeout, int(half),
                   environ.get(ENV_JOB_SERVICE) or None)


def choose_worker(spec: JobSpec | None, topology: Topology, rank: int, size: int,
                  settings: Settings) -> tuple[str, str]:
    """(this rank's host, the network it reaches its jobs through), or UsageError.

    With a job (INA_JOB), the rank is its worker at the rank's index (or INA_WORKER),
    and the world size must be its number of workers. Without one, INA_WORKER, or
    the lab host whose address this machine has, or on the embedded network the
    topology's hosts in BFR-id order, rank r the r-th."""
    hosts = sorted(topology.hosts, key=lambda h: topology.hosts[h].bfr_id)
    if spec is not None:
        candidates = list(spec.workers)
        where = (f"job {spec.job_id} ({settings.job}) has {len(candidates)} workers "
                 f"({', '.join(candidates)})")
        if size != len(candidates):
            raise UsageError(f"the world size is {size} but {where}: start {len(candidates)} "
                             "ranks, or name a job with as many workers as ranks")
        worker = settings.worker or candidates[rank]
        if worker not in candidates:
            raise UsageError(f"{ENV_WORKER}={worker} is not a worker of {where}")
    else:
        candidates = hosts
        where = f"topology {topology.name} has {len(hosts)} hosts"
        if size > len(hosts):
            raise UsageError(f"the world size is {size} but {where}: one rank per host")
        if settings.worker is not None and settings.worker not in topology.hosts:
            raise UsageError(f"{ENV_WORKER}={settings.worker} is not a host of topology "
                             f"{topology.name} ({', '.join(hosts)})")
        worker = settings.worker or ""
    network = settings.network
    if network in ("auto", "lab"):
        local = [w for w in candidates if is_local_address(topology.hosts[w].ip)]
        if worker in local or (not worker and len(local) == 1):
            return worker or local[0], "lab"
        if local:
            index = f"rank {candidates.index(local[0])}" if spec is not None else "a rank"
            raise UsageError(
                f"rank {rank} is {worker or 'no host'}, but this machine is {local[0]} "
                f"({topology.hosts[local[0]].ip}) of the lab: run {index} here, or set "
                f"{ENV_WORKER}={local[0]}")
        if network == "lab":
            name = worker or f"rank {rank}"
            raise UsageError(
                f"{ENV_NETWORK}=lab, but {name}'s address is not on this machine: run the "
                f"rank on its lab host (inalab -t {settings.topology} host HOST -- ...), or "
                f"use {ENV_NETWORK}=embedded")
    return worker or hosts[rank], "embedded"  # spawned by rank 0, or an endpoints file's


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


@dataclass
class CallCounts:
    """Collectives this member ran, by name and by where they went."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, collective: str, where: str) -> None:
        by_where = self.counts.setdefault(collective, {})
        by_where[where] = by_where.get(where, 0) + 1


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
            except BaseException as exc:  # noqa: BLE001 (any error is the call's, for its future)
                done(None, exc)
            else:
                done(result, None)

    def drain(self) -> None:
        """Wait until every call submitted so far is done (their own futures say how)."""
        if threading.current_thread() is self._thread:
            return
        done = threading.Event()
        self.submit(lambda: None, lambda result, error: done.set())
        done.wait()

    def close(self, wait: float = 60.0) -> None:
        """No more calls; wait up to ``wait`` seconds for those under way to end (a
        thread still running when the process exits aborts it in torch's C++)."""
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(wait)
            if self._thread.is_alive():
                LOG.warning("calls still under way after %gs at close", wait)


class OnHostsWorker(Worker):
    """A worker of a job no switch takes: every call runs on the ring of its hosts
    at once, without asking the network (which holds nothing of the job)."""

    def _start(self, proposal: int | None = None) -> SyncReply:
        return SyncReply(self.continuation or 0, 0, on_hosts=True)

    def _abort(self) -> None:
        pass  # no root to tell


class Node:
    """This process as a rank of the ina backend: its host, every rank's host, the
    network, the transport every job of the process shares, the heartbeat, and the
    connection to the network's job service (made when first needed). Made with the
    default group (``start``); ``Node.current`` is the process's, which every other
    group's member joins."""

    current: ClassVar[Node | None] = None

    def __init__(self, store: Store, rank: int, size: int, settings: Settings,
                 topology: Topology, spec: JobSpec | None, host: str, network: str,
                 hosts: Sequence[str], transport: SharedTransport,
                 spawned: SpawnedNetwork | None, service: str | None, timeout: timedelta):
        self.store, self.rank, self.size = store, rank, size
        self.settings, self.topology, self.spec = settings, topology, spec
        self.host, self.network, self.hosts = host, network, list(hosts)
        self.transport, self.spawned, self.service = transport, spawned, service
        self.timeout = timeout
        self.liveness = Liveness(store, rank, size,
                                 topology.hosts[host].ip if network == "lab" else LOOPBACK)
        self.members = 0  # open members: the node closes with the last
        self._client: JobClient | None = None
        self._lock = threading.Lock()

    @classmethod
    def start(cls, store: Store, rank: int, size: int, settings: Settings | None = None,
              timeout: timedelta = timedelta(minutes=30)) -> Node:
        """This rank, once every rank agrees on the topology, the job (or none), the
        network and the hosts; UsageError (or JobError, TopologyError) naming the
        problem otherwise, at every rank."""
        try:
            settings = settings or Settings.from_env()
            topology = Topology.load(settings.topology)
            spec = JobSpec.load(settings.job) if settings.job is not None else None
            host, network = choose_worker(spec, topology, rank, size, settings)
            if spec is not None:  # the job's names, checked here (its VAT by its deployer)
                WorkerConfig.from_files(settings.topology, settings.job or "", host)
        except InaError as exc:
            store.set(f"ina/rank/{rank}", json.dumps({"error": str(exc)}))
            raise
        mine = {"worker": host, "network": network, "half_width": str(settings.half_width),
                "job": "planned" if spec is None else
                _digest(spec.job_id, spec.workers, spec.op, spec.slots),
                "topology": _digest(sorted(topology.hosts), sorted(topology.switches))}
        store.set(f"ina/rank/{rank}", json.dumps(mine))
        hosts = _agree(store, rank, size, mine, spec)
        spawned: SpawnedNetwork | None = None
        service = settings.job_service
        target = topology.address(topology.host_attachment(host)[0])
        if network == "lab":
            raw: UdpTransport | LinkTransport = UdpTransport(target)
        else:
            endpoints, spawned = _embedded(store, rank, settings)
            raw = LinkTransport(topology, host, endpoints, target)
            service = endpoints.jobs
        return cls(store, rank, size, settings, topology, spec, host, network, hosts,
                   SharedTransport(raw), spawned, service, timeout)

    def client(self) -> JobClient:
        """The connection to the job service: the lease of every job this rank asked
        for (LabError if there is no service)."""
        with self._lock:
            if self._client is None:
                if self.service is None:
                    raise LabError(
                        "no job service: on a lab, set " + ENV_JOB_SERVICE + " to its "
                        "socket (inalab ranks does; see docs/training.md)")
                self._client = JobClient(self.service)
            return self._client

    def grant(self, workers: Sequence[str], slots: int = DEFAULT_SLOTS) -> Grant:
        """A job over ``workers`` from the network, or one on hosts with the reason no
        switch takes it: never an error for that."""
        try:
            return self.client().deploy(workers, slots)
        except InaError as exc:
            # No service, or it failed: an id unique in this program for the ring.
            job_id = FIRST_JOB_ID + self.store.add("ina/local_job_ids", 1) - 1
            return Grant(job_id, tuple(workers), slots, True, str(exc))

    def opened(self) -> None:
        with self._lock:
            self.members += 1

    def closed(self) -> None:
        """A member closed; with the last one, the node: its liveness, the service's
        connection (whatever it still holds goes), the transport and the network."""
        with self._lock:
            self.members -= 1
            if self.members > 0:
                return
            client, self._client = self._client, None
        if Node.current is self:
            Node.current = None
        self.liveness.close()
        if client is not None:
            client.close()
        self.transport.close()
        if self.spawned is not None:
            self.spawned.close()


@dataclass
class Member:
    """A rank of one process group as a worker of the group's job."""

    node: Node
    store: Store  # the group's
    rank: int  # in the group
    size: int
    global_ranks: tuple[int, ...]
    grant: Grant
    owner: bool  # this rank asked for the job: it gives it back
    worker: Worker
    view: JobView
    calls: CallQueue
    deadline: float  # seconds a call may wait on while every rank is alive
    counts: CallCounts = field(default_factory=CallCounts)
    #: The elements' width of float16 and bfloat16 reductions (Settings.half_width).
    half_width: int = 32
    #: Seconds the group's job took to make, as this rank waited for it.
    seconds: float = 0.0
    closed: bool = False

    @classmethod
    def join(cls, store: Store, rank: int, size: int, settings: Settings | None = None,
             timeout: timedelta = timedelta(minutes=30)) -> Member:
        """This rank in the default group: the process's node, and the member of the
        group's job (INA_JOB's, or one the network deploys)."""
        node = Node.start(store, rank, size, settings, timeout)
        try:
            return cls.of_group(node, store, rank, size, tuple(range(size)), timeout,
                                default=True)
        except BaseException:
            node.opened()
            node.closed()  # its transport, heartbeat and network go
            raise

    @classmethod
    def of_group(cls, node: Node, store: Store, rank: int, size: int,
                 global_ranks: Sequence[int], timeout: timedelta,
                 default: bool = False) -> Member:
        """This rank (``rank`` of ``size`` in the group, whose ranks are
        ``global_ranks`` of the default group) as a worker of the group's job: the
        default group's (``default``) with INA_JOB, else one its rank 0 asks the
        network for (a group of every rank too: each group has a job of its own)."""
        started = time.monotonic()
        workers = [node.hosts[g] for g in global_ranks]
        spec = node.spec if default else None
        owner = False
        if spec is not None:
            grant = Grant(spec.job_id, tuple(spec.workers), spec.slots)
        elif rank == 0:
            grant, owner = node.grant(workers), True
            store.set("ina/job", json.dumps(grant.to_json()))
        else:
            try:
                store.wait(["ina/job"], JOIN_TIMEOUT)
            except Exception as exc:
                raise UsageError(f"rank {rank} of a group of ranks {list(global_ranks)}: its "
                                 f"rank 0 did not say the group's job within "
                                 f"{JOIN_TIMEOUT.total_seconds():.0f}s ({exc})") from exc
            grant = Grant.from_json(json.loads(store.get("ina/job")))
        if grant.on_hosts:
            LOG.warning("job %d (ranks %s on %s): no switch takes it (%s): its collectives "
                        "run on its hosts", grant.job_id, list(global_ranks),
                        ", ".join(workers), grant.reason)
        op = spec.op if spec is not None else Op.SUM
        config = WorkerConfig.of(grant.job_id, op, grant.workers, grant.slots, node.topology,
                                 node.host)
        if not config.ring_secret:
            config = dataclasses.replace(config, ring_secret=_ring_secret(store, rank))
        if node.network == "embedded":
            config = on_loopback(config)
        view = node.transport.view(grant.job_id)
        kind = OnHostsWorker if grant.on_hosts else Worker
        # The call asks whether every rank lives after INA_TIMEOUT without a result,
        # or sooner if the group's own timeout is shorter (a group of 1 s).
        worker = kind(config, view, timeout=min(node.settings.timeout,
                                                timeout.total_seconds()))
        member = cls(node, store, rank, size, tuple(global_ranks), grant, owner, worker, view,
                     CallQueue(f"ina-calls-{grant.job_id}"), timeout.total_seconds(),
                     half_width=node.settings.half_width,
                     seconds=time.monotonic() - started)
        worker.patience = member._patience
        node.opened()
        atexit.register(member.close)
        LOG.info("rank %d of %d (global %d) is %s of job %d (%s, %s network, %.3fs)", rank,
                 size, node.rank, node.host, grant.job_id, member.where, node.network,
                 member.seconds)
        return member

    @property
    def name(self) -> str:
        return self.worker.config.name

    @property
    def topology(self) -> Topology:
        return self.node.topology

    @property
    def network(self) -> str:
        return self.node.network

    @property
    def where(self) -> str:
        """Where the group's collectives go: through the switches, or on its hosts."""
        return WHERE_HOSTS if self.grant.on_hosts else WHERE_SWITCHES

    def _patience(self, waited: float) -> str | None:
        """Keep a waiting call waiting while every member is alive, up to the process
        group's timeout."""
        stopped = self.node.liveness.gone(self.global_ranks)
        if stopped:
            names = ", ".join(f"rank {self.global_ranks.index(r)} ({self.node.hosts[r]})"
                              for r in stopped)
            how = ("its connection closed when its process ended" if len(stopped) == 1
                   else "their connections closed when their processes ended")
            return f"{names} stopped: {how}"
        if waited >= self.deadline:
            return (f"Timed out after {waited:.1f}s (the process group's timeout, "
                    f"{self.deadline:g}s): every rank is alive but this call got no result; "
                    "is every rank making the same collectives?")
        return None

    def close(self) -> None:
        """End this rank's part of the group: stop its calls; the rank that asked for
        the job gives it back once every other member has ended too (or stopped, or
        CLOSE_WAIT passed); the last member of the process closes the node."""
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)
        self.calls.close()
        if self.owner or (self.rank == 0 and self.node.spawned is not None
                          and self.size == self.node.size):
            self._wait_for_members()
        else:
            try:
                self.store.add("ina/closed", 1)
            except (RuntimeError, OSError) as exc:  # the store is gone: the owner stops waiting too
                LOG.debug("could not say the group ended: %s", exc)
        self.view.close()
        if self.owner:
            try:
                self.node.client().teardown(self.grant.job_id)
            except LabError as exc:  # the service is gone, and the job with it
                LOG.debug("job %d: %s", self.grant.job_id, exc)
        self.node.closed()

    def _wait_for_members(self) -> None:
        deadline = time.monotonic() + CLOSE_WAIT
        try:
            while self.store.add("ina/closed", 0) < self.size - 1:
                if time.monotonic() > deadline or self.node.liveness.gone(
                        self.global_ranks):
                    LOG.info("job %d: not every member ended; giving the job back",
                             self.grant.job_id)
                    return
                time.sleep(0.05)
        except (RuntimeError, OSError) as exc:  # the store is gone: so are the others
            LOG.debug("job %d: %s", self.grant.job_id, exc)


def _agree(store: Store, rank: int, size: int, mine: dict[str, str],
           spec: JobSpec | None) -> list[str]:
    """Every rank's record, compared with this one's; every rank's host, or
    UsageError at the first problem (the same one at every rank)."""
    keys = [f"ina/rank/{r}" for r in range(size)]
    try:
        store.wait(keys, JOIN_TIMEOUT)
    except Exception as exc:
        raise UsageError(f"rank {rank}: not every rank joined the ina process group within "
                         f"{JOIN_TIMEOUT.total_seconds():.0f}s ({exc})") from exc
    records = [json.loads(store.get(k)) for k in keys]
    what_job = f"job {spec.job_id}" if spec is not None else "the process group"
    for r, rec in enumerate(records):
        if "error" in rec:
            raise UsageError(f"rank {r} could not join {what_job}: {rec['error']}")
    for what in ("job", "topology", "network", "half_width"):
        values = {rec[what] for rec in records}
        if len(values) > 1:
            detail = {r: rec[what] for r, rec in enumerate(records)}
            raise UsageError(f"the ranks do not name the same {what} ({ENV_TOPOLOGY}, "
                             f"{ENV_JOB}, {ENV_NETWORK}, {ENV_HALF_WIDTH}): {detail}")
    seen: dict[str, int] = {}
    for r, rec in enumerate(records):
        if rec["worker"] in seen:
            raise UsageError(f"ranks {seen[rec['worker']]} and {r} are both {rec['worker']}: "
                             f"each rank must be another host ({ENV_WORKER})"
                             + (f" of job {spec.job_id}" if spec is not None else ""))
        seen[rec["worker"]] = r
    return [str(rec["worker"]) for rec in records]


def _ring_secret(store: Store, rank: int) -> bytes:
    """The secret the group's ring on hosts authenticates with (a job no switch takes
    runs there), unless INA_RING_SECRET gave one: the group's rank 0 draws it, the
    others read it from the group's store."""
    key = "ina/ring_secret"
    if rank == 0:
        store.set(key, secrets.token_hex(32))
    store.wait([key], JOIN_TIMEOUT)
    return bytes.fromhex(store.get(key).decode())


def _embedded(store: Store, rank: int, settings: Settings
              ) -> tuple[Endpoints, SpawnedNetwork | None]:
    """The embedded network's endpoints: from a file, or from the one rank 0 starts
    (published in the store), with INA_JOB's job deployed if one is named."""
    if settings.network not in NETWORKS:
        return Endpoints.from_json(Path(settings.network).read_text()), None
    key = "ina/embedded"
    spawned = None
    if rank == 0:
        try:
            spawned = spawn(settings.topology, [settings.job] if settings.job else [])
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
