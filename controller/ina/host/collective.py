"""What the collectives share: the two movements every one of them is made of.

Each collective is a call (ina.host.call: start, descriptor, re-plans, fallback to
hosts) whose body is one of two movements of a worker's array, each chunk of it
one packet in the window (ina.host.window) with a ``Flow`` (ina.host.flow):

- ``reduction``: every worker contributes data to every chunk, which is reduced
  with the op (integers as they are, in 32- or 16-bit elements; floats through the
  block quantization of ina.host.quantize: their exponents first, with MAX, then
  their values), and each chunk's data goes to its ``dest`` (0: every worker).
  AllReduce, Reduce, Reduce-scatter.
- ``movement``: each chunk's data comes from one worker (once, by BIER from its
  edge switch; or with the others' zeros: see ``movement``) and goes to every
  worker, bit for bit: any type travels as its bytes, in 32-bit words. Broadcast,
  Allgather.

A Barrier is one chunk of NODATA from every worker. ``describe`` gives the
descriptor (ina.host.call.CallDescriptor) the workers agree on first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.errors import AllreduceError, InputTypeError, UsageError
from ina.host import floatbits, quantize
from ina.host.config import WorkerConfig
from ina.host.descriptor import (
    KIND_BYTES,
    KIND_FLOAT,
    KIND_INT,
    NO_ROOT,
    CallDescriptor,
    Collective,
    Refusal,
    refusal,
)
from ina.host.flow import WIDTHS, BoolArray, Flow, IntArray, Layout
from ina.host.guesses import Guesses, Verdict, counted, digest, guessable
from ina.host.results import EXPONENTS, REDUCING, AllreduceResult, Lead, Reduce, Reductions
from ina.host.window import int_range_problem
from ina.protocol.arith import seq_add
from ina.protocol.constants import BITSTRING_BITS, OP_COPY, WIDTH16, WIDTH32, Op

IntArray32 = npt.NDArray[np.int32]
#: The largest number of values a call can describe (its descriptor is int32).
MAX_SIZE = 2**31 - 1


# --- input ---------------------------------------------------------------------------


def flat(values: npt.ArrayLike, what: str) -> npt.NDArray[Any]:
    """``values`` as a non-empty one-dimensional array, or ValueError."""
    array = np.asarray(values)
    if array.ndim != 1 or array.size == 0:
        raise UsageError(f"{what} takes a non-empty one-dimensional array")
    if array.size > MAX_SIZE:
        raise UsageError(f"{what} takes at most {MAX_SIZE} values")
    return array


@dataclass(frozen=True)
class Operand:
    """A reduction's input as a worker's call takes it: ``array`` (zeros if the
    worker refuses the call: its input does not fit the data plane), whether it is
    float, its elements' width, and the worker's ``refusal`` (its descriptor's field,
    ina.host.call.Refusal) with what is wrong (``detail``). A refused call still runs
    its descriptor's round trip, so that every worker fails at once, saying why."""

    array: npt.NDArray[Any]
    is_float: bool
    width: int
    refusal: int = 0
    detail: str = ""

    @property
    def size(self) -> int:
        return int(self.array.size)

    def describe(self, collective: Collective, op: Op, root: int = NO_ROOT
                 ) -> CallDescriptor:
        return CallDescriptor(self.size, reduction_kind(self.is_float), int(op),
                              int(collective), root, self.width, self.refusal, self.detail)


def reducible(values: npt.ArrayLike, width: int | None, what: str, op: Op,
              config: WorkerConfig) -> Operand:
    """``values`` checked for a reduction with ``op``: the operand, its elements'
    width (default: 16 for int16 arrays, else 32; floats' MIN and MAX always 32, their
    order keys: ina.host.floatbits). A shape or type the data plane never takes is
    refused at once (ValueError, TypeError); integers beyond the width refuse the
    call at every worker (``Operand``)."""
    array = flat(values, what)
    is_float = bool(np.issubdtype(array.dtype, np.floating))
    if not is_float and not np.issubdtype(array.dtype, np.integer):
        raise InputTypeError(f"{what} takes integers or floats, not {array.dtype}")
    if width is None:
        width = WIDTH16 if array.dtype == np.int16 else WIDTH32
    if width not in WIDTHS:
        raise UsageError(f"elements are 32 or 16 bits wide, not {width}")
    if is_float and op != Op.SUM:
        width = WIDTH32
    if not is_float:
        problem = int_range_problem(array, width)
        if problem is not None:
            zeros = np.zeros(array.size, dtype=np.int32)
            return Operand(zeros, False, width, refusal(Refusal.INT_RANGE, config.rank),
                           f"{what}: {problem}")
    return Operand(array, is_float, width)


