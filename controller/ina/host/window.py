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

The per-packet path is compiled (ina.host._window, C, built as the package
installs): the window's state, its timers, the RTO estimator and the congestion
controller's arithmetic. What happens once per reduction stays here: the plan of its
chunks (``plan_chunks``), the lead's check, the result's conversion.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.errors import AllreduceError, InputTypeError, UsageError
from ina.host import _window
from ina.host.config import WorkerConfig
from ina.host.congestion import CongestionWindow
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
#: The header's flags as plain ints: tested on every result (an IntFlag's ``&`` is a
#: Python call each).
_RESULT, _NODATA, _OVERFLOW = int(Flag.RESULT), int(Flag.NODATA), int(Flag.OVERFLOW)
_QUERY, _REPLY = int(QUERY), int(Flag.REPLY)
#: A QUERY's answer: QUERY | REPLY and none of these (a notice: ina.host.call).
_NOT_ANSWER = int(Flag.REPLAN | Flag.ON_HOSTS | Flag.ABORT | Flag.RESULT)
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


_window.configure_window(
    INA_HEADER_BYTES=INA_HEADER_BYTES, ARRAY_BYTES=ARRAY_BYTES, MAX_LEAD=MAX_LEAD,
    OFF_FLAGS=_FLAGS, OFF_SEQ=_SEQ, OFF_COUNT=_COUNT, OFF_WIDTH=_WIDTH, OFF_ECN=_ECN,
    RESULT=_RESULT, NODATA=_NODATA, OVERFLOW=_OVERFLOW, QUERY=_QUERY, REPLY=_REPLY,
    NOT_ANSWER=_NOT_ANSWER, OP_COPY=OP_COPY, ECN_CE=ECN_CE, WIDTH32=WIDTH32,
    HELD=int(QueryVerdict.HELD), DUPLICATE_RESULTS=DUPLICATE_RESULTS,
    MAX_BACKOFF_DOUBLINGS=MAX_BACKOFF_DOUBLINGS, MAX_PROBE_DOUBLINGS=MAX_PROBE_DOUBLINGS,
    RTT_CLIP=RTT_CLIP, log=LOG.log)


class RtoEstimator(_window.Rto):
    """The retransmission timeout from measured round trips (RFC 6298's smoothed
    round trip and its variation, Karn's rule: only packets sent once are
    measured), between ``floor`` and ``cap``, compiled (ina.host._window). A round
    trip here runs from a contribution to its result, so it includes waiting for
    the other workers; the window measures only packets sent once every worker had
    joined the reduction.

    - ``sample(rtt)``: a measured round trip, clipped to RTT_CLIP smoothed ones.
    - ``progress()``: a new result arrived: the path works, undo the backoff.
    - ``bound(rtt)``: a round trip took ``rtt`` at most (the result of a packet sent
      more than once, since its first send): until a round trip is measured, the
      RTO's guess (from the SYNC's round trip through idle queues) is at least that.
      Else a guess far below the path's round trip has every packet sent again
      before its result, and Karn's rule measures none of them: on Figure 1 with
      links at 1 Mbit/s a worker whose guess was 5 ms sent its window again and
      again for the whole call (1,330 copies of 301 packets, the call 2.8x its
      links' time).
    - ``timed_out(now)``: a packet's timer expired: back off (RFC 6298 5.5), once
      per RTO, since a window of packets sent together times out together. Karn's
      rule keeps the round trips of packets sent again out of the samples, so
      without this an RTO that is too short would never grow.
    - ``probe(queued)``: how long to wait for the oldest result when nothing else
      is in flight to reveal its loss: twice the least of the last RECENT_SAMPLES
      round trips, or twice their median while the path ``queued`` (the newest
      result carried a congestion mark); None before any sample. Not the smoothed
      one, nor the median on a path that does not queue: others' losses lengthen
      many round trips (a result waits for every worker's contribution; under 5%
      loss per link the smoothed round trip grew to a second, and so did every
      recovery, and the round trips with it; probes at twice the median stalled a
      call at a result a second). Not the least of a long history either: a queue
      lengthens every round trip, and a probe at twice a round trip from before it
      sent hundreds of copies into the queue (the 29 s steps of the rate-limited
      fat-tree). Nor the least where the path queues: a packet that finds a
      rate-limited path idle crosses it in a burst, far sooner than one behind
      others (on Figure 1 at 1 Mbit/s, round trips of 5 to 80 ms), and probes at
      twice the quickest sent 200 to 480 copies of a 301-packet call into the
      queue, which the call then waited for (18-21 s where its links allow 8.4).
    - ``rto``: the timeout now; ``ceiling``: the most it can be.
    """

    def __init__(self, initial: float = DEFAULT_RTO, floor: float = MIN_RTO,
                 cap: float = MAX_RTO, srtt: float | None = None):
        super().__init__(initial, floor, cap, srtt)


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
        return memoryview(bytearray()), []
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


class ReductionWindow(_window.Window):
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
    Its compiled base (ina.host._window.Window) gives: ``packets_to_send(now)``,
    ``accept(payload, now)`` (True: a new result), ``answer(payload, now)`` (True: a
    QUERY's answer), ``hold(payload)`` (an owner's values; False: of no chunk of this
    window), ``next_timer()`` (when something is next due; None: nothing),
    ``probe_at()``, ``missing()``, ``sent_at(chunk)``; and ``done``, ``in_flight``,
    ``lost``, ``received`` and the counters (``results``, ``completions``,
    ``unexpected``, ``marked``, ``next``, ``base``, ``sends``, ``retransmissions``,
    ``early_retransmissions``, ``probes``, ``queries``, ``held_answers``).
    """

    def __init__(self, config: WorkerConfig, values: npt.ArrayLike, seq_base: int = 0,
                 rto: RtoEstimator | float | None = None, op: Op | None = None,
                 gen: int = 0, flow: Flow | None = None, cc: CongestionWindow | None = None,
                 lead: Lead | None = None, joined: bool = False):
        plan = plan_chunks(config, values, seq_base, op, gen, flow, lead)
        self.lead_result: npt.NDArray[np.int32] | None = (
            None if lead is None else np.zeros(MAX_LEAD, dtype=np.int32))
        super().__init__(
            plan, rto if isinstance(rto, RtoEstimator) else RtoEstimator(
                initial=DEFAULT_RTO if rto is None else rto),
            CongestionWindow.for_slots(config.window) if cc is None else cc, joined,
            self._lead_arrived)

    def _lead_arrived(self, wire: bytes) -> None:
        """The lead's result came (its MAX_LEAD values as on the wire): kept, and
        handed to the lead's check, which may raise (the workers' calls differ)."""
        assert self.plan.lead is not None and self.lead_result is not None
        self.lead_result[:] = np.frombuffer(wire, dtype=WIRE_TYPES[WIDTH32])
        self.plan.lead.check(self.lead_result[: self.lead_size])

    @property
    def lead_size(self) -> int:
        """The lead's own values (its packet counts MAX_LEAD, zeros after them)."""
        return 0 if self.plan.lead is None else self.plan.lead.values.size

    def seq_of(self, chunk: int) -> int:
        return seq_add(self.plan.seq_base, chunk)

    def count_of(self, chunk: int) -> int:
        """Meaningful values in the chunk's packet."""
        return int(self.plan.counts[chunk])

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
