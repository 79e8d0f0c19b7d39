"""Host side: send a worker's int32 array for a job, get the reduced array back.

A deployed job serves any number of AllReduce calls, from one process or from
successive ones. A worker sends every packet to its edge switch, which steers it
in the job's current plan: SYNCs to the job's root, contributions to the
worker's parent VAT node (so the worker needs no VAT, and the VAT may change).
Each call (``Worker.allreduce``) has three steps:

1. **Start.** The worker asks the job's root where the call's sequence numbers
   begin (a SYNC packet, proposing the sequence number after its last call; the
   root answers the first SYNC after a deployment or a re-plan with its proposal,
   the others with W + 1 past the highest sequence number it has completed, W
   being the job's slots). Every worker of a call gets the same answer, since
   nothing of the new call can complete before all of them have started, and the
   answer lies past anything an earlier call, finished or interrupted, has sent.
   The answer carries the plan's generation (``gen``), which every packet of the
   worker carries from then on.
2. **Agree.** At that first sequence number the workers reduce a descriptor of
   the call (array length, integer or float, op) with MAX: a barrier that shows
   every worker whether they all make the same call, and fails all of them with
   a clear error if not.
3. **Reduce.** The array, cut into packets of ELEMS_PER_PACKET values with the
   following sequence numbers (a float32 array: first its block exponents, then
   its values, see ina.host.quantize).

A re-plan of the job during a call (the edge switch turns a contribution back with
REPLAN and the new ``gen``) makes every worker run the call again from its start;
a job that no switch aggregates (ON_HOSTS) is reduced on hosts, on a TCP ring of
its workers, with the same steps and the data plane's arithmetic (``Worker``).

``ReductionWindow`` is the protocol logic of one reduction without any I/O: a
sliding window of ``window`` packets (the job's slots), retransmission after an
adaptive timeout (``RtoEstimator``, from measured round trips) and early
retransmission of a packet whose result is missing while DUPLICATE_RESULTS
results of packets sent after it have arrived. ``Worker`` drives windows over a
``Transport`` (a UDP socket; the reference model offers one too).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ina.errors import (
    AllreduceError,
    AllreduceTimeout,
    CallMismatch,
    JobError,
    PlanChanged,
    RingError,
)
from ina.host import quantize
from ina.host.baselines import Ring
from ina.protocol.arith import INT32_MAX, INT32_MIN, seq_add, seq_diff
from ina.protocol.bitmaps import one_set
from ina.protocol.codec import InaHeader
from ina.protocol.constants import (
    ARRAY_BYTES,
    ELEMS_PER_PACKET,
    INA_HEADER_BYTES,
    INA_PAYLOAD_BYTES,
    INA_UDP_PORT,
    Flag,
    Op,
)
from ina.spec.job import Job, JobSpec, check_names, validate_job
from ina.spec.topology import Topology

LOG = logging.getLogger(__name__)
# The fields of the INA header a worker reads: flags, job_id, seq, count.
_RESULT_FIELDS = struct.Struct("!xBHIH")
_GEN_OFFSET = 11  # the header's gen byte
_SEQ = struct.Struct("!I")
_COUNT = struct.Struct("!H")
#: Seconds before an unanswered packet is first sent again, until round trips are measured.
DEFAULT_RTO = 0.2
#: Bounds of the adaptive retransmission timeout (seconds).
MIN_RTO = 0.005
MAX_RTO = 1.0
#: First wait for the root's answer to a SYNC (doubled on each retry).
SYNC_RTO = 0.02
#: Until round trips of the array's packets are measured, the RTO is this many
#: times the SYNC's round trip (a header through idle queues).
SYNC_RTT_FACTOR = 8
#: Copies of the ABORT a worker sends when it gives up on a call.
ABORT_COPIES = 3
#: Round trips the probe timer looks back over.
RECENT_SAMPLES = 64
#: Results of packets sent later that make a missing result count as lost.
DUPLICATE_RESULTS = 3
#: Times a call may be run again under a new plan of the job before it fails.
MAX_REPLANS = 8
#: The ring on hosts (a job no switch aggregates): rank r of job j listens on TCP port
#: RING_PORT_BASE + RING_RANKS * (j mod RING_JOBS) + (r mod RING_RANKS), below the
#: ephemeral ports (see ring_port; WorkerConfig.ring_port overrides the base).
RING_PORT_BASE = INA_UDP_PORT + 1000
RING_RANKS = 32
RING_JOBS = 256
#: The environment variable that holds the secret a job's launcher gives its workers
#: (any string): the ring on hosts admits only peers that hold it (ina.host.baselines.Ring).
RING_SECRET_ENV = "INA_RING_SECRET"
#: Seconds between two questions to a Worker's ``patience`` while a call waits on.
PATIENCE_RECHECK = 1.0
#: Timeouts double the RTO up to this many times (and never beyond its cap) until a
#: new result arrives.
MAX_BACKOFF_DOUBLINGS = 2


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
    that they hold ``ring_secret`` (see ina.host.baselines.Ring)."""

    job_id: int
    op: Op
    pbm: int  # the worker's own bit
    target: str  # where its packets go: its edge switch's loopback
    window: int  # packets outstanding at most (the job's slots)
    workers: int = 1  # workers in the job (float SUM needs the headroom)
    root: str = ""  # where its SYNCs go, if not to target
    name: str = "worker"  # this worker, for messages
    peers: tuple[str, ...] = ()  # every worker of the job, in the job's order
    addresses: tuple[str, ...] = ()  # their IP addresses (the ring on hosts)
    rank: int = 0  # this worker's index in peers
    ring_port: int | None = None  # the ring's port base (None: see ring_port())
    ring_secret: bytes = field(default=b"", repr=False)  # shared by the job's workers only

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
                   list(workers).index(worker), ring_port, ring_secret_from_environment())