def check_rank(rank: int, config: WorkerConfig, what: str) -> int:
    workers = config.workers
    if not 0 <= rank < workers:
        raise UsageError(f"{what}: rank {rank} is not a rank of job {config.job_id} "
                         f"(0..{workers - 1})")
    return rank


def bfr_id(config: WorkerConfig, rank: int) -> int:
    """The BFR-id of the job's worker of rank ``rank``."""
    if not config.bfr_ids:
        raise UsageError(f"job {config.job_id}: {config.name} does not know its peers' "
                         "BFR-ids (a WorkerConfig from the job's files knows them)")
    return config.bfr_ids[rank]


def describe(collective: Collective, size: int, kind: int, op: int = 0,
             root: int = NO_ROOT, width: int = WIDTH32) -> CallDescriptor:
    return CallDescriptor(size, kind, op, int(collective), root, width)


# --- reductions ----------------------------------------------------------------------


def reduction(reduce: Reduce, config: WorkerConfig, operand: Operand, op: Op, seq: int,
              layout: Layout, dest: IntArray | None = None,
              guesses: Guesses | None = None) -> tuple[AllreduceResult, int]:
    """Every worker's ``array`` reduced with ``op`` from ``seq``, laid out on the wire
    as ``layout`` (its width included), chunk j's data to ``dest[j]`` (None: every
    worker): the result as on the wire (``layout.slots`` values: zeros in chunks
    that went elsewhere; floats with their bound) and the sequence number after.
    Integers travel as they are; floats' MIN and MAX as order keys, exactly
    (ina.host.floatbits); floats' SUM quantized (``float_sum``)."""
    flow = Flow.of(layout, dest=dest)
    if not operand.is_float:
        r = reduce(layout.spread(operand.array), op, seq, REDUCING, flow)
        return r, seq_add(seq, r.packets)
    x = layout.spread(operand.array.astype(np.float32))
    if op != Op.SUM:
        r = reduce(floatbits.order_keys(x, op), op, seq, REDUCING, flow)
        values = floatbits.from_order_keys(r.values)
        return dataclasses.replace(r, values=values, error_bound=np.zeros(values.size)), \
            seq_add(seq, r.packets)
    return float_sum(reduce, config, x, seq, layout, flow, guesses)


def float_sum(reduce: Reduce, config: WorkerConfig, x: npt.NDArray[np.float32], seq: int,
              layout: Layout, flow: Flow, guesses: Guesses | None
              ) -> tuple[AllreduceResult, int]:
    """The SUM of float values ``x`` (as on the wire): their finite part quantized
    with block exponents (ina.host.quantize), agreed first, or guessed from earlier
    calls (``guesses``: ina.host.guesses); then, if any worker holds a NaN or an
    infinity (the exponents' lead says), its flags (ina.host.floatbits)."""
    n, width = config.workers, layout.width
    finite = floatbits.finite_part(x)
    mine = quantize.block_exponents(finite, width)
    special = int(floatbits.has_specials(x))
    run = Reductions(reduce, seq)
    if guesses is not None and guessable(mine.size, width):
        r, used, anyone_special = _guessed(run, config, finite, mine, special, layout, flow,
                                           guesses)
    else:
        lead = np.concatenate(([special], mine)).astype(np.int32)
        e = run(lead, Op.MAX, EXPONENTS)
        if np.any(e.values < lead):
            raise AllreduceError(_not_counted(config))
        used, anyone_special = e.values[1:], bool(e.values[0] > 0)
        r = run(quantize.quantize(finite, used, Op.SUM, n, width), Op.SUM, REDUCING, flow)
    values = quantize.dequantize(r.values, used, Op.SUM, n, width)
    bound = quantize.bound(values, used, Op.SUM, n, width)
    overflow, on_hosts = r.overflow, r.on_hosts
    if anyone_special:
        p, m = floatbits.special_flags(x)
        rp = run(p, Op.MAX, REDUCING, flow)
        rm = run(m, Op.MAX, REDUCING, flow)
        values = floatbits.with_specials(values, rp.values, rm.values)
        bound = np.where(np.isfinite(values), bound, 0.0)
        on_hosts = on_hosts or rp.on_hosts or rm.on_hosts
    return AllreduceResult(values, overflow, run.packets, run.retransmissions, bound,
                           on_hosts=on_hosts, exponents=used.astype(np.int32)), run.seq


