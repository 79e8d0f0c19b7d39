"""The window of one reduction (``ReductionWindow``): the protocol logic that sends
an integer array through the network and collects its result, without any I/O.

A sliding window of ``window`` packets (the job's slots), of which the congestion
window (ina.host.congestion) lets ``allowed`` be outstanding (at most half: the rest
is room to send while a lost packet is recovered), paced over a round trip;
retransmission after an adaptive timeout (``RtoEstimator``, from measured round
trips) and early retransmission of a packet whose result is missing while
DUPLICATE_RESULTS results of packets sent after it have arrived. A call
(ina.host.call) drives one window per reduction over a ``Transport``
(ina.host.transport).

A window may lead with one more chunk (``lead``): a call's descriptor, reduced with
MAX in 32-bit elements whatever the reduction's op and width, so that the workers
agree on the call in the same round trips as its first reduction (ina.host.call).

Every collective is such reductions: per chunk, the window contributes the
worker's data or only its bit (NODATA), and expects back the chunk's data or a
completion (the header alone), as the reduction's ``Flow`` says (ina.host.flow);
it retransmits each chunk as it first sent it, after a QUERY where its values are
in it (see ``ReductionWindow``). A chunk with an owner (a
Broadcast's, an Allgather's) travels once from its owner (OP_COPY), and its round
is NODATA from every worker that holds it.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.errors import AllreduceError, InputTypeError, UsageError
from ina.host.config import WorkerConfig
from ina.host.congestion import RECENT_SAMPLES, CongestionWindow
from ina.host.flow import Flow, elems_per_packet
from ina.host.results import AllreduceResult, Lead
from ina.protocol.arith import INT16_MAX, INT16_MIN, INT32_MAX, INT32_MIN, SEQ_MODULO, seq_add
from ina.protocol.bitmaps import one_set
from ina.protocol.codec import InaHeader
from ina.protocol.constants import (
    ARRAY_BYTES,
    ECN_CE,
    ELEMS_PER_PACKET,
    INA_HEADER_BYTES,
    OP_COPY,
    QUERY,
    WIDTH16,
    WIDTH32,
    Flag,
    Op,
    QueryVerdict,
)

LOG = logging.getLogger(__name__)
#: The fields of the INA header a worker reads: flags, job_id, seq, count.
RESULT_FIELDS = struct.Struct("!xBHIH")
#: The fields of the INA header a window writes per chunk (after the first byte):
#: flags; and from byte 4: seq, count; from byte 12: dest; the width's byte; the
#: congestion marks' byte (ecn), which the window reads in results.
_FLAGS, _SEQ, _COUNT, _DEST, _WIDTH, _ECN = 1, 4, 8, 12, 14, 15
_U32 = struct.Struct("!I")
#: The header's flags as plain ints: tested on every result (an IntFlag's ``&`` is a
#: Python call each).
_RESULT, _NODATA, _OVERFLOW = int(Flag.RESULT), int(Flag.NODATA), int(Flag.OVERFLOW)
_QUERY, _REPLY = int(QUERY), int(Flag.REPLY)
#: A QUERY's answer: QUERY | REPLY and none of these (a notice: ina.host.call).
_NOT_ANSWER = int(Flag.REPLAN | Flag.ON_HOSTS | Flag.ABORT | Flag.RESULT)
#: Where a retransmission of a chunk stands (``_Outstanding.query``): values not asked
#: about (the next copy is a QUERY), a QUERY unanswered (the next copy is the values),
#: its answer SEND (the values go next).
ASK, ASKED, TOLD_TO_SEND = 0, 1, 2
#: The wire's element type of each width (big-endian).
WIRE_TYPES = {WIDTH32: ">i4", WIDTH16: ">i2"}
#: The type of a reduction's result of each width.
RESULT_TYPES: dict[int, type[np.signedinteger[Any]]] = {WIDTH32: np.int32, WIDTH16: np.int16}
#: Seconds before an unanswered packet is first sent again, until round trips are measured.
DEFAULT_RTO = 0.2
#: Bounds of the adaptive retransmission timeout (seconds). The cap bounds a
#: feedback: a result's round trip includes the other workers' loss recovery, which
#: waits for their RTO. Queues stay far shorter than it (ina.host.congestion).
MIN_RTO = 0.005
MAX_RTO = 1.0
#: Results of packets sent later that make a missing result count as lost.
DUPLICATE_RESULTS = 3
#: Timeouts double the RTO up to this many times (and never beyond its cap) until a
#: new result arrives.
MAX_BACKOFF_DOUBLINGS = 2
#: A chunk probed again waits up to 2**this probe intervals.
MAX_PROBE_DOUBLINGS = 3
#: A round-trip sample counts for at most this many smoothed round trips: a result
#: may also wait for another worker's loss recovery (an outlier), while a lasting rise
#: still gets through, growing the estimate by up to this factor every few samples.
RTT_CLIP = 2.0
#: The most values a window's lead chunk carries (one packet of int32).
MAX_LEAD = ELEMS_PER_PACKET


@dataclass
class RtoEstimator:
    """The retransmission timeout from measured round trips (RFC 6298's smoothed
    round trip and its variation, Karn's rule: only packets sent once are
    measured), between ``floor`` and ``cap``. A round trip here runs from a
    contribution to its result, so it includes waiting for the other workers; the
    window measures only packets sent once every worker had joined the reduction."""

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
            rtt = min(rtt, RTT_CLIP * self.srtt)
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def progress(self) -> None:
        """A new result arrived: the path works, undo the backoff."""
        self.backoff = 0

    def bound(self, rtt: float) -> None:
        """A round trip took ``rtt`` at most (the result of a packet sent more than
        once, since its first send): until a round trip is measured, the RTO's guess
        (from the SYNC's round trip through idle queues) is at least that. Else a
        guess far below the path's round trip has every packet sent again before
        its result, and Karn's rule measures none of them: on Figure 1 with links
        at 1 Mbit/s a worker whose guess was 5 ms sent its window again and again
        for the whole call (1,330 copies of 301 packets, the call 2.8x its links'
        time)."""
        if self.srtt is None:
            self.initial = max(self.initial, min(self.ceiling, rtt))

    def timed_out(self, now: float) -> None:
        """A packet's timer expired: back off (RFC 6298 5.5), once per RTO, since a
        window of packets sent together times out together. Karn's rule keeps the
        round trips of packets sent again out of the samples, so without this an
        RTO that is too short would never grow."""
        if now - self.backed_off_at >= self.rto:
            self.backed_off_at = now
            self.backoff = min(self.backoff + 1, MAX_BACKOFF_DOUBLINGS)

    def probe(self, queued: bool = False) -> float | None:
        """How long to wait for the oldest result when nothing else is in flight
        to reveal its loss: twice the least of the last RECENT_SAMPLES round
        trips, or twice their median while the path ``queued`` (the newest result
        carried a congestion mark). Not the smoothed one, nor the median on a path
        that does not queue: others' losses lengthen many round trips (a result
        waits for every worker's contribution; under 5% loss per link the smoothed
        round trip grew to a second, and so did every recovery, and the round trips
        with it; probes at twice the median stalled a call at a result a second).
        Not the least of a long history either: a queue lengthens every round
        trip, and a probe at twice a round trip from before it sent hundreds of
        copies into the queue (the 29 s steps of the rate-limited fat-tree). Nor
        the least where the path queues: a packet that finds a rate-limited path
        idle crosses it in a burst, far sooner than one behind others (on Figure 1
        at 1 Mbit/s, round trips of 5 to 80 ms), and probes at twice the quickest
        sent 200 to 480 copies of a 301-packet call into the queue, which the call
        then waited for (18-21 s where its links allow 8.4)."""
        if not self.recent:
            return None
        typical = sorted(self.recent)[len(self.recent) // 2] if queued else min(self.recent)
        return min(self.ceiling, max(self.floor, 2 * typical))

    @property
    def ceiling(self) -> float:
        return max(self.cap, self.floor)

    @property
    def rto(self) -> float:
        base = self.initial if self.srtt is None else self.srtt + 4 * self.rttvar
        floor = self.floor  # the ceiling inlined: read for every packet sent and answered
        return min(max(self.cap, floor), max(floor, base * (1 << self.backoff)))


@dataclass(slots=True)
class _Outstanding:
    sent_at: float  # last transmission
    deadline: float  # when it counts as lost, if it is the oldest one outstanding
    order: int  # position of the last transmission among all of the window's
    sample: bool  # its round trip measures the path: sent once every worker had joined
    tries: int = 1
    later: int = 0  # results of packets sent after this one's last transmission
    first: float = 0.0  # first transmission
    query: int = ASK  # what its next retransmission is (ASK, ASKED, TOLD_TO_SEND)

    def sent_again(self, now: float, order: int, deadline: float, query: int) -> None:
        """It went again (its values or its QUERY) at ``now``, as send ``order``."""
        self.tries, self.sent_at, self.deadline, self.order, self.later = \
            self.tries + 1, now, deadline, order, 0
        self.query = query


def check_ints(values: npt.ArrayLike, width: int = WIDTH32) -> npt.NDArray[Any]:
    """``values`` as an array the data plane can reduce in elements of ``width``
    bits, or ValueError/TypeError."""
    array = np.asarray(values)
    if array.ndim != 1 or array.size == 0:
        raise UsageError("allreduce takes a non-empty one-dimensional array")
    if not np.issubdtype(array.dtype, np.integer):
        raise InputTypeError(f"allreduce takes integers, got {array.dtype}")
    problem = int_range_problem(array, width)
    if problem is not None:
        raise UsageError(problem)
    return array


def int_range_problem(array: npt.NDArray[np.integer], width: int) -> str | None:
    """What is wrong with an integer ``array`` for elements of ``width`` bits: the
    first value beyond their signed range; None if every one fits."""
    wire = RESULT_TYPES.get(width, np.int32)
    low, high = (INT16_MIN, INT16_MAX) if wire is np.int16 else (INT32_MIN, INT32_MAX)
    # Scanned only when the type can hold more: a call checks its array more than once.
    if np.can_cast(array.dtype, wire):
        return None
    beyond = np.flatnonzero((array < low) | (array > high))
    if beyond.size == 0:
        return None
    i = int(beyond[0])
    return (f"values must fit in signed {width} bits: {int(array[i])} at index {i} does not"
            + (f" ({beyond.size} values do not)" if beyond.size > 1 else ""))


def _chunk_counts(flow: Flow, size: int, per_packet: int) -> npt.NDArray[np.int64]:
    """Per chunk, the values it carries of an array of ``size``: as ``flow`` says, or
    every chunk full but the last; ValueError if the array does not fill them so."""
    if size == 0:  # a lead alone
        return np.zeros(0, dtype=np.int64)
    if flow.counts is None:
        chunks = -(-size // per_packet)
        counts = np.full(chunks, per_packet, dtype=np.int64)
        counts[-1] = size - (chunks - 1) * per_packet
        return counts
    chunks = len(flow.counts)
    counts = np.asarray(flow.counts, dtype=np.int64)
    ends = np.arange(chunks) * per_packet + counts
    if chunks == 0 or ends.max() > size or size > chunks * per_packet:
        raise UsageError(f"{size} values do not fill the flow's {chunks} chunks as their "
                         "counts say")
    return counts


def _chunk_packets(head: bytes, array: npt.NDArray[Any], width: int, first_seq: int,
                   counts: npt.NDArray[np.int64], sends: npt.NDArray[np.bool_],
                   dests: npt.NDArray[np.int64], flags: int = int(Flag.NONE)
                   ) -> tuple[memoryview, list[int]]:
    """Every chunk's packet at once, chunk ``j`` at ``j * (INA_HEADER_BYTES +
    ARRAY_BYTES)``: ``head`` with the chunk's seq (``first_seq + j``), count and
    dest, and its slice of ``array`` on the wire (elements of ``width`` bits, the
    last chunk padded with zeros), with ``flags``; or, where it ``sends`` no data,
    the header alone with NODATA. Also each packet's length."""
    chunks = len(counts)
    if chunks == 0:  # a lead alone
        return memoryview(b""), []
    packets = np.zeros((chunks, INA_HEADER_BYTES + ARRAY_BYTES), dtype=np.uint8)
    packets[:, :INA_HEADER_BYTES] = np.frombuffer(head, dtype=np.uint8)
    data = packets[:, INA_HEADER_BYTES:].view(WIRE_TYPES[width])  # a row per chunk
    per_packet = data.shape[1]
    full = array.size // per_packet
    data[:full] = array[: full * per_packet].reshape(full, per_packet)
    if full < chunks:
        data[full, : array.size - full * per_packet] = array[full * per_packet:]
    seqs = (first_seq + np.arange(chunks, dtype=np.int64)) % SEQ_MODULO
    packets[:, _SEQ: _SEQ + 4] = seqs.astype(">u4").view(np.uint8).reshape(chunks, 4)
    packets[:, _COUNT: _COUNT + 2] = counts.astype(">u2").view(np.uint8).reshape(chunks, 2)
    packets[:, _DEST: _DEST + 2] = dests.astype(">u2").view(np.uint8).reshape(chunks, 2)
    packets[:, _FLAGS] = np.where(sends, flags, _NODATA)
    lengths = np.where(sends, INA_HEADER_BYTES + ARRAY_BYTES, INA_HEADER_BYTES)
    return packets.data.cast("B"), lengths.tolist()  # a view: no copy of the whole