@dataclass(frozen=True)
class AllreduceResult:
    values: npt.NDArray[Any]  # int32, or float32 for a float AllReduce
    overflow: bool  # a 32-bit SUM wrapped somewhere: the values are not exact
    packets: int
    retransmissions: int = 0
    #: Float AllReduce only: per element, how far a value may be from the exact one.
    error_bound: npt.NDArray[np.float64] | None = None
    on_hosts: bool = False  # reduced among the workers: no switch aggregated the job


@dataclass
class RtoEstimator:
    """The retransmission timeout from measured round trips (RFC 6298's smoothed
    round trip and its variation, Karn's rule: only packets sent once are
    measured), between ``floor`` and ``cap``. A round trip here runs from a
    contribution to its result, so it includes waiting for the other workers."""

    initial: float = DEFAULT_RTO
    floor: float = MIN_RTO
    cap: float = MAX_RTO
    srtt: float | None = None
    rttvar: float = 0.0
    samples: int = 0
    backoff: int = 0  # timeouts since the last sample: each doubles the RTO
    backed_off_at: float = float("-inf")
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_SAMPLES))

    def sample(self, rtt: float) -> None:
        self.samples += 1
        self.backoff = 0
        self.recent.append(rtt)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            # A result also waits for the other workers' contributions, and for
            # their loss recovery: clip outliers so one slow recovery does not
            # inflate the timeout (a lasting rise still gets through, doubling).
            rtt = min(rtt, 2 * self.srtt)
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def progress(self) -> None:
        """A new result arrived: the path works, undo the backoff."""
        self.backoff = 0

    def timed_out(self, now: float) -> None:
        """A packet's timer expired: back off (RFC 6298 5.5), once per RTO, since a
        window of packets sent together times out together. Karn's rule keeps the
        round trips of packets sent again out of the samples, so without this an
        RTO that is too short would never grow."""
        if now - self.backed_off_at >= self.rto:
            self.backed_off_at = now
            self.backoff = min(self.backoff + 1, MAX_BACKOFF_DOUBLINGS)

    @property
    def probe(self) -> float | None:
        """How long to wait for the oldest result when nothing else is in flight
        to reveal its loss: twice the least recent round trip (others' losses
        lengthen many round trips; the least is the path's own)."""
        if not self.recent:
            return None
        return min(self.ceiling, max(self.floor, 2 * min(self.recent)))

    @property
    def ceiling(self) -> float:
        return max(self.cap, self.floor)

    @property
    def rto(self) -> float:
        base = self.initial if self.srtt is None else self.srtt + 4 * self.rttvar
        return min(self.ceiling, max(self.floor, base * (1 << self.backoff)))


@dataclass
class _Outstanding:
    sent_at: float  # last transmission
    deadline: float  # when it counts as lost, if it is the oldest one outstanding
    order: int  # position of the last transmission among all of the window's
    tries: int = 1
    later: int = 0  # results of packets sent after this one's last transmission


def check_ints(values: npt.ArrayLike) -> npt.NDArray[Any]:
    """``values`` as an array the data plane can reduce, or ValueError/TypeError."""
    array = np.asarray(values)
    if array.ndim != 1 or array.size == 0:
        raise ValueError("allreduce takes a non-empty one-dimensional array")
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"allreduce takes integers, got {array.dtype}")
    # Scanned only when the type can hold more: a call checks its array more than once.
    if not np.can_cast(array.dtype, np.int32) and (array.min() < INT32_MIN
                                                   or array.max() > INT32_MAX):
        raise ValueError("values must fit in signed 32 bits")
    return array