def _not_counted(config: WorkerConfig) -> str:
    # A MAX below this worker's own: its contribution was not counted, a round of
    # an interrupted call was left in the switches at this sequence number. The
    # call is given up (ABORT), the next one starts past it.
    return (f"job {config.job_id}: {config.name}: the block exponents agreed in the "
            "network are below this worker's own: a round of an interrupted call was "
            "left in the switches; this call is given up, the next one is exact")


def _guessed(run: Reductions, config: WorkerConfig, x: npt.NDArray[np.float32],
             mine: IntArray32, special: int, layout: Layout, flow: Flow,
             guesses: Guesses) -> tuple[AllreduceResult, IntArray32, bool]:
    """A float SUM whose values go with its exponents, scaled by a guess
    (ina.host.guesses): one window if the guess holds, else the blocks it missed
    reduced again with the agreed exponents (every block if the workers' guesses
    differ). The integer result, the exponents it is scaled by, and whether any
    worker holds a NaN or an infinity."""
    n, width = config.workers, layout.width
    key = (layout.chunks, int(Op.SUM), flow.dest is None)
    guess = guesses.guess(key)
    lead_values = np.concatenate((digest(key, guess), [special], mine)).astype(np.int32)

    def check(led: IntArray32) -> None:
        if not counted(led, lead_values):
            raise AllreduceError(_not_counted(config))

    lead = Lead(lead_values, check)
    if guess is None:  # the lead alone: the values wait for the agreed exponents
        first = run(np.zeros(0, dtype=np.int32), Op.MAX, EXPONENTS, None, lead)
        ints = np.zeros(layout.slots, dtype=np.int32)
    else:
        first = run(quantize.quantize(x, guess, Op.SUM, n, width), Op.SUM, REDUCING, flow,
                    lead)
        ints = first.values.astype(np.int32)
    assert first.lead is not None
    verdict = Verdict.of(first.lead, guess)
    agreed = verdict.exponents
    if guess is None and verdict.anyone_guessed:
        # The others sent their values with their guesses in these chunks: they
        # are completed (with zeros: nothing of them is used), then reduced again.
        run(np.zeros(layout.slots, dtype=np.int32), Op.SUM, REDUCING, flow)
    used = agreed if guess is None else np.where(verdict.missed, agreed, guess)
    on_hosts, overflow = first.on_hosts, first.overflow
    redo = verdict.missed if verdict.anyone_guessed else np.ones(agreed.size, dtype=bool)
    if redo.any():
        rows = np.flatnonzero(redo)
        per = layout.per_packet
        again = x.reshape(-1, per)[rows].reshape(-1)
        counts = layout.counts()[rows]
        sub = Flow(width, counts, None, None if flow.dest is None else flow.dest[rows])
        r = run(quantize.quantize(again, agreed[rows], Op.SUM, n, width), Op.SUM, REDUCING,
                sub)
        ints.reshape(-1, per)[rows] = r.values.reshape(-1, per)
        on_hosts, overflow = on_hosts or r.on_hosts, overflow or r.overflow
    guesses.learn(key, agreed, missed=guess is not None and bool(verdict.missed.any()))
    guesses.guessed += guess is not None
    return (AllreduceResult(ints, overflow, run.packets, run.retransmissions,
                            on_hosts=on_hosts), used.astype(np.int32), verdict.special)


def reduction_kind(is_float: bool) -> int:
    return KIND_FLOAT if is_float else KIND_INT


# --- movements -----------------------------------------------------------------------


