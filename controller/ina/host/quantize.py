"""Float SUMs over an integer data plane: block exponents agreed by the workers.

The switches add signed 32-bit (or 16-bit) integers. A float SUM takes two
integer AllReduces (SwitchML's block floating point, with the exponent agreed first;
MIN and MAX need none: ina.host.floatbits):

1. every worker computes, for each block of values (a packet's: ELEMS_PER_PACKET
   for 32-bit elements, ELEMS16_PER_PACKET for 16-bit ones), the exponent ``e``
   with ``max |x| < 2**e``; a MAX AllReduce (of 32-bit elements) gives every
   worker the block's exponent ``E`` over all workers;
2. each worker sends ``q = round(x * 2**s)`` with ``s = (W - 2) - E - h`` for
   elements of W bits (30 - E - h, or 14 - E - h), where the headroom
   ``h = ceil(log2 N)`` for SUM of N workers (0 for MIN and MAX), so
   ``|q| <= 2**(W - 2 - h)`` and no sum of N of them can overflow; the integer
   result times ``2**-s`` is the float result.

Error bound, per element, against the exact SUM of the float32 inputs:
``N * 2**-s / 2`` (each worker's rounding) plus half an ulp of float32 for the
final rounding of the result. ``bound`` returns it; the tests check it. A block
scaled by an exponent ``G`` above its agreed ``E`` (a guess: ina.host.guesses, used
only while ``G <= E + T``, T = GUESS_TOLERANCE) has ``s = W - 2 - G - h``: relative
to the block's largest magnitude ``M`` (``2**(E-1) <= M < 2**E``, over every
worker's values), each element is within ``N * 2**(T + h - (W - 2)) * M``
(``relative_bound``) plus the final rounding: ``W - 2 - T - h - log2(N)`` bits of
``M``; with 32-bit elements, 4 workers and a guess, 20 bits; with agreed exponents
(T = 0), 26. The arrays given here are as they go on the wire: block ``b`` is
``x[b * E: (b + 1) * E]`` for E elements to a packet.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ina.protocol.constants import ELEMS_BY_WIDTH, WIDTH32, Op

#: Exponent of an all-zero block (below every normal float32).
ZERO_EXPONENT = -149
FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]


def block_exponents(x: FloatArray, width: int = WIDTH32) -> IntArray:
    """Per block of a packet's values: the least ``e`` with ``max |x| < 2**e`` over
    its finite values (NaN and infinities travel apart: ina.host.floatbits)."""
    per_block = ELEMS_BY_WIDTH[width]
    blocks = -(-x.size // per_block)
    padded = np.zeros(blocks * per_block, dtype=np.float64)
    padded[: x.size] = np.where(np.isfinite(x), np.abs(x), 0.0)
    peak = padded.reshape(blocks, per_block).max(axis=1)
    _, exponent = np.frexp(peak)  # peak = m * 2**exponent with 0.5 <= m < 1
    return np.where(peak > 0, exponent, ZERO_EXPONENT).astype(np.int32)


def headroom(op: Op, workers: int) -> int:
    return math.ceil(math.log2(workers)) if op == Op.SUM and workers > 1 else 0


def shifts(exponents: IntArray, op: Op, workers: int, size: int,
           width: int = WIDTH32) -> npt.NDArray[np.int64]:
    """Per element: the power of two its block is scaled by."""
    per_block = (width - 2) - exponents.astype(np.int64) - headroom(op, workers)
    return np.repeat(per_block, ELEMS_BY_WIDTH[width])[:size]


def quantize(x: FloatArray, exponents: IntArray, op: Op, workers: int,
             width: int = WIDTH32) -> npt.NDArray[np.int32]:
    """``x`` scaled to integers of ``width`` bits (held as int32), each at most
    ``2**(width - 2 - h)`` in magnitude: a value above its block's exponent (a guess
    that missed: ina.host.guesses) is clipped, so that no sum can overflow."""
    s = shifts(exponents, op, workers, x.size, width)
    limit = 2.0 ** (width - 2 - headroom(op, workers))
    q = np.clip(np.rint(np.ldexp(x.astype(np.float64), s)), -limit, limit)
    return q.astype(np.int32)


def dequantize(q: npt.NDArray[np.integer], exponents: IntArray, op: Op, workers: int,
               width: int = WIDTH32) -> FloatArray:
    s = shifts(exponents, op, workers, q.size, width)
    with np.errstate(over="ignore"):  # a sum past float32's range is infinite, as IEEE's
        return np.ldexp(q.astype(np.float64), -s).astype(np.float32)


def relative_bound(workers: int, width: int = WIDTH32, above: int = 0) -> float:
    """The largest error of a SUM's element, relative to its block's largest
    magnitude (the final rounding aside), for exponents up to ``above`` bits over
    the agreed ones (see the module's text)."""
    return workers * 2.0 ** (above + headroom(Op.SUM, workers) - (width - 2))


def bound(result: FloatArray, exponents: IntArray, op: Op, workers: int,
          width: int = WIDTH32) -> npt.NDArray[np.float64]:
    """Per element: how far ``result`` may be from the exact reduction."""
    s = shifts(exponents, op, workers, result.size, width)
    rounding = (workers if op == Op.SUM else 1) * np.ldexp(0.5, -s)
    return np.asarray(rounding + np.abs(result.astype(np.float64)) * 2.0**-24, dtype=np.float64)