def _owned(config: WorkerConfig, flow: Flow, array: npt.NDArray[Any],
           counts: npt.NDArray[np.int64], first_seq: int, gen: int, offset: int
           ) -> tuple[bytearray, bytearray, memoryview]:
    """Per chunk of a window (``offset`` leading ones first): whether the worker
    holds what it contributes (everything, unless ``flow`` has owners: only its own
    values), whether the values are its own to send (OP_COPY); and those packets,
    at the offsets of ``_chunk_packets``."""
    chunks = len(counts)
    held = bytearray(b"\x01" * (chunks + offset))
    owns = bytearray(chunks + offset)
    if flow.owners is None:
        return held, owns, memoryview(b"")
    mine = np.asarray(flow.owners, dtype=np.int64) == config.pbm.bit_length()
    owns[offset:] = held[offset:] = mine.astype(np.uint8).tobytes()
    if not mine.any():
        return held, owns, memoryview(b"")
    si, bits = one_set(config.pbm)
    head = InaHeader(job_id=config.job_id, seq=0, pbm=bits, count=elems_per_packet(WIDTH32),
                     op=OP_COPY, si=si, gen=gen, width=WIDTH32).pack()
    packets, _ = _chunk_packets(head, array, WIDTH32, first_seq, counts,
                                np.ones(chunks, dtype=bool), np.zeros(chunks, dtype=np.int64),
                                int(Flag.RESULT))
    return held, owns, packets


