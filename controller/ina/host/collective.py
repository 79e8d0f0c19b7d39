"""What the collectives share: the two movements every one of them is made of.

Each collective is a call (ina.host.call: start, descriptor, re-plans, fallback to
hosts) whose body is one of two movements of a worker's array, each chunk of it
one packet in the window (ina.host.window) with a ``Flow`` (ina.host.flow):

- ``reduction``: every worker contributes data to every chunk, which is reduced
  with the op (integers as they are, in 32- or 16-bit elements; floats through the
  block quantization of ina.host.quantize: their exponents first, with MAX, then
  their values), and each chunk's data goes to its ``dest`` (0: every worker).
  AllReduce, Reduce, Reduce-scatter.
- ``movement``: each chunk's data comes from one worker (the others send zeros:
  see ``movement``) and goes to every worker, bit for bit: any type travels as its
  bytes, in 32-bit words. Broadcast, Allgather.

A Barrier is one chunk of NODATA from every worker. ``describe`` gives the
descriptor (ina.host.call.CallDescriptor) the workers agree on first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ina.errors import AllreduceError
from ina.host import quantize
from ina.host.call import KIND_BYTES, KIND_FLOAT, KIND_INT, NO_ROOT, CallDescriptor, Collective
from ina.host.config import WorkerConfig
from ina.host.flow import WIDTHS, BoolArray, Flow, IntArray, Layout
from ina.host.results import EXPONENTS, REDUCING, AllreduceResult, Reduce
from ina.host.window import check_ints
from ina.protocol.arith import seq_add
from ina.protocol.constants import WIDTH16, WIDTH32, Op

#: The largest number of values a call can describe (its descriptor is int32).
MAX_SIZE = 2**31 - 1


# --- input ---------------------------------------------------------------------------


def flat(values: npt.ArrayLike, what: str) -> npt.NDArray[Any]:
    """``values`` as a non-empty one-dimensional array, or ValueError."""
    array = np.asarray(values)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{what} takes a non-empty one-dimensional array")
    if array.size > MAX_SIZE:
        raise ValueError(f"{what} takes at most {MAX_SIZE} values")
    return array


def reducible(values: npt.ArrayLike, width: int | None, what: str
              ) -> tuple[npt.NDArray[Any], bool, int]:
    """``values`` checked for a reduction (refused before anything is sent): the
    array, whether it is float, and the elements' width (default: 16 for float16
    and int16 arrays, else 32)."""
    array = flat(values, what)
    is_float = bool(np.issubdtype(array.dtype, np.floating))
    if width is None:
        width = WIDTH16 if array.dtype in (np.float16, np.int16) else WIDTH32
    if width not in WIDTHS:
        raise ValueError(f"elements are 32 or 16 bits wide, not {width}")
    if not is_float:
        check_ints(array, width)
    return array, is_float, width


def check_rank(rank: int, config: WorkerConfig, what: str) -> int:
    workers = config.workers
    if not 0 <= rank < workers:
        raise ValueError(f"{what}: rank {rank} is not a rank of job {config.job_id} "
                         f"(0..{workers - 1})")
    return rank


def bfr_id(config: WorkerConfig, rank: int) -> int:
    """The BFR-id of the job's worker of rank ``rank``."""
    if not config.bfr_ids:
        raise ValueError(f"job {config.job_id}: {config.name} does not know its peers' "
                         "BFR-ids (a WorkerConfig from the job's files knows them)")
    return config.bfr_ids[rank]


def describe(collective: Collective, size: int, kind: int, op: int = 0,
             root: int = NO_ROOT, width: int = WIDTH32) -> CallDescriptor:
    return CallDescriptor(size, kind, op, int(collective), root, width)


# --- reductions ----------------------------------------------------------------------


def reduction(reduce: Reduce, config: WorkerConfig, array: npt.NDArray[Any], is_float: bool,
              op: Op, seq: int, layout: Layout, dest: IntArray | None = None
              ) -> tuple[AllreduceResult, int]:
    """Every worker's ``array`` reduced with ``op`` from ``seq``, laid out on the wire
    as ``layout`` (its width included), chunk j's data to ``dest[j]`` (None: every
    worker): the result as on the wire (``layout.slots`` values: zeros in chunks
    that went elsewhere; floats with their bound) and the sequence number after."""
    flow = Flow.of(layout, dest=dest)
    if not is_float:
        r = reduce(layout.spread(array), op, seq, REDUCING, flow)
        return r, seq_add(seq, r.packets)
    n, width = config.workers, layout.width
    x = layout.spread(array.astype(np.float32))
    mine = quantize.block_exponents(x, width)
    e = reduce(mine, Op.MAX, seq, EXPONENTS)
    if np.any(e.values < mine):
        # A MAX below this worker's own: its contribution was not counted, a
        # round of an interrupted call was left in the switches at this sequence
        # number. The call is given up (ABORT), the next one starts past it.
        raise AllreduceError(
            f"job {config.job_id}: {config.name}: the block exponents agreed in the "
            "network are below this worker's own: a round of an interrupted call was "
            "left in the switches; this call is given up, the next one is exact")
    seq = seq_add(seq, e.packets)
    r = reduce(quantize.quantize(x, e.values, op, n, width), op, seq, REDUCING, flow)
    values = quantize.dequantize(r.values, e.values, op, n, width)
    return AllreduceResult(values, r.overflow, e.packets + r.packets,
                           e.retransmissions + r.retransmissions,
                           quantize.bound(values, e.values, op, n, width),
                           on_hosts=r.on_hosts), seq_add(seq, r.packets)


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


def movement(reduce: Reduce, wire: npt.NDArray[np.int32], seq: int, layout: Layout,
             data: BoolArray, phase: str) -> tuple[AllreduceResult, int]:
    """32-bit words laid out as ``layout``, each chunk's data from the worker whose
    ``data`` holds it, to every worker: the words as on the wire, bit for bit, and
    the sequence number after.

    The other workers contribute zeros, not NODATA: a round takes one kind, data or
    NODATA (aggregation.p4), because BMv2 lets a packet grow by at most 512 bytes
    over its arrival size, and a NODATA contribution completing a cell with data
    would have to grow by the whole array. A SUM of one worker's words and zeros is
    those words, exactly, with no overflow. The cost: every worker's uplink carries
    the whole array (docs/limits.md)."""
    owned = np.repeat(np.asarray(data, dtype=bool), layout.per_packet)[: wire.size]
    r = reduce(np.where(owned, wire, 0).astype(np.int32), Op.SUM, seq, phase,
               Flow.of(layout))
    return r, seq_add(seq, r.packets)
