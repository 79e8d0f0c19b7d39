"""Floats the switches reduce exactly, as integers: MIN and MAX by order keys, and
IEEE's NaN and infinities for SUM by flags.

MIN and MAX. A float32's bits, read as a signed int32, order the non-negative
floats as their values do, and the negative ones backwards; flipping every bit
but the sign of a negative one (``b ^ 0x7FFFFFFF``) makes the order the values'
own: ``order_keys``. So the switches' signed 32-bit MIN and MAX of the keys is the
MIN and MAX of the floats, bit for bit, with no scale and no error (float16 and
bfloat16 values, which float32 holds exactly, too). -0.0 orders just below 0.0.
NaN wins, as in torch's own max and min: every NaN becomes the largest key for
MAX (0x7FC00000, above +inf) and the smallest for MIN (0xFFC00000's key, below
-inf), so a NaN at any worker is the result there.

SUM. The quantized SUM (ina.host.quantize) adds finite values only. Where a worker
has a NaN or an infinity, every worker reduces two flags per element with MAX
(``special_flags``: ``p``, the element is +inf or NaN; ``n``, it is -inf or NaN),
and the result follows IEEE's addition (``with_specials``): both set (a NaN
somewhere, or +inf and -inf) gives NaN, ``p`` alone +inf, ``n`` alone -inf.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ina.protocol.constants import Op

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]
#: Every bit of an int32 but its sign.
_MAGNITUDE = np.int32(0x7FFFFFFF)
#: The NaN each op's keys give it: the largest key (MAX) or the smallest (MIN).
_NAN_MAX = np.int32(0x7FC00000)
_NAN_MIN = np.int32(np.uint32(0xFFC00000).view(np.int32))


def order_keys(x: FloatArray, op: Op) -> IntArray:
    """``x``'s float32 values as int32 keys whose order is the values' (NaN the
    largest for MAX, the smallest for MIN)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.int32)
    bits = np.where(np.isnan(x), _NAN_MAX if op == Op.MAX else _NAN_MIN, bits)
    return np.where(bits < 0, bits ^ _MAGNITUDE, bits).astype(np.int32)


def from_order_keys(keys: npt.NDArray[np.integer]) -> FloatArray:
    """The float32 values of ``order_keys``' keys (its inverse)."""
    k = np.asarray(keys, dtype=np.int32)
    return np.where(k < 0, k ^ _MAGNITUDE, k).astype(np.int32).view(np.float32)


def has_specials(x: FloatArray) -> bool:
    """Whether ``x`` holds a NaN or an infinity."""
    return not bool(np.all(np.isfinite(x)))


def finite_part(x: FloatArray) -> FloatArray:
    """``x`` with zeros where it holds a NaN or an infinity."""
    return np.where(np.isfinite(x), x, np.float32(0)).astype(np.float32)


def special_flags(x: FloatArray) -> tuple[IntArray, IntArray]:
    """Per element, as 0 or 1: ``p`` (+inf or NaN) and ``n`` (-inf or NaN)."""
    nan = np.isnan(x)
    p = (nan | np.isposinf(x)).astype(np.int32)
    n = (nan | np.isneginf(x)).astype(np.int32)
    return p, n


def with_specials(values: FloatArray, p: npt.NDArray[np.integer],
                  n: npt.NDArray[np.integer]) -> FloatArray:
    """``values`` (the finite values' SUM) with the reduced flags' NaN and
    infinities in their places, as IEEE's addition gives them."""
    pos, neg = np.asarray(p) > 0, np.asarray(n) > 0
    out = np.array(values, dtype=np.float32)
    out[pos & neg] = np.nan
    out[pos & ~neg] = np.inf
    out[neg & ~pos] = -np.inf
    return out
