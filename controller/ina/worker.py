"""Host side: send a worker's int32 array for a job, get the reduced array back.

``AllreduceSession`` holds the protocol logic without any I/O: it cuts the
array into packets (ELEMS_PER_PACKET values each, sequence numbers counted from
``seq_base``), keeps at most ``window`` of them outstanding (never more than the
job's slots, so no two packets in flight share a slot), and collects the
results. ``Worker`` drives a session over a UDP socket; the reference-model
demo and the tests drive sessions over the model network.
"""

from __future__ import annotations

import errno
import heapq
import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ina import quantize
from ina.constants import ELEMS_PER_PACKET, INA_UDP_PORT, Flag, Op
from ina.job import Job, JobSpec, validate_job
from ina.topology import Topology
from ina.wire import InaPacket, WireError, ina_payload

LOG = logging.getLogger(__name__)
SEQ_MODULO = 1 << 32
#: Seconds without a result before a chunk is sent again (doubled on each retry).
DEFAULT_RTO = 0.2
MAX_BACKOFF_DOUBLINGS = 3


class AllreduceError(RuntimeError):
    """The AllReduce could not complete."""


class AllreduceTimeout(AllreduceError):
    pass


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker must know about its job."""

    job_id: int
    op: Op
    pbm: int  # the worker's own bit
    target: str  # address of its parent VAT node
    window: int  # packets outstanding at most (the job's slots)
    workers: int = 1  # workers in the job (float SUM needs the headroom)

    @classmethod
    def from_files(cls, topology: str | Path, job: str | Path, worker: str) -> WorkerConfig:
        topo = Topology.load(topology)
        spec = JobSpec.load(job)
        if spec.aggregators is None:
            raise ValueError(f"{job} has no VAT mapping: a worker needs the deployed plan "
                             "(inactl plan -o FILE, or inactl deploy --save-plan FILE)")
        return cls.for_job(validate_job(spec, topo), topo, worker)

    @classmethod
    def for_job(cls, job: Job, topology: Topology, worker: str) -> WorkerConfig:
        if worker not in job.workers:
            raise ValueError(f"{worker} is not a worker of job {job.job_id} "
                             f"({', '.join(job.workers)})")
        return cls(job.job_id, job.op, job.worker_bit[worker], job.target_of(worker, topology),
                   job.slots, len(job.workers))


@dataclass(frozen=True)
class AllreduceResult:
    values: npt.NDArray[Any]  # int32, or float32 for a float AllReduce
    overflow: bool  # a 32-bit SUM wrapped somewhere: the values are not exact
    packets: int
    retransmissions: int = 0
    #: Float AllReduce only: per element, how far a value may be from the exact one.
    error_bound: npt.NDArray[np.float64] | None = None


class AllreduceSession:
    """One AllReduce of one array, without I/O.

    Chunk ``j`` (sequence number ``seq_base + j``) is first sent only once the
    result of every chunk before ``j - window + 1`` has arrived: a sliding
    window, as in SwitchML. So when any worker sends chunk ``j``, every worker
    already has the result of chunk ``j - 2 * window``, the last one to use the
    same copy of the same slot, and the switches may overwrite it. A chunk with
    no result ``rto`` seconds after it was sent is sent again, unchanged; each
    further retry waits twice as long (up to 8 x rto), so a slow peer does not
    cause a storm of retransmissions.
    """

    def __init__(self, config: WorkerConfig, values: npt.ArrayLike, seq_base: int = 0,
                 rto: float = DEFAULT_RTO, op: Op | None = None):
        array = np.asarray(values)
        if array.ndim != 1 or array.size == 0:
            raise ValueError("allreduce takes a non-empty one-dimensional array")
        if not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"allreduce takes integers, got {array.dtype}")
        if array.min() < np.iinfo(np.int32).min or array.max() > np.iinfo(np.int32).max:
            raise ValueError("values must fit in signed 32 bits")
        self.config = config
        self.op = config.op if op is None else op
        self.values = array.astype(np.int32)
        self.chunks = -(-array.size // ELEMS_PER_PACKET)
        self.seq_base = seq_base
        self.rto = rto
        self.result = np.zeros(array.size, dtype=np.int32)
        self.received = np.zeros(self.chunks, dtype=bool)
        self.results = 0
        self.next = 0  # next chunk to send for the first time
        self.base = 0  # lowest chunk without a result
        self.deadline: dict[int, float] = {}  # outstanding chunk -> when to resend it
        self.tries: dict[int, int] = {}  # outstanding chunk -> times sent
        self.timers: list[tuple[float, int]] = []  # heap of (deadline, chunk); stale ones too
        self.retransmissions = 0
        self.overflow = False

    def seq_of(self, chunk: int) -> int:
        return (self.seq_base + chunk) % SEQ_MODULO

    @property
    def done(self) -> bool:
        return self.results == self.chunks

    def _payload(self, chunk: int) -> bytes:
        lo = chunk * ELEMS_PER_PACKET
        part = self.values[lo: lo + ELEMS_PER_PACKET]
        return ina_payload(self.config.job_id, self.seq_of(chunk), self.config.pbm,
                           part.tolist(), self.op)

    def _sent(self, chunk: int, now: float) -> bytes:
        tries = self.tries.get(chunk, 0)
        self.tries[chunk] = tries + 1
        self.deadline[chunk] = now + self.rto * (1 << min(tries, MAX_BACKOFF_DOUBLINGS))
        heapq.heappush(self.timers, (self.deadline[chunk], chunk))
        return self._payload(chunk)

    def packets_to_send(self, now: float = 0.0) -> list[bytes]:
        """Retransmissions that are due, then the new chunks the window allows."""
        out = []
        while self.timers and self.timers[0][0] <= now:
            deadline, chunk = heapq.heappop(self.timers)
            if self.deadline.get(chunk) == deadline:  # still outstanding, timer current
                out.append(self._sent(chunk, now))
                self.retransmissions += 1
        while self.next < self.chunks and self.next < self.base + self.config.window:
            out.append(self._sent(self.next, now))
            self.next += 1
        return out

    def next_timer(self) -> float | None:
        """When the next retransmission is due, if any chunk is outstanding."""
        while self.timers and self.deadline.get(self.timers[0][1]) != self.timers[0][0]:
            heapq.heappop(self.timers)
        return self.timers[0][0] if self.timers else None

    def accept(self, payload: bytes) -> bool:
        """Take a received UDP payload; True if it was a new result of this session."""
        try:
            pkt = InaPacket.unpack(payload)
        except WireError:
            LOG.debug("ignored a payload that is not INA")
            return False
        h = pkt.header
        if h.job_id != self.config.job_id or not h.flags & Flag.RESULT:
            return False
        chunk = (h.seq - self.seq_base) % SEQ_MODULO
        if chunk >= self.next or self.received[chunk]:
            return False  # not ours, or a duplicate
        lo = chunk * ELEMS_PER_PACKET
        n = min(ELEMS_PER_PACKET, self.values.size - lo)
        if h.count != n:
            LOG.warning("result for seq %d carries %d values, expected %d", h.seq, h.count, n)
            return False
        self.result[lo: lo + n] = pkt.values[:n]
        self.received[chunk] = True
        self.results += 1
        self.deadline.pop(chunk, None)
        self.tries.pop(chunk, None)
        while self.base < self.chunks and self.received[self.base]:
            self.base += 1
        self.overflow |= bool(h.flags & Flag.OVERFLOW)
        return True

    def missing(self) -> list[int]:
        return [self.seq_of(c) for c in range(self.chunks) if not self.received[c]]

    def outcome(self) -> AllreduceResult:
        if not self.done:
            raise AllreduceError(f"{len(self.missing())} of {self.chunks} results missing")
        return AllreduceResult(self.result.copy(), self.overflow, self.chunks,
                               self.retransmissions)


class Transport(Protocol):
    def send(self, payload: bytes) -> None: ...

    def recv(self, timeout: float) -> bytes | None:
        """One received INA payload, or None after ``timeout`` seconds."""


class UdpTransport:
    """A UDP socket on INA_UDP_PORT: sends to the parent VAT node, receives results."""

    def __init__(self, target: str, bind: str = "0.0.0.0", port: int = INA_UDP_PORT):
        self.target = (target, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((bind, port))

    def send(self, payload: bytes) -> None:
        try:
            self.sock.sendto(payload, self.target)
        except OSError as exc:
            if exc.errno != errno.ENOBUFS:
                raise
            # The kernel dropped it (a full queue, a lossy link): as good as lost on
            # the wire, and the retransmission timer recovers it.
            LOG.debug("send dropped by the kernel: %s", exc)

    def recv(self, timeout: float) -> bytes | None:
        if timeout <= 0:
            self.sock.setblocking(False)
        else:
            self.sock.settimeout(timeout)
        try:
            data, _ = self.sock.recvfrom(65535)
        except (TimeoutError, BlockingIOError):
            return None
        return data

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> UdpTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Worker:
    """A worker of one job: ``allreduce(array)`` returns the reduced array.

    Every worker of the job must call ``allreduce`` with arrays of the same
    length in the same order; sequence numbers continue from call to call.
    ``timeout`` bounds the time without any new result (a peer gone, the job
    not deployed): then AllreduceTimeout says what is missing.
    """

    def __init__(self, config: WorkerConfig, transport: Transport, timeout: float = 5.0,
                 seq_base: int = 0, rto: float = DEFAULT_RTO,
                 progress: Callable[[int, int], None] | None = None):
        self.config = config
        self.transport = transport
        self.timeout = timeout
        self.rto = rto
        self.next_seq = seq_base
        self.progress = progress

    def allreduce(self, values: npt.ArrayLike | Sequence[int],
                  op: Op | None = None) -> AllreduceResult:
        """Reduce ``values`` (integers, or float32: see ina.quantize) with ``op``
        (default: the job's)."""
        op = self.config.op if op is None else op
        array = np.asarray(values)
        if not np.issubdtype(array.dtype, np.floating):
            return self._allreduce_ints(array, op)
        x = array.astype(np.float32)
        e = self._allreduce_ints(quantize.block_exponents(x), Op.MAX)
        n = self.config.workers
        r = self._allreduce_ints(quantize.quantize(x, e.values, op, n), op)
        result = quantize.dequantize(r.values, e.values, op, n)
        return AllreduceResult(result, r.overflow, e.packets + r.packets,
                               e.retransmissions + r.retransmissions,
                               quantize.bound(result, e.values, op, n))

    def _allreduce_ints(self, values: npt.ArrayLike, op: Op) -> AllreduceResult:
        session = AllreduceSession(self.config, values, self.next_seq, self.rto, op)
        self.next_seq = (self.next_seq + session.chunks) % SEQ_MODULO
        last_progress = time.monotonic()
        while not session.done:
            now = time.monotonic()
            for payload in session.packets_to_send(now):
                self.transport.send(payload)
            if now - last_progress > self.timeout:
                missing = session.missing()
                raise AllreduceTimeout(
                    f"job {self.config.job_id}: no result within {self.timeout:g}s for "
                    f"{len(missing)} of {session.chunks} packets (first seq {missing[0]}, "
                    f"{session.retransmissions} retransmissions); "
                    "is every worker running, and the job deployed?"
                )
            wake = last_progress + self.timeout
            timer = session.next_timer()
            if timer is not None:
                wake = min(wake, timer)
            received = self.transport.recv(max(wake - now, 0.0))
            while received is not None:
                if session.accept(received):
                    last_progress = time.monotonic()
                    if self.progress is not None:
                        self.progress(session.results, session.chunks)
                received = self.transport.recv(0.0)
        return session.outcome()


def allreduce(values: npt.ArrayLike, *, topology: str | Path, job: str | Path, worker: str,
              op: Op | str | None = None, timeout: float = 5.0, rto: float = DEFAULT_RTO,
              progress: Callable[[int, int], None] | None = None) -> AllreduceResult:
    """One AllReduce from this host as ``worker`` of ``job``: int or float32 arrays,
    op SUM, MIN or MAX (default: the job's). Every worker of the job must call it
    with an array of the same length."""
    config = WorkerConfig.from_files(topology, job, worker)
    if isinstance(op, str):
        op = Op[op.upper()]
    with UdpTransport(config.target) as transport:
        return Worker(config, transport, timeout=timeout, rto=rto,
                      progress=progress).allreduce(values, op)