def _lead_packet(config: WorkerConfig, lead: Lead, gen: int) -> bytes:
    """The lead chunk's packet (its seq written when sent): MAX in 32-bit elements,
    counting MAX_LEAD values, the lead's first."""
    values = check_ints(lead.values)
    if values.size > MAX_LEAD:
        raise UsageError(f"a lead chunk carries at most {MAX_LEAD} values")
    wire = np.zeros(ELEMS_PER_PACKET, dtype=WIRE_TYPES[WIDTH32])
    wire[: values.size] = values
    si, bits = one_set(config.pbm)
    return InaHeader(job_id=config.job_id, seq=0, pbm=bits, count=MAX_LEAD, op=Op.MAX,
                     si=si, gen=gen, width=WIDTH32).pack() + wire.tobytes()


@dataclass(frozen=True)
class ChunkPlan:
    """What a reduction sends and expects, chunk by chunk, fixed before its first send
    (``plan_chunks``); the window (``ReductionWindow``) holds what moves. Per-chunk
    lists are indexed by the window's chunk: the lead's first, if there is one."""

    config: WorkerConfig
    op: Op
    width: int
    per_packet: int  # elements to a packet of the width
    size: int  # the array's elements
    flow: Flow
    bfr_id: int
    lead: Lead | None
    lead_payload: bytes  # the lead chunk's packet, b"" without a lead
    offset: int  # the array's first chunk (1 with a lead)
    chunks: int  # the lead's and the array's
    seq_base: int
    counts: list[int]  # meaningful values per chunk
    sends_data: list[bool]  # this worker sends its values (else NODATA)
    gets_data: list[bool]  # it gets the chunk's data back (else a completion)
    dests: list[int]  # the chunk's dest: 0 (every worker) or a BFR-id
    #: Per chunk: whether the worker holds what it contributes at first (it learns
    #: the rest as owners' values arrive: the window's ``held``), owns its values.
    held: bytes
    owns: bytes
    owners: bool  # the flow has owners: values travel apart, by OP_COPY
    owned_payloads: memoryview  # this worker's OP_COPY packets, at ``stride`` apart
    #: Every chunk's packet, built at once (a chunk is sent again as it was first
    #: sent): sending one is a slice, no per-packet header work.
    packets: memoryview
    lengths: list[int]
    stride: int = INA_HEADER_BYTES + ARRAY_BYTES

    @property
    def job_id(self) -> int:
        return self.config.job_id

    @property
    def itemsize(self) -> int:
        return ARRAY_BYTES // self.per_packet