class ReductionWindow:
    """One reduction of one array, without I/O.

    Chunk ``j`` (sequence number ``seq_base + j``) is first sent only once the
    result of every chunk before ``j - window + 1`` has arrived: a sliding window,
    as in SwitchML. So when any worker sends chunk ``j``, every worker already has
    the result of chunk ``j - 2 * window``, the last one to use the same copy of
    the same slot, and the switches may overwrite it. Every packet carries ``gen``,
    the generation of the job's plan the worker knows. A chunk is sent again,
    unchanged, at once when results of DUPLICATE_RESULTS chunks sent after it
    have arrived (it, or a peer's contribution to it, was lost), or, if it is the
    oldest outstanding, when its result is ``rto`` late (a timeout doubles the
    RTO until a round trip is measured again, up to its cap).
    """

    def __init__(self, config: WorkerConfig, values: npt.ArrayLike, seq_base: int = 0,
                 rto: RtoEstimator | float | None = None, op: Op | None = None,
                 gen: int = 0):
        array = check_ints(values)
        self.config = config
        self.op = config.op if op is None else op
        self.size = array.size
        self.chunks = -(-array.size // ELEMS_PER_PACKET)
        # The whole array as it goes on the wire, padded to whole packets: a
        # packet's payload is a header and a slice of it, no per-value work.
        wire = np.zeros(self.chunks * ELEMS_PER_PACKET, dtype=">i4")
        wire[: array.size] = array
        self.wire = wire.tobytes()
        si, bits = one_set(config.pbm)
        self.head = bytearray(InaHeader(job_id=config.job_id, seq=0, pbm=bits,
                                        count=ELEMS_PER_PACKET, op=self.op, si=si,
                                        gen=gen).pack())
        self.seq_base = seq_base
        self.rto = rto if isinstance(rto, RtoEstimator) else RtoEstimator(
            initial=DEFAULT_RTO if rto is None else rto)
        self.result = np.zeros(array.size, dtype=np.int32)
        self.received = np.zeros(self.chunks, dtype=bool)
        self.results = 0
        self.next = 0  # next chunk to send for the first time
        self.base = 0  # lowest chunk without a result
        self.outstanding: dict[int, _Outstanding] = {}
        self.lost: list[int] = []  # chunks to send again now (early retransmission)
        self.progress_at = 0.0  # when the last new result arrived
        self.sends = 0
        self.retransmissions = 0
        self.early_retransmissions = 0
        self.overflow = False

    def seq_of(self, chunk: int) -> int:
        return seq_add(self.seq_base, chunk)

    @property
    def done(self) -> bool:
        return self.results == self.chunks

    def count_of(self, chunk: int) -> int:
        """Meaningful values in the chunk's packet."""
        return min(ELEMS_PER_PACKET, self.size - chunk * ELEMS_PER_PACKET)

    def _payload(self, chunk: int) -> bytes:
        _SEQ.pack_into(self.head, 4, self.seq_of(chunk))
        _COUNT.pack_into(self.head, 8, self.count_of(chunk))
        lo = chunk * ARRAY_BYTES
        return bytes(self.head) + self.wire[lo: lo + ARRAY_BYTES]

    def _send(self, chunk: int, now: float) -> bytes:
        state = self.outstanding.get(chunk)
        deadline = now + self.rto.rto
        if state is None:
            state = self.outstanding[chunk] = _Outstanding(now, deadline, self.sends)
        else:
            state.tries, state.sent_at, state.deadline, state.order, state.later = \
                state.tries + 1, now, deadline, self.sends, 0
            self.retransmissions += 1
        self.sends += 1
        return self._payload(chunk)

    def packets_to_send(self, now: float = 0.0) -> list[bytes]:
        """Retransmissions that are due (early ones first), then the new chunks the
        window allows. Only the oldest outstanding chunk can time out, as in TCP:
        a window sent in one burst waits in queues, and its later packets must not
        all be sent again when the first is slow; losses among them are found by
        the results that overtake them."""
        out = []
        for chunk in self.lost:
            if chunk in self.outstanding:
                self.early_retransmissions += 1
                out.append(self._send(chunk, now))
        self.lost.clear()
        oldest = self.outstanding.get(self.base)
        if oldest is not None and oldest.deadline <= now:
            self.rto.timed_out(now)
            out.append(self._send(self.base, now))
        elif oldest is not None and self._probe_due(now):
            # Nothing in flight after it can reveal its loss (the window is full,
            # or the array's tail): send it again without waiting for the RTO.
            self.early_retransmissions += 1
            out.append(self._send(self.base, now))
        while self.next < self.chunks and self.next < self.base + self.config.window:
            out.append(self._send(self.next, now))
            self.next += 1
        return out

    def _probe_at(self) -> float | None:
        """When the window can take no new chunk (it is full, or the array is all
        sent), when to send the oldest again without waiting for its RTO: a probe
        interval after its last send or the last progress, whichever is later."""
        oldest = self.outstanding.get(self.base)
        probe = self.rto.probe
        if (oldest is None or probe is None
                or self.next < min(self.chunks, self.base + self.config.window)):
            return None
        return max(self.progress_at, oldest.sent_at) + probe

    def _probe_due(self, now: float) -> bool:
        at = self._probe_at()
        return at is not None and at <= now

    def next_timer(self) -> float | None:
        """When the next retransmission is due, if any chunk is outstanding."""
        if self.lost:
            return 0.0
        oldest = self.outstanding.get(self.base)
        if oldest is None:
            return None
        probe = self._probe_at()
        return oldest.deadline if probe is None else min(oldest.deadline, probe)

    def accept(self, payload: bytes, now: float = 0.0) -> bool:
        """Take a received UDP payload; True if it was a new result of this window."""
        if len(payload) < INA_PAYLOAD_BYTES:
            LOG.debug("ignored a payload that is not INA")
            return False
        flags, job_id, seq, count = _RESULT_FIELDS.unpack_from(payload)
        if job_id != self.config.job_id or not flags & Flag.RESULT:
            return False
        chunk = seq_add(seq, -self.seq_base)
        if chunk >= self.next or self.received[chunk]:
            return False  # not ours, or a duplicate
        n = self.count_of(chunk)
        if count != n:
            LOG.warning("result for seq %d carries %d values, expected %d", seq, count, n)
            return False
        lo = chunk * ELEMS_PER_PACKET
        self.result[lo: lo + n] = np.frombuffer(payload, dtype=">i4", count=n,
                                                offset=INA_HEADER_BYTES)
        self.received[chunk] = True
        self.results += 1
        state = self.outstanding.pop(chunk, None)
        if state is not None and state.tries == 1:
            # Sent once: the result answers that send (Karn). Then it is a round
            # trip, and overtakes whatever was sent before it and is still missing.
            self.rto.sample(now - state.sent_at)
            for other_chunk, other in self.outstanding.items():
                if other.order < state.order:
                    other.later += 1
                    if other.later == DUPLICATE_RESULTS:
                        self.lost.append(other_chunk)
        self.progress_at = now
        self.rto.progress()
        if chunk == self.base:
            while self.base < self.chunks and self.received[self.base]:
                self.base += 1
            # Progress: the new oldest gets a full RTO from now (RFC 6298 5.3), as
            # it may have waited in queues behind the ones just answered.
            oldest = self.outstanding.get(self.base)
            if oldest is not None:
                oldest.deadline = max(oldest.deadline, now + self.rto.rto)
        self.overflow |= bool(flags & Flag.OVERFLOW)
        return True

    def missing(self) -> list[int]:
        return [self.seq_of(c) for c in range(self.chunks) if not self.received[c]]

    def outcome(self) -> AllreduceResult:
        if not self.done:
            raise AllreduceError(f"{len(self.missing())} of {self.chunks} results missing")
        return AllreduceResult(self.result.copy(), self.overflow, self.chunks,
                               self.retransmissions)


# --- A call's descriptor ---------------------------------------------------------

#: Kinds of call.
KIND_INT, KIND_FLOAT = 0, 1


@dataclass(frozen=True)
class CallDescriptor:
    """What every worker of a call must agree on. Reduced with MAX as
    ``[size, -size, kind, -kind, op, -op]``: for each field, the largest and the
    smallest value any worker gave."""

    size: int
    kind: int
    op: int

    def values(self) -> npt.NDArray[np.int32]:
        fields = (self.size, self.kind, self.op)
        return np.array([v for f in fields for v in (f, -f)], dtype=np.int32)

    @staticmethod
    def disagreement(reduced: npt.NDArray[np.int32]) -> list[str]:
        """What the workers disagree on, from the reduced descriptor."""
        names = ("array length", "kind (0 integers, 1 float32)", "op")
        problems = []
        for i, name in enumerate(names):
            high, low = int(reduced[2 * i]), -int(reduced[2 * i + 1])
            if high != low:
                problems.append(f"{name} from {low} to {high}")
        return problems


def sync_request(config: WorkerConfig, nonce: int, proposal: int = 0, gen: int = 0) -> bytes:
    """A call's SYNC to the job's root: an INA header alone, its ``count`` a nonce
    that tells the answer to this SYNC from a late answer to an earlier one, its
    ``seq`` the worker's proposal for the call's start (what the root answers to the
    first SYNC of a deployment or of a new plan), its ``gen`` the plan's generation
    the worker knows (its edge switch stamps the current one)."""
    si, bits = one_set(config.pbm)
    return InaHeader(job_id=config.job_id, seq=proposal, pbm=bits, count=nonce & 0xFFFF,
                     op=config.op, flags=Flag.SYNC, si=si, gen=gen).pack()


@dataclass(frozen=True)
class SyncReply:
    """The answer to a call's SYNC: from the root, the call's first sequence number
    and the plan's generation; or, from the edge switch, ON_HOSTS (``seq`` is then
    the proposal sent back): no switch aggregates the job."""

    seq: int
    gen: int
    on_hosts: bool = False


def sync_reply(payload: bytes, config: WorkerConfig, nonce: int) -> SyncReply | None:
    """What ``payload`` says, if it answers our SYNC (a header alone, SYNC | REPLY,
    our job and nonce)."""
    if not INA_HEADER_BYTES <= len(payload) < INA_PAYLOAD_BYTES:
        return None
    flags, job_id, seq, count = _RESULT_FIELDS.unpack_from(payload)
    answer = Flag.SYNC | Flag.REPLY
    if job_id != config.job_id or flags & answer != answer or count != nonce & 0xFFFF:
        return None
    gen = payload[_GEN_OFFSET]
    if flags & Flag.ON_HOSTS:
        return SyncReply(int(seq), gen, on_hosts=True)
    if flags & (Flag.REPLAN | Flag.ABORT | Flag.RESULT):
        return None
    return SyncReply(int(seq), gen)


def sync_answer(payload: bytes, config: WorkerConfig, nonce: int) -> int | None:
    """The call's first sequence number, if ``payload`` is the root's answer to our
    SYNC (not an ON_HOSTS notice)."""
    reply = sync_reply(payload, config, nonce)
    return None if reply is None or reply.on_hosts else reply.seq


@dataclass(frozen=True)
class Notice:
    """A worker's contribution turned back by its edge switch (SYNC | REPLY and
    REPLAN or ON_HOSTS; the array comes back with it): the job was planned anew, in
    generation ``gen``, or no switch aggregates it now."""

    on_hosts: bool  # else REPLAN
    gen: int
    seq: int


def notice_of(payload: bytes, config: WorkerConfig) -> Notice | None:
    """The notice ``payload`` is, if it turns back one of our contributions (a SYNC
    turned back, a header alone, answers a SYNC: see sync_reply)."""
    if len(payload) < INA_PAYLOAD_BYTES:
        return None
    flags, job_id, seq, _ = _RESULT_FIELDS.unpack_from(payload)
    told = Flag.SYNC | Flag.REPLY
    if job_id != config.job_id or flags & told != told or flags & Flag.ABORT:
        return None
    if flags & Flag.ON_HOSTS:
        return Notice(True, payload[_GEN_OFFSET], int(seq))
    if flags & Flag.REPLAN:
        return Notice(False, payload[_GEN_OFFSET], int(seq))
    return None


# --- Transport -------------------------------------------------------------------


class Transport(Protocol):
    def send(self, payload: bytes, dst: str | None = None) -> None:
        """Send to ``dst`` (default: the worker's edge switch)."""

    def recv(self, timeout: float) -> bytes | None:
        """One received INA payload, or None after ``timeout`` seconds."""


def is_local_address(address: str) -> bool:
    """Whether this machine (its network namespace) has an interface with this IPv4
    address: a UDP socket can be bound to it (nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return False
            raise
    return True


class UdpTransport:
    """A UDP socket on INA_UDP_PORT: sends to the worker's edge switch, receives results."""

    def __init__(self, target: str, bind: str = "0.0.0.0", port: int = INA_UDP_PORT):
        self.target = target
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        # A window of packets waiting in a slow link's queue still counts against
        # the socket's send buffer: room for several windows.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.sock.bind((bind, port))
        self.timeout: float | None = None

    def send(self, payload: bytes, dst: str | None = None) -> None:
        try:
            self.sock.sendto(payload, (dst or self.target, self.port))
        except (BlockingIOError, TimeoutError) as exc:
            # The send buffer is full (the socket is non-blocking or has a timeout
            # for recv): as good as lost on the wire; retransmission recovers it.
            LOG.debug("send buffer full, packet dropped: %s", exc)
        except OSError as exc:
            if exc.errno != errno.ENOBUFS:
                raise
            # The kernel dropped it (a full queue, a lossy link): likewise.
            LOG.debug("send dropped by the kernel: %s", exc)

    def recv(self, timeout: float) -> bytes | None:
        timeout = max(timeout, 0.0)
        if timeout != self.timeout:  # a syscall only when it changes
            self.sock.settimeout(timeout)
            self.timeout = timeout
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


# --- Worker ----------------------------------------------------------------------


@dataclass
class CallStats:
    """Packets of the calls a Worker made."""

    packets: int = 0
    retransmissions: int = 0
    early_retransmissions: int = 0
    syncs: int = 0
    replans: int = 0  # calls run again from their start under a new plan of the job
    on_hosts: int = 0  # calls reduced among the workers (no switch aggregated the job)
    ring_refused: int = 0  # connections to the ring on hosts refused: not the job's workers
    #: Seconds spent in each phase of the calls on switches, summed over the calls:
    #: "starting" (the SYNC's round trip), "agreeing on the call" (the descriptor),
    #: "agreeing on exponents" (float calls), "reducing" (the array). A profile.
    seconds: dict[str, float] = field(default_factory=dict)

    def spent(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds


#: A reduction backend: (values, op, first sequence number, phase) -> the result.
Reduce = Callable[[npt.NDArray[Any], Op, int, str], AllreduceResult]


def _chunks(size: int) -> int:
    return -(-size // ELEMS_PER_PACKET)


@dataclass
class Worker:
    """A worker of one job: ``allreduce(array)`` returns the reduced array.

    Every worker of the job must make the same calls (array length, op, integer
    or float) in the same order; the workers that disagree all fail with
    CallMismatch. ``timeout`` bounds the time without progress (a peer gone, the
    job not deployed): then AllreduceTimeout says what was observed.

    Plans. The worker keeps ``gen``, the generation of the job's plan (from the
    root's answers and the edge switch's notices), and ``continuation``, the
    sequence number after its last completed call, which its SYNC proposes as the
    call's start (the root takes the first proposal after a deployment or a
    re-plan). If the job is planned anew during a call (REPLAN), the worker SYNCs
    again proposing the call's start and runs the whole call again from there
    under the new plan. If no switch aggregates the job (ON_HOSTS), the call runs
    on hosts: a TCP ring among the job's workers (ina.host.baselines.Ring); the
    next call asks the root again.

    Limits: workers that completed a call before the job was re-planned, or moved to
    hosts, cannot redo it with the others: those still in the call fail (with
    AllreduceError saying so, or AllreduceTimeout on hosts).
    """

    config: WorkerConfig
    transport: Transport
    timeout: float = 5.0
    rto: RtoEstimator = field(default_factory=RtoEstimator)
    progress: Callable[[int, int], None] | None = None
    stats: CallStats = field(default_factory=CallStats)
    highest_sent: int = 0  # in the current call
    gen: int = 0  # the generation of the job's plan, as far as this worker knows
    continuation: int | None = None  # the sequence number after the last completed call
    max_replans: int = MAX_REPLANS  # per call
    #: Asked once no result has arrived for ``timeout`` seconds while reducing (and
    #: every PATIENCE_RECHECK seconds after), with the seconds without one: None to
    #: keep waiting (every peer is alive, only slow), or why to give up. Without it,
    #: the call gives up after ``timeout`` seconds.
    patience: Callable[[float], str | None] | None = None

    def allreduce(self, values: npt.ArrayLike | Sequence[int],
                  op: Op | None = None) -> AllreduceResult:
        """Reduce ``values`` (integers, or float32: see ina.host.quantize) with ``op``
        (default: the job's)."""
        op = self.config.op if op is None else op
        array = np.asarray(values)
        is_float = bool(np.issubdtype(array.dtype, np.floating))
        if not is_float:  # refuse bad input before anything is sent
            check_ints(array)
        elif array.ndim != 1 or array.size == 0:
            raise ValueError("allreduce takes a non-empty one-dimensional array")
        reply = self._start()
        if (not reply.on_hosts and self.continuation is not None
                and seq_diff(reply.seq, self.continuation) < 0):
            raise AllreduceError(
                f"job {self.config.job_id}: {self.config.name}'s call would start at seq "
                f"{reply.seq}, before the end of its last call ({self.continuation}): the "
                "job's root has lost the progress of earlier calls (the job was re-planned "
                "while its workers were in different calls); the results of this call "
                "could mix different calls' arrays, so it is not run")
        self.highest_sent = seq_add(reply.seq, -1)
        try:
            result, end = self._calls(array, op, is_float, reply)
        except BaseException:
            self._abort()
            raise
        self.continuation = end
        return result

    def _calls(self, array: npt.NDArray[Any], op: Op, is_float: bool,
               reply: SyncReply) -> tuple[AllreduceResult, int]:
        """The call from ``reply``'s start, run again under each new plan, or on hosts."""
        start, on_hosts, replans = reply.seq, reply.on_hosts, 0
        # On hosts, the call's start is known if it came from the root (or from a
        # completed call); a fresh worker's proposal (0) is not.
        known = not reply.on_hosts or self.continuation is not None
        while True:
            try:
                if on_hosts:
                    return self._call_on_hosts(array, op, is_float, start, known)
                return self._call(array, op, is_float, start, self._reduce)
            except PlanChanged as notice:
                self.gen = notice.gen
                if notice.on_hosts:
                    on_hosts, known = True, True
                    LOG.info("job %d: %s: no switch aggregates the job now: the call from "
                             "seq %d runs on hosts", self.config.job_id, self.config.name, start)
                    continue
                replans += 1
                self.stats.replans += 1
                if replans > self.max_replans:
                    raise AllreduceError(
                        f"job {self.config.job_id}: {self.config.name}'s call was re-planned "
                        f"{replans} times (more than {self.max_replans}): the job's plan "
                        "keeps changing (switches or links failing and coming back?)"
                        ) from None
                LOG.info("job %d: %s: the job was planned anew (gen %d): the call runs "
                         "again from seq %d", self.config.job_id, self.config.name,
                         notice.gen, start)
                again = self._start(start)
                if again.on_hosts:
                    on_hosts = True
                    LOG.info("job %d: %s: no switch aggregates the job now: the call from "
                             "seq %d runs on hosts", self.config.job_id, self.config.name, start)
                elif again.seq != start:
                    raise AllreduceError(
                        f"job {self.config.job_id}: {self.config.name}'s call (from seq "
                        f"{start}) cannot run again after the job was re-planned: the root "
                        f"starts calls at seq {again.seq} now, so other workers had already "
                        "finished this call when the job was re-planned (a limit: a call "
                        "survives a re-plan only if no worker has finished it)") from None

    def _call(self, array: npt.NDArray[Any], op: Op, is_float: bool, seq: int,
              reduce: Reduce) -> tuple[AllreduceResult, int]:
        """The call from ``seq`` with ``reduce``: the result and the sequence number
        after the call's last."""
        descriptor = CallDescriptor(int(array.size), KIND_FLOAT if is_float else KIND_INT,
                                    int(op))
        agreed = reduce(descriptor.values(), Op.MAX, seq, "agreeing on the call")
        problems = CallDescriptor.disagreement(agreed.values)
        if problems:
            raise CallMismatch(
                f"job {self.config.job_id}: the workers do not make the same call: "
                + "; ".join(problems) + " (every worker must call allreduce with the same "
                "array length, kind and op, in the same order)")
        seq = seq_add(seq, agreed.packets)
        if not is_float:
            r = reduce(array, op, seq, "reducing")
            return r, seq_add(seq, r.packets)
        x = array.astype(np.float32)
        e = reduce(quantize.block_exponents(x), Op.MAX, seq, "agreeing on exponents")
        n = self.config.workers
        seq = seq_add(seq, e.packets)
        r = reduce(quantize.quantize(x, e.values, op, n), op, seq, "reducing")
        result = quantize.dequantize(r.values, e.values, op, n)
        return AllreduceResult(result, r.overflow, e.packets + r.packets,
                               e.retransmissions + r.retransmissions,
                               quantize.bound(result, e.values, op, n),
                               on_hosts=r.on_hosts), seq_add(seq, r.packets)

    # --- the call on hosts -----------------------------------------------------------

    def _call_on_hosts(self, array: npt.NDArray[Any], op: Op, is_float: bool, start: int,
                       known: bool) -> tuple[AllreduceResult, int]:
        """The call on a ring of TCP connections among the job's workers. They first
        agree on the call's start (those that know it), so that workers in different
        calls fail rather than mix their arrays."""
        c = self.config
        if not c.addresses:
            raise AllreduceError(f"job {c.job_id}: no switch aggregates the job and "
                                 f"{c.name} does not know its peers' addresses to reduce "
                                 "on hosts")
        self.stats.on_hosts += 1
        peers = ", ".join(c.peers) or "every worker"
        ring = Ring(c.rank, [c.ring_address(r) for r in range(len(c.addresses))],
                    self.timeout, tag=c.job_id, secret=c.ring_secret)
        try:
            ring.open()
        except RingError as exc:
            raise AllreduceError(f"job {c.job_id}: {c.name} could not join the ring on "
                                 f"hosts: {exc}") from exc
        except OSError as exc:
            raise AllreduceTimeout(
                f"job {c.job_id}: {c.name} could not join the ring on hosts (port "
                f"{c.ring_address(c.rank)[1]}): {exc}; is every worker of the job "
                f"({peers}) in this call? (a limit: a worker that finished the call on "
                "switches before the job moved to hosts does not join)") from exc
        finally:
            self.stats.ring_refused += len(ring.refused)
            for why in ring.refused:
                LOG.warning("job %d: %s: the ring on hosts refused a connection (%s)",
                            c.job_id, c.name, why)
        try:
            def reduce(values: npt.NDArray[Any], op: Op, seq: int,
                       phase: str) -> AllreduceResult:
                try:
                    reduced, overflow = ring.allreduce(values, op)
                except RingError as exc:
                    raise AllreduceError(f"job {c.job_id}: {c.name}: the ring on hosts "
                                         f"broke off while {phase}: {exc}") from exc
                except OSError as exc:
                    raise AllreduceTimeout(
                        f"job {c.job_id}: {c.name} lost the ring on hosts while {phase}: "
                        f"{exc}; is every worker of the job ({peers}) still running?"
                        ) from exc
                return AllreduceResult(reduced, overflow, _chunks(values.size), on_hosts=True)

            start = self._agree_on_start(reduce, start, known)
            return self._call(array, op, is_float, start, reduce)
        finally:
            ring.close()

    def _agree_on_start(self, reduce: Reduce, start: int, known: bool) -> int:
        """The call's start, agreed among the ring's workers with MAX: the highest and
        lowest start known (each 32-bit number in two 16-bit halves); a worker that
        does not know it (a fresh one) takes the others'."""
        halves = (start >> 16, start & 0xFFFF)
        mine = [v for h in halves for v in (h, -h)] if known else [INT32_MIN + 1] * 4
        got = reduce(np.array([*mine, int(known)], dtype=np.int32), Op.MAX, start,
                     "agreeing on the call's start").values
        if not got[4]:
            return start  # no worker knows: all fresh, all proposed 0
        high = (int(got[0]) << 16) | int(got[2])
        low = ((-int(got[1])) << 16) | -int(got[3])
        if high != low:
            raise AllreduceError(
                f"job {self.config.job_id}: the workers on hosts are in different calls "
                f"(starting at seq {low} and {high}): some finished a call on switches "
                "before the job moved to hosts, others did not (a limit: those cannot "
                "redo it together)")
        return high

    # --- the call on switches --------------------------------------------------------

    def _start(self, proposal: int | None = None) -> SyncReply:
        """The call's start from the job's root (``_sync``), its time counted."""
        began = time.monotonic()
        try:
            return self._sync(proposal)
        finally:
            self.stats.spent("starting", time.monotonic() - began)

    def _sync(self, proposal: int | None) -> SyncReply:
        """Ask the job's root for the call's first sequence number (SYNC), proposing
        ``proposal`` (default: the continuation, or 0); learn the plan's generation
        from the answer."""
        if proposal is None:
            proposal = 0 if self.continuation is None else self.continuation
        nonce = secrets.randbits(16)
        payload = sync_request(self.config, nonce, proposal, self.gen)
        started = time.monotonic()
        tries = 0
        while True:
            now = time.monotonic()
            if now - started > self.timeout:
                raise AllreduceTimeout(
                    f"job {self.config.job_id}: {self.config.name} got no answer from the "
                    f"job's root (through {self.config.sync_target}) to the start of the "
                    f"call within {self.timeout:g}s ({tries} requests sent): is the job "
                    "deployed, and its root reachable?")
            self.transport.send(payload, self.config.sync_target)
            sent = time.monotonic()
            self.stats.syncs += 1
            # The root answers at once, whatever the other workers do: a short wait,
            # doubled on each retry.
            wait = min(max(self.rto.floor, SYNC_RTO * (1 << min(tries, MAX_BACKOFF_DOUBLINGS))),
                       self.rto.ceiling, started + self.timeout - now)
            tries += 1
            deadline = sent + max(wait, 0.0)
            while (left := deadline - time.monotonic()) > 0:
                received = self.transport.recv(left)
                if received is None:
                    break
                reply = sync_reply(received, self.config, nonce)
                if reply is None:
                    continue
                self.gen = reply.gen
                if reply.on_hosts:
                    LOG.info("job %d: %s: no switch aggregates the job: the call runs on "
                             "hosts", self.config.job_id, self.config.name)
                    return reply
                # A header alone through idle queues: no round-trip sample for the
                # array's packets, but a better first RTO than the default.
                if tries == 1 and self.rto.srtt is None:
                    self.rto.initial = min(DEFAULT_RTO, max(
                        self.rto.floor, SYNC_RTT_FACTOR * (time.monotonic() - sent)))
                LOG.debug("job %d: call starts at seq %d (gen %d)", self.config.job_id,
                          reply.seq, reply.gen)
                return reply

    def _abort(self) -> None:
        """Tell the root this call is given up, and the highest sequence number sent
        in it, so that the next call starts past what this one left in the cells.
        Nothing answers: sent a few times, in case one is lost."""
        si, bits = one_set(self.config.pbm)
        payload = InaHeader(job_id=self.config.job_id, seq=self.highest_sent, pbm=bits,
                            count=0, op=self.config.op, flags=Flag.SYNC | Flag.ABORT,
                            si=si, gen=self.gen).pack()
        for _ in range(ABORT_COPIES):
            try:
                self.transport.send(payload, self.config.sync_target)
            except OSError as exc:  # the call failed already; say why, not this
                LOG.debug("could not send the call's ABORT: %s", exc)
                return

    def _reduce(self, values: npt.NDArray[Any], op: Op, seq_base: int,
                phase: str) -> AllreduceResult:
        """One reduction in the network; PlanChanged if the edge switch turns a
        contribution back with news."""
        window = ReductionWindow(self.config, values, seq_base, self.rto, op, self.gen)
        last_progress = began = time.monotonic()
        give_up_at = last_progress + self.timeout
        try:
            while not window.done:
                now = time.monotonic()
                for payload in window.packets_to_send(now):
                    self.transport.send(payload)
                if now > give_up_at:
                    why = (self.patience(now - last_progress) if self.patience is not None
                           else "")
                    if why is not None:
                        raise AllreduceTimeout(self._stalled(window, phase, why))
                    give_up_at = now + PATIENCE_RECHECK
                wake = give_up_at
                timer = window.next_timer()
                if timer is not None:
                    wake = min(wake, timer)
                received = self.transport.recv(wake - now)
                while received is not None:
                    # Only a notice has SYNC set among what a window receives.
                    notice = notice_of(received, self.config) \
                        if len(received) > 1 and received[1] & Flag.SYNC else None
                    if notice is not None:
                        self._heed(notice, window)
                    elif window.accept(received, time.monotonic()):
                        last_progress = time.monotonic()
                        give_up_at = last_progress + self.timeout
                        if self.progress is not None and phase == "reducing":
                            self.progress(window.results, window.chunks)
                    received = self.transport.recv(0.0)
        finally:
            # What the call's ABORT must cover, if it comes to one (``_abort``).
            if window.next and seq_diff(window.seq_of(window.next - 1),
                                         self.highest_sent) > 0:
                self.highest_sent = window.seq_of(window.next - 1)
            self.stats.spent(phase, time.monotonic() - began)
            self.stats.packets += window.next
            self.stats.retransmissions += window.retransmissions
            self.stats.early_retransmissions += window.early_retransmissions
        return window.outcome()

    def _heed(self, notice: Notice, window: ReductionWindow) -> None:
        """A contribution turned back: act on news, ignore what is known already (a
        late notice of a packet sent before the worker learned the new plan)."""
        if notice.on_hosts:
            chunk = seq_add(notice.seq, -window.seq_base)
            if chunk < window.next:  # of this reduction (not a late one of another)
                raise PlanChanged(notice.gen, on_hosts=True)
        elif notice.gen != self.gen:
            raise PlanChanged(notice.gen)

    def _stalled(self, window: ReductionWindow, phase: str, why: str = "") -> str:
        missing = window.missing()
        peers = ", ".join(self.config.peers) or "every worker"
        what = (f"job {self.config.job_id}: {self.config.name} got no result within "
                f"{self.timeout:g}s while {phase}: {len(missing)} of {window.chunks} "
                f"packets unanswered (seq {missing[0]}"
                + (f"..{missing[-1]}" if len(missing) > 1 else "")
                + f"), {window.results} answered, {window.retransmissions} retransmissions")
        if why:
            return f"{what}; {why}"
        if window.results == 0 and phase == "agreeing on the call":
            return (what + f"; the call did not start: not every worker of the job ({peers}) "
                    "has started this call (one stopped, or is still in an earlier one?)")
        return what + f"; is every worker of the job ({peers}) still running?"


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
        return Worker(config, transport, timeout=timeout, rto=RtoEstimator(initial=rto),
                      progress=progress).allreduce(values, op)
