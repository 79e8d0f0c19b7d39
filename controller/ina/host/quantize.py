"""Float32 arrays over an integer data plane: block exponents agreed by the workers.

The switches add signed 32-bit integers. A float32 AllReduce takes two integer
AllReduces (SwitchML's block floating point, with the exponent agreed first):

1. every worker computes, for each block of ELEMS_PER_PACKET values, the
   exponent ``e`` with ``max |x| < 2**e``; a MAX AllReduce gives every worker
   the block's exponent ``E`` over all workers;
2. each worker sends ``q = round(x * 2**s)`` with ``s = 30 - E - h``, where the
   headroom ``h = ceil(log2 N)`` for SUM of N workers (0 for MIN and MAX), so
   ``|q| <= 2**(30 - h)`` and no sum of N of them can overflow; the integer
   result times ``2**-s`` is the float result.

Error bound, per element, against the exact reduction of the float32 inputs:
SUM: ``N * 2**-s / 2`` (each worker's rounding), MIN/MAX: ``2**-s / 2``; plus
half an ulp of float32 for the final rounding of the result. ``bound`` returns
it; the tests check it.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ina.protocol.constants import ELEMS_PER_PACKET, Op

#: Exponent of an all-zero block (below every normal float32).
ZERO_EXPONENT = -149
FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]


def block_exponents(x: FloatArray) -> IntArray:
    """Per block of ELEMS_PER_PACKET values: the least ``e`` with ``max |x| < 2**e``."""
    if not np.all(np.isfinite(x)):
        raise ValueError("float AllReduce needs finite values (no inf or NaN)")
    blocks = -(-x.size // ELEMS_PER_PACKET)
    padded = np.zeros(blocks * ELEMS_PER_PACKET, dtype=np.float64)
    padded[: x.size] = np.abs(x)
    peak = padded.reshape(blocks, ELEMS_PER_PACKET).max(axis=1)
    _, exponent = np.frexp(peak)  # peak = m * 2**exponent with 0.5 <= m < 1
    return np.where(peak > 0, exponent, ZERO_EXPONENT).astype(np.int32)


def headroom(op: Op, workers: int) -> int:
    return math.ceil(math.log2(workers)) if op == Op.SUM and workers > 1 else 0


def shifts(exponents: IntArray, op: Op, workers: int, size: int) -> npt.NDArray[np.int64]:
    """Per element: the power of two its block is scaled by."""
    per_block = 30 - exponents.astype(np.int64) - headroom(op, workers)
    return np.repeat(per_block, ELEMS_PER_PACKET)[:size]


def quantize(x: FloatArray, exponents: IntArray, op: Op, workers: int) -> IntArray:
    s = shifts(exponents, op, workers, x.size)
    q = np.rint(np.ldexp(x.astype(np.float64), s))
    return q.astype(np.int32)


def dequantize(q: IntArray, exponents: IntArray, op: Op, workers: int) -> FloatArray:
    s = shifts(exponents, op, workers, q.size)
    return np.ldexp(q.astype(np.float64), -s).astype(np.float32)


def bound(result: FloatArray, exponents: IntArray, op: Op, workers: int
          ) -> npt.NDArray[np.float64]:
    """Per element: how far ``result`` may be from the exact reduction."""
    s = shifts(exponents, op, workers, result.size)
    rounding = (workers if op == Op.SUM else 1) * np.ldexp(0.5, -s)
    return np.asarray(rounding + np.abs(result.astype(np.float64)) * 2.0**-24, dtype=np.float64)