def plan_chunks(config: WorkerConfig, values: npt.ArrayLike, seq_base: int = 0,
                op: Op | None = None, gen: int = 0, flow: Flow | None = None,
                lead: Lead | None = None) -> ChunkPlan:
    """The plan of one reduction of ``values`` (see ``ReductionWindow``)."""
    flow = Flow() if flow is None else flow
    per_packet = elems_per_packet(flow.width)
    # A window may be its lead alone (a float call's exponents: ina.host.collective).
    array = (np.zeros(0, dtype=np.int32) if lead is not None and np.size(values) == 0
             else check_ints(values, flow.width))
    op = config.op if op is None else op
    counts = _chunk_counts(flow, array.size, per_packet)
    chunks = len(counts)
    flow.check(chunks)
    bfr_id = config.pbm.bit_length()
    si, bits = one_set(config.pbm)
    head = InaHeader(job_id=config.job_id, seq=0, pbm=bits, count=per_packet, op=op, si=si,
                     gen=gen, width=flow.width).pack()
    # Per chunk: whether this worker sends its values (with owners: never, they
    # travel apart), and the chunk's dest.
    sent = (np.zeros(chunks, dtype=bool) if flow.owners is not None
            else np.ones(chunks, dtype=bool) if flow.data is None
            else np.asarray(flow.data, dtype=bool))
    dest = (np.zeros(chunks, dtype=np.int64) if flow.dest is None
            else np.asarray(flow.dest, dtype=np.int64))
    sends, dests = sent.tolist(), dest.tolist()
    gets = flow.received(chunks, bfr_id).tolist()
    offset, lead_payload, all_counts = 0, b"", counts
    if lead is not None:
        lead_payload = _lead_packet(config, lead, gen)
        offset = 1
        all_counts = np.concatenate(([MAX_LEAD], counts))
        sends, gets, dests = [True, *sends], [True, *gets], [0, *dests]
    first_seq = seq_add(seq_base, offset)
    held, owns, owned_payloads = _owned(config, flow, array, counts, first_seq, gen, offset)
    packets, lengths = _chunk_packets(head, array, flow.width, first_seq, counts, sent, dest)
    return ChunkPlan(
        config=config, op=op, width=flow.width, per_packet=per_packet, size=array.size,
        flow=flow, bfr_id=bfr_id, lead=lead, lead_payload=lead_payload, offset=offset,
        chunks=chunks + offset, seq_base=seq_base, counts=all_counts.tolist(),
        sends_data=sends, gets_data=gets, dests=dests, held=bytes(held), owns=bytes(owns),
        owners=flow.owners is not None, owned_payloads=owned_payloads, packets=packets,
        lengths=lengths)