def words(array: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
    """``array``'s bytes as 32-bit words (the last one padded with zeros)."""
    raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
    padded = np.zeros(-(-raw.size // 4) * 4, dtype=np.uint8)
    padded[: raw.size] = raw
    return padded.view(np.int32)


def unwords(w: npt.NDArray[np.int32], dtype: np.dtype[Any], count: int) -> npt.NDArray[Any]:
    """``count`` elements of ``dtype`` from the bytes of 32-bit words (``words``'s inverse)."""
    raw = np.ascontiguousarray(w.astype(np.int32)).view(np.uint8)
    return raw[: count * dtype.itemsize].view(dtype).copy()


def bytes_kind(array: npt.NDArray[Any]) -> int:
    return KIND_BYTES + array.dtype.itemsize


def chunk_owners(config: WorkerConfig, ranks: IntArray) -> tuple[IntArray | None, int]:
    """Per chunk, the BFR-id of its owner (the rank in ``ranks``), for a movement
    whose values travel once from their owner (ina.host.flow.Flow.owners); None
    where they do not: the worker's config does not ask for it (``owned``), it
    does not know its peers' BFR-ids, they lie in more than one BIER set (an edge
    switch sends a worker's values to its own set only), or the job has one worker.
    Also the movement's op in its call's descriptor: OP_COPY with owners, else none,
    so that workers that would move a call's chunks in different ways fail at once,
    saying so, instead of meeting in rounds of two kinds."""
    ids = np.asarray(config.bfr_ids, dtype=np.int64)
    if (not config.owned or config.workers < 2 or ids.size != config.workers
            or np.ptp((ids - 1) // BITSTRING_BITS) != 0):
        return None, 0
    return ids[np.asarray(ranks, dtype=np.int64)], OP_COPY


def movement(reduce: Reduce, wire: npt.NDArray[np.int32], seq: int, layout: Layout,
             data: BoolArray, phase: str, owners: IntArray | None = None
             ) -> tuple[AllreduceResult, int]:
    """32-bit words laid out as ``layout``, each chunk's data from the worker whose
    ``data`` holds it, to every worker: the words as on the wire, bit for bit, and
    the sequence number after.

    With ``owners`` (``chunk_owners``: each chunk's owner's BFR-id), a chunk's data
    travels once from its owner, by BIER from its edge switch, and its round is
    NODATA from every worker that holds it (ina.host.flow.Flow.owners): each uplink
    carries its worker's own data and a header per chunk.

    Without, the other workers contribute zeros, not NODATA: a round takes one
    kind, data or NODATA (aggregation.p4), because BMv2 lets a packet grow by at
    most 512 bytes over its arrival size, and a NODATA contribution completing a
    cell with data would have to grow by the whole array. A SUM of one worker's
    words and zeros is those words, exactly, with no overflow. The cost: every
    worker's uplink carries the whole array. On hosts (ina.host.onhosts) the same
    SUM gives the result either way."""
    owned = np.repeat(np.asarray(data, dtype=bool), layout.per_packet)[: wire.size]
    values = np.where(owned, wire, 0).astype(np.int32)
    if owners is None or layout.parts == 1:
        r = reduce(values, Op.SUM, seq, phase, Flow.of(layout, owners=owners))
        return r, seq_add(seq, r.packets)
    # A window contributes to its chunks in order, each once it holds the owner's
    # data: the parts' chunks interleaved (part 0's first, part 1's first, ...), so
    # that every owner sends at once rather than one part after another. (The parts
    # fill whole packets: the words are ``layout.slots`` long.)
    order = interleaved(layout)
    per = layout.per_packet
    flow = Flow(layout.width, layout.counts()[order], owners=np.asarray(owners)[order])
    r = reduce(values.reshape(-1, per)[order].reshape(-1), Op.SUM, seq, phase, flow)
    back = np.empty_like(r.values).reshape(-1, per)
    back[order] = r.values.reshape(-1, per)
    return dataclasses.replace(r, values=back.reshape(-1)), seq_add(seq, r.packets)


def interleaved(layout: Layout) -> IntArray:
    """The layout's chunks in the order of a movement with owners: the first chunk of
    every part, then the second of every part, and so on."""
    return np.arange(layout.chunks).reshape(layout.parts, -1).T.reshape(-1)