class ReductionWindow:
    """One reduction of one array, without I/O: its ``plan`` (ChunkPlan, fixed at
    the start) and the state that moves as packets go and come.

    Chunk ``j`` (sequence number ``seq_base + j``) is first sent only once the
    result of every chunk before ``j - window + 1`` has arrived: a sliding window,
    as in SwitchML. So when any worker sends chunk ``j``, every worker already has
    the result of chunk ``j - 2 * window``, the last one to use the same copy of
    the same slot, and the switches may overwrite it. Within that, the congestion
    window (``cc``, ina.host.congestion) bounds the chunks outstanding, and sends
    are paced a round trip per congestion window apart (``send_at``); the results'
    congestion marks (the INA header's ECN CE), their round trips and the losses
    move it. Every packet carries ``gen``, the generation of the job's plan the
    worker knows. A chunk is sent again, unchanged, at once when results of
    DUPLICATE_RESULTS chunks sent after it have arrived (it, or a peer's
    contribution to it, was lost), or, if it is the oldest outstanding, when its
    result is ``rto`` late (a timeout doubles the RTO until a round trip is
    measured again, up to its cap), and with it every chunk a later result
    already overtook.

    Queries. When one worker's contribution to a round is lost, every worker's
    result is missing: each would send its values again, where one copy is needed
    (at 4 Mbit/s, 1% loss per link cost a tenth of the rate that way). So a chunk
    whose values this worker sends goes again first as a QUERY (the header alone)
    to the node that holds its bit, which answers HELD (it holds the values, in a
    round waiting for others: wait) or SEND (send them: ``answer``). A QUERY left
    unanswered until the chunk is due again is followed by the values, so a lost
    query or answer costs a round of timers, never the chunk.

    ``flow`` (ina.host.flow) says, per chunk, whether the worker sends its values
    or NODATA, and whether it gets the chunk's data back or a completion (it gets
    the data if the chunk's ``dest`` is 0 or its own BFR-id); and the elements'
    width. Chunk ``j``'s values are ``values[j * E: j * E + count]``, E elements
    to a packet of the width. A chunk is complete when either arrives; the result
    holds the data of the chunks whose data the worker gets (zeros elsewhere).

    ``flow.owners``: a chunk's values come from its owner (OP_COPY, by BIER from
    its edge switch), and every worker contributes NODATA to the chunk once it
    holds them (the owner at once; the others as the values arrive, in order);
    its completion ends it. The owner sends its values again with each
    retransmission. The array holds this worker's values in its own chunks.

    ``lead``: up to MAX_LEAD int32 values sent before the array as one more chunk
    (the window's first: the array's chunk ``j`` is then sequence number
    ``seq_base + 1 + j``), reduced with MAX, data to every worker; its result is
    ``lead_result``, handed to the lead's check as it arrives. The lead's packet
    counts MAX_LEAD values whatever it carries (zeros after its own): leads of
    different lengths (workers that make different calls) then meet in one round,
    where the descriptor at their head shows the mismatch, instead of being dropped
    as a count mismatch until the call times out. With a lead, the
    array may be empty: the window is the lead alone. ``joined``: every
    worker is known to be in the reduction already (not a call's first), so every
    round trip measures the path.
    """

    def __init__(self, config: WorkerConfig, values: npt.ArrayLike, seq_base: int = 0,
                 rto: RtoEstimator | float | None = None, op: Op | None = None,
                 gen: int = 0, flow: Flow | None = None, cc: CongestionWindow | None = None,
                 lead: Lead | None = None, joined: bool = False):
        self.plan = plan = plan_chunks(config, values, seq_base, op, gen, flow, lead)
        self.rto = rto if isinstance(rto, RtoEstimator) else RtoEstimator(
            initial=DEFAULT_RTO if rto is None else rto)
        self.cc = CongestionWindow.for_slots(config.window) if cc is None else cc
        self.lead_result: npt.NDArray[np.int32] | None = (
            None if lead is None else np.zeros(MAX_LEAD, dtype=np.int32))
        # The results' arrays as they came on the wire, converted once in outcome().
        self.result_wire = bytearray((plan.chunks - plan.offset) * ARRAY_BYTES)
        self.held = bytearray(plan.held)  # 1: the worker holds what it contributes
        for chunk in np.flatnonzero(np.frombuffer(plan.owns, dtype=np.uint8)).tolist():
            self._hold(chunk, plan.owned_payloads, self._at(chunk))
        self.received = bytearray(plan.chunks)  # 1: the chunk's result arrived
        self.results = 0
        self.completions = 0  # results without data (NODATA), of chunks sent elsewhere
        self.unexpected = 0  # completions of chunks whose data this worker should get
        self.marked = 0  # results that carried a congestion mark
        self.next = 0  # next chunk to send for the first time
        self.base = 0  # lowest chunk without a result
        self.outstanding: dict[int, _Outstanding] = {}
        self.lost: list[int] = []  # chunks to send again now (early retransmission)
        self.progress_at = 0.0  # when the last new result arrived, or the first send
        self.joined = joined  # every worker is in: round trips measure the path
        self.send_at = float("-inf")  # the pacer's time for the next send
        # Packets sent, sent again, sent again early, of those the probes (_probe_at);
        # QUERYs sent, and their answers HELD (a copy of the values not sent).
        self.sends = self.retransmissions = self.early_retransmissions = self.probes = 0
        self.queries = self.held_answers = 0
        self.queued = self.overflow = False  # a mark on the newest result; an overflow

    @property
    def lead_size(self) -> int:
        """The lead's own values (its packet counts MAX_LEAD, zeros after them)."""
        return 0 if self.plan.lead is None else self.plan.lead.values.size

    def seq_of(self, chunk: int) -> int:
        return seq_add(self.plan.seq_base, chunk)

    @property
    def done(self) -> bool:
        return self.results == self.plan.chunks

    def count_of(self, chunk: int) -> int:
        """Meaningful values in the chunk's packet."""
        return int(self.plan.counts[chunk])

    def _payload(self, chunk: int) -> bytes:
        """Chunk ``chunk``'s packet: its header and its array, or the header alone
        with NODATA, the count, op and width those with data carry."""
        if chunk < self.plan.offset:
            lead = bytearray(self.plan.lead_payload)
            _U32.pack_into(lead, _SEQ, self.seq_of(chunk))
            return bytes(lead)
        lo = self._at(chunk)
        return bytes(self.plan.packets[lo: lo + self.plan.lengths[chunk - self.plan.offset]])

    def _at(self, chunk: int) -> int:
        """Where ``chunk``'s packet lies in ``packets`` (and its owned values' in
        ``owned_payloads``): the array's chunks only, not the lead."""
        return (chunk - self.plan.offset) * self.plan.stride

    def _hold(self, chunk: int, packet: bytes | memoryview, at: int = 0) -> None:
        """Keep the values of ``chunk`` that a packet at ``at`` carries (a result's,
        or an owner's: OP_COPY) as its result's, as they came on the wire."""
        plan = self.plan
        lo, size = (chunk - plan.offset) * ARRAY_BYTES, plan.counts[chunk] * plan.itemsize
        self.result_wire[lo: lo + size] = \
            memoryview(packet)[at + INA_HEADER_BYTES: at + INA_HEADER_BYTES + size]

    def _asks(self, chunk: int) -> bool:
        """Whether ``chunk`` is sent again after a QUERY: its packet carries this
        worker's values (not the lead, nor NODATA, nor a chunk with owners, whose
        packets are headers or travel apart)."""
        return not self.plan.owners and chunk >= self.plan.offset and self.plan.sends_data[chunk]

    def _query(self, chunk: int) -> bytes:
        """``chunk``'s QUERY: its packet's header, flagged QUERY, alone."""
        lo = self._at(chunk)
        header = bytearray(self.plan.packets[lo: lo + INA_HEADER_BYTES])
        header[_FLAGS] |= _QUERY
        return bytes(header)

    def _send(self, chunk: int, now: float, out: list[bytes]) -> None:
        """Send ``chunk`` (again): its packet, after its owned values if they are
        this worker's; or, sent again, its QUERY (``_asks``) unless one is
        unanswered or was answered SEND."""
        state = self.outstanding.get(chunk)
        if state is not None and state.query == ASK and self._asks(chunk):
            state.sent_again(now, self.sends, now + self.rto.rto, ASKED)
            self.queries += 1
            self.sends += 1  # (a header: the pacer lets the values that may follow go)
            out.append(self._query(chunk))
            return
        if self.plan.owns[chunk]:
            lo = self._at(chunk)
            out.append(bytes(self.plan.owned_payloads[lo: lo + self.plan.stride]))
        deadline = now + self.rto.rto
        if self.sends == 0:
            self.progress_at = now  # no result yet: silent since the first send
        if state is None:
            state = self.outstanding[chunk] = _Outstanding(
                now, deadline, self.sends, self.joined or self.results > 0, first=now)
        else:
            state.sent_again(now, self.sends, deadline, ASK)
            self.retransmissions += 1
        self.sends += 1
        self.send_at = self.cc.next_send(self.send_at, now, self.rto.srtt)
        out.append(self._payload(chunk))

    def _room(self) -> bool:
        """The sliding window and the congestion window have room for a new chunk."""
        return (self.next < self.plan.chunks and self.next < self.base + self.plan.config.window
                and len(self.outstanding) < self.cc.allowed)

    def _may_send_new(self) -> bool:
        """The windows let a new chunk go: they have room, and the worker holds what
        it contributes to it (with owners: their values arrived)."""
        return self._room() and self.held[self.next] == 1

    def packets_to_send(self, now: float = 0.0) -> list[bytes]:
        """Retransmissions that are due (early ones first), then the new chunks the
        windows allow, as many as the pacer lets go now. Only the oldest outstanding
        chunk can time out, as in TCP: a window sent in one burst waits in queues,
        and its later packets must not all be sent again when the first is slow;
        losses among them are found by the results that overtake them."""
        out: list[bytes] = []
        while self.lost and now >= self.send_at:
            chunk = self.lost.pop(0)
            if chunk in self.outstanding:
                self.early_retransmissions += 1
                self._send(chunk, now, out)
        if now < self.send_at:
            return out
        oldest = self.outstanding.get(self.base)
        if oldest is not None and oldest.deadline <= now:
            if oldest.sample:
                self.cc.on_timeout(now, self.rto.srtt, now - self.progress_at)
            self.rto.timed_out(now)
            self._send(self.base, now, out)
            self._lost_at_timeout(now)
        elif oldest is not None and self._probe_due(now):
            # Nothing in flight after it can reveal its loss (the window is full,
            # or the array's tail): send it again without waiting for the RTO.
            self.early_retransmissions += 1
            self.probes += 1
            self._send(self.base, now, out)
        # The windows do not move while sending (only results and timeouts move them).
        end = min(self.plan.chunks, self.base + self.plan.config.window)
        allowed, held = self.cc.allowed, self.held
        while (self.next < end and len(self.outstanding) < allowed and now >= self.send_at
               and held[self.next]):
            self._send(self.next, now, out)
            self.next += 1
        return out

    def _lost_at_timeout(self, now: float) -> None:
        """The oldest chunk timed out: every other one that a result of a later send
        overtook is lost too, and goes next (as after TCP's RTO, what the SACKs show
        missing, RFC 6675). Without this a burst that lost many chunks recovered one
        per RTO: 11 lost of 16, 11 RTOs (110 s at a least RTO of 10 s). So does every
        other one last sent an RTO ago or more, which nothing overtook: its QUERY
        goes (a header; its values only if the node lacks them). Without it, a chunk
        whose contribution was lost while an older one of this worker was recovered
        was never sent again (nothing later can complete without it, so nothing
        overtakes it), and every other worker waited for it, HELD, until this
        worker's older chunk came back: up to 100 s on the fat-tree at 10% loss."""
        stale = now - self.rto.rto
        for chunk, state in self.outstanding.items():
            if (not self._found_lost(chunk, state, 1, now) and chunk != self.base
                    and state.sent_at <= stale and chunk not in self.lost):
                self.lost.append(chunk)

    def _probe_at(self) -> float | None:
        """When the window can take no new chunk (it is full, the congestion window
        is, or the array is all sent), when to send the oldest again without
        waiting for its RTO: a probe interval after its last send or the last
        progress, whichever is later. Not while the windows have room and the next
        chunk waits for its owner's values: it goes once they come, and its result
        reveals a loss before it; the oldest's own result waits for the slowest
        worker's copy, which no probe speeds up. (Probing there sent 375 to 547
        copies of every owned Allgather's 409 chunks, NODATA and values, on the
        fat-tree at 2 Mbit/s, where a few are lost.)"""
        oldest = self.outstanding.get(self.base)
        probe = self.rto.probe(self.queued)
        if oldest is None or probe is None or self._room():
            return None
        # Each probe of the same chunk waits twice as long as the one before (up to
        # MAX_PROBE_DOUBLINGS): its result usually waits for another worker's
        # recovery, which more copies of this one do not speed up.
        backoff = 1 << min(oldest.tries - 1, MAX_PROBE_DOUBLINGS)
        return max(self.progress_at, oldest.sent_at) + probe * backoff

    def _probe_due(self, now: float) -> bool:
        at = self._probe_at()
        return at is not None and at <= now

    def next_timer(self) -> float | None:
        """When something is next due: a retransmission, or a send the pacer held
        back; None if nothing is outstanding or waiting."""
        if self.lost or self._may_send_new():
            return max(self.send_at, 0.0)
        oldest = self.outstanding.get(self.base)
        if oldest is None:
            return None
        probe = self._probe_at()
        due = oldest.deadline if probe is None else min(oldest.deadline, probe)
        return max(due, self.send_at)

    def accept(self, payload: bytes, now: float = 0.0) -> bool:
        """Take a received UDP payload; True if it was a new result of this window
        (the chunk's data, or its completion). An owner's values are held (``hold``)."""
        if len(payload) < INA_HEADER_BYTES:
            LOG.debug("ignored a payload that is not INA")
            return False
        flags, job_id, seq, count = RESULT_FIELDS.unpack_from(payload)
        if job_id != self.plan.job_id or not flags & _RESULT:
            return False
        if payload[0] & 0xF == OP_COPY:  # an owner's values, not a round's result
            self.hold(payload)
            return False
        chunk = (seq - self.plan.seq_base) % SEQ_MODULO
        if chunk >= self.next or self.received[chunk]:
            return False  # not ours, or a duplicate
        n = self.plan.counts[chunk]
        if count != n:
            LOG.warning("result for seq %d carries %d values, expected %d", seq, count, n)
            return False
        if not self._take(chunk, flags, payload, n):
            return False
        self.received[chunk] = 1
        self.results += 1
        marked = bool(payload[_ECN] & ECN_CE)
        self.marked += marked
        self.queued = marked
        first = next(iter(self.outstanding), None)  # the earliest sent for the first time
        state = self.outstanding.pop(chunk, None)
        rtt = None
        if state is not None and state.tries == 1:
            # Sent once: the result answers that send (Karn). Then it overtakes
            # whatever was sent before it and is still missing; and its round trip
            # measures the path if every worker had joined when it was sent and no
            # result of a later send overtook it (it waited for another worker's
            # loss recovery: under 5% loss per link such round trips made the RTO,
            # the probe and the delay target grow with the losses, which then took
            # longer to recover: a fifth of the lossless rate).
            if state.sample and state.later == 0:
                rtt = now - state.sent_at
                self.rto.sample(rtt)
            if chunk != first:  # else every other one was sent after it: none overtaken
                self._overtaken(state.order, now)
        elif state is not None and state.sample:
            self.rto.bound(now - state.first)
        # A chunk sent more than once overtakes nothing: its result may answer an
        # earlier send that waited in a queue. (Taking a result a least round trip
        # after the last send as its answer, as RACK does, was tried: on the fat-tree
        # with links unlimited, CPU-bound queues made it send hundreds of copies a
        # call where 2 to 9 are lost.)
        self.cc.on_result(now, marked, rtt, self.rto.srtt)
        self.progress_at = now
        self.rto.progress()
        if chunk == self.base:
            while self.base < self.plan.chunks and self.received[self.base]:
                self.base += 1
            # Progress: the new oldest gets a full RTO from now (RFC 6298 5.3), as
            # it may have waited in queues behind the ones just answered.
            oldest = self.outstanding.get(self.base)
            if oldest is not None:
                oldest.deadline = max(oldest.deadline, now + self.rto.rto)
        return True

    def answer(self, payload: bytes, now: float = 0.0) -> bool:
        """Take the answer to a QUERY of this window's (QUERY | REPLY, the verdict in
        ``count``): HELD, the chunk waits a full RTO more from now; SEND, its values
        go next. True if it was one (answering an unanswered QUERY or not)."""
        if len(payload) < INA_HEADER_BYTES:
            return False
        flags, job_id, seq, verdict = RESULT_FIELDS.unpack_from(payload)
        if (job_id != self.plan.job_id or flags & (_QUERY | _REPLY) != _QUERY | _REPLY
                or flags & _NOT_ANSWER):
            return False
        chunk = (seq - self.plan.seq_base) % SEQ_MODULO
        state = self.outstanding.get(chunk) if chunk < self.next else None
        if state is None or state.query != ASKED:
            return True  # late: its chunk is done, or sent again since
        if verdict == QueryVerdict.HELD:
            self.held_answers += 1
            state.query, state.sent_at, state.order, state.later = ASK, now, self.sends, 0
            state.deadline = max(state.deadline, now + self.rto.rto)
        else:
            state.query = TOLD_TO_SEND
            if chunk not in self.lost:
                self.lost.append(chunk)
        return True

    def hold(self, payload: bytes) -> bool:
        """Take an owner's values (an OP_COPY packet) for a chunk of this window with
        owners: held, its NODATA goes with the next sends. False if the packet is
        of no chunk of this window (a later window's, early: the caller may keep
        it); True if it is (new, a copy of what is held, or refused: malformed)."""
        if len(payload) < INA_HEADER_BYTES or not self.plan.owners:
            return False
        flags, job_id, seq, count = RESULT_FIELDS.unpack_from(payload)
        chunk = (seq - self.plan.seq_base) % SEQ_MODULO
        if job_id != self.plan.job_id or not flags & _RESULT or chunk >= self.plan.chunks:
            return False
        if self.held[chunk]:
            return True  # a copy (the owner sent it again)
        if (count != self.plan.counts[chunk] or payload[_WIDTH] != WIDTH32
                or len(payload) < INA_HEADER_BYTES + ARRAY_BYTES):
            LOG.warning("an owner's values for seq %d are not a whole array of %d values",
                        seq, self.plan.counts[chunk])
            return True
        self._hold(chunk, payload)
        self.held[chunk] = 1
        if payload[_ECN] & ECN_CE:
            # The copy met a congested queue on its way here: the chunk's NODATA
            # carries the mark into its round, whose completion then tells every
            # worker, its owner too, as a result carries its contributions' marks
            # (and TCP's ECE a CE). Else no owner learns of the queues its copies
            # meet: nothing answers a copy itself.
            at = self._at(chunk) + _ECN
            self.plan.packets[at] = self.plan.packets[at] | ECN_CE
        return True

    def _overtaken(self, order: int, now: float) -> None:
        """A result of the send ``order`` arrived: each chunk sent before it and
        still missing has one more later result; at DUPLICATE_RESULTS, it is lost."""
        for other_chunk, other in self.outstanding.items():
            if other.order < order:
                other.later += 1
                if self._found_lost(other_chunk, other, DUPLICATE_RESULTS, now):
                    self.cc.on_loss(now, self.rto.srtt)

    def _found_lost(self, chunk: int, state: _Outstanding, overtaken: int, now: float) -> bool:
        """Queue ``chunk`` to be sent again if results of later sends overtook it
        ``overtaken`` times or more; True if it was queued now. No copy sooner than the
        least RTO after the last: results of a call's first rounds overtake each other
        by a few milliseconds (a round waits for its slowest worker), and with a least
        RTO of seconds nothing at all is sent twice."""
        if (state.later >= overtaken and chunk not in self.lost
                and now - state.sent_at >= self.rto.floor):
            self.lost.append(chunk)
            return True
        return False

    def _take(self, chunk: int, flags: int, payload: bytes, n: int) -> bool:
        """Keep what the result of ``chunk`` brings (its values, if they are this
        worker's); False if it cannot end the chunk."""
        if flags & _NODATA:
            if self.plan.gets_data[chunk]:
                # Its data is this worker's: a completion cannot end the chunk.
                self.unexpected += 1
                LOG.debug("completion of seq %d, whose data is ours: ignored",
                          self.seq_of(chunk))
                return False
            self.completions += 1
            return True
        width = WIDTH32 if chunk < self.plan.offset else self.plan.width
        if len(payload) < INA_HEADER_BYTES + ARRAY_BYTES or payload[_WIDTH] != width:
            LOG.warning("result for seq %d is not a whole array of width %d",
                        self.seq_of(chunk), width)
            return False
        if chunk < self.plan.offset:
            assert self.plan.lead is not None and self.lead_result is not None
            self.lead_result[:] = np.frombuffer(payload, dtype=WIRE_TYPES[WIDTH32], count=n,
                                                offset=INA_HEADER_BYTES)
            self.plan.lead.check(self.lead_result[: self.lead_size])
        elif self.plan.gets_data[chunk]:
            self._hold(chunk, payload)  # n == counts[chunk]: accept checked it
            self.overflow |= bool(flags & _OVERFLOW)
        return True

    def missing(self) -> list[int]:
        return [self.seq_of(c) for c in range(self.plan.chunks) if not self.received[c]]

    @property
    def result(self) -> npt.NDArray[Any]:
        """The reduction's values so far (zeros where no data came)."""
        return np.frombuffer(self.result_wire, dtype=WIRE_TYPES[self.plan.width],
                             count=self.plan.size).astype(RESULT_TYPES[self.plan.width])

    def outcome(self) -> AllreduceResult:
        if not self.done:
            raise AllreduceError(f"{len(self.missing())} of {self.plan.chunks} results missing")
        return AllreduceResult(self.result, self.overflow, self.plan.chunks,
                               self.retransmissions,
                               lead=None if self.lead_result is None
                               else self.lead_result[: self.lead_size].copy())
