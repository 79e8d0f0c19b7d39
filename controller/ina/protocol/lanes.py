"""A packet's int32 values as lanes: LANE_BITS-bit integers that hold ELEMS_PER_LANE
32-bit elements side by side, combined per element in a few wide operations (SWAR).

This is how the data plane holds and combines values (p4src/include/lanes.p4 uses
the same formulas): BMv2 computes every ``bit<W>`` value as a bignum, so one
2048-bit operation costs about what a 32-bit one does, and a lane does the work
of 64 per-element operations. The reference model runs these very formulas; the
tests check them against numpy, edge values included.

Lane ``i`` of a packet holds elements ``64 i .. 64 i + 63``, element ``64 i`` in
the most significant 32 bits (the wire is big-endian). With ``H`` the top bit of
every element and ``L = ~H``:

- SUM: ``s = ((a & L) + (b & L)) ^ ((a ^ b) & H)``: the low 31 bits add without
  carrying into the next element, the top bit is the XOR of the operands' top
  bits and the carry into it. A signed overflow happened in some element iff
  ``(a ^ s) & (b ^ s) & H`` is non-zero (the sum's sign differs from both).
- signed ``a >= b`` per element: the top bit of
  ``(~a & b) | (~(a ^ b) & ((a | H) - (b & L)))``: operands of different signs
  are ordered by their sign bits, operands of one sign by their low 31 bits,
  whose difference ``(a | H) - (b & L)`` never borrows across elements. (This is
  the borrow trick on sign-flipped operands, ``a' = a ^ H``, with the flips
  folded in.) The element's top bit spreads to a full mask with
  ``m = (ge << 1) - (ge >> 31)``, which wraps correctly at the top element.
- MAX ``(a & m) | (b & ~m)``, MIN ``(b & m) | (a & ~m)``.

Packets of width 16 hold ELEMS16_PER_LANE int16 elements per lane in the same
bytes (lane ``i``: elements ``128 i .. 128 i + 127``, the first one in the most
significant 16 bits), combined by the same formulas with ``H`` = 0x8000 in every
16-bit element (``HIGH16``, ``LOW16 = ~HIGH16``); the mask spreads with
``m = (ge << 1) - (ge >> 15)``. The data plane folds a 16-bit SUM's overflow
indicators onto the 32-bit ``H`` positions (``w | (w << 16)`` on the top bits of
the 16-bit elements), so one test of ``w & HIGH`` serves both widths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.protocol.constants import (
    ELEMS16_PER_LANE,
    ELEMS16_PER_PACKET,
    ELEMS_PER_LANE,
    ELEMS_PER_PACKET,
    LANE_BITS,
    LANES,
    WIDTH16,
    Op,
)

LANE_BYTES = LANE_BITS // 8
LANE_MASK = (1 << LANE_BITS) - 1
#: The top bit of every 32-bit element.
HIGH = int("80000000" * ELEMS_PER_LANE, 16)
#: The low 31 bits of every element.
LOW = LANE_MASK ^ HIGH
#: The top bit of every 16-bit element.
HIGH16 = int("8000" * ELEMS16_PER_LANE, 16)
#: The low 15 bits of every 16-bit element.
LOW16 = LANE_MASK ^ HIGH16

Lanes = tuple[int, ...]


@dataclass(frozen=True)
class _Width:
    """What the formulas and the packing need of an element width."""

    high: int  # the top bit of every element
    low: int  # the other bits of every element
    top: int  # the top bit's place within an element (bits - 1)
    elems: int  # elements per packet
    wire: str  # an element on the wire, as numpy names it (big-endian)
    dtype: type[np.signedinteger[Any]]


#: By element width. p4src/include/lane_math.p4 writes each function once per width
#: (lane_sum and lane_sum16, ...: its masks are constants); here the width is an
#: argument of one function, as the formulas are one.
_WIDTHS = {32: _Width(HIGH, LOW, 31, ELEMS_PER_PACKET, ">i4", np.int32),
           WIDTH16: _Width(HIGH16, LOW16, 15, ELEMS16_PER_PACKET, ">i2", np.int16)}


def lane_sum(a: int, b: int, width: int = 32) -> int:
    """Per element of ``width`` bits: a + b, wrapping like int32 (int16)."""
    m = _WIDTHS[width]
    return ((a & m.low) + (b & m.low)) ^ ((a ^ b) & m.high)


def lane_overflow(a: int, b: int, s: int, width: int = 32) -> int:
    """Non-zero iff some element of ``s = lane_sum(a, b, width)`` overflowed."""
    return (a ^ s) & (b ^ s) & _WIDTHS[width].high


def fold16(w: int) -> int:
    """16-bit overflow indicators (top bits of 16-bit elements) moved onto the top
    bits of the 32-bit elements: ``w & HIGH`` is non-zero iff ``w & HIGH16`` is."""
    return (w | (w << 16)) & LANE_MASK


def lane_ge_mask(a: int, b: int, width: int = 32) -> int:
    """Per element of ``width`` bits: all ones where a >= b (signed), zeros elsewhere."""
    m = _WIDTHS[width]
    ge = ((~a & b) | (~(a ^ b) & ((a | m.high) - (b & m.low)))) & m.high
    return ((ge << 1) - (ge >> m.top)) & LANE_MASK


def lane_max(a: int, b: int, width: int = 32) -> int:
    m = lane_ge_mask(a, b, width)
    return (a & m) | (b & ~m & LANE_MASK)


def lane_min(a: int, b: int, width: int = 32) -> int:
    m = lane_ge_mask(a, b, width)
    return (b & m) | (a & ~m & LANE_MASK)


def combine(op: Op | int, a: Lanes, b: Lanes, width: int = 32) -> tuple[Lanes, bool]:
    """The packet-wide reduction of elements of ``width`` bits (16, else 32):
    (lanes, whether some SUM element overflowed). An op that is not MIN or MAX
    sums, as the data plane does (it refuses other ops before this point)."""
    width = WIDTH16 if width == WIDTH16 else 32
    pairs = list(zip(a, b, strict=True))
    if op == Op.MIN:
        return tuple(lane_min(x, y, width) for x, y in pairs), False
    if op == Op.MAX:
        return tuple(lane_max(x, y, width) for x, y in pairs), False
    sums = tuple(lane_sum(x, y, width) for x, y in pairs)
    overflow = any(lane_overflow(x, y, s, width) for (x, y), s in zip(pairs, sums, strict=True))
    return sums, overflow


def from_bytes(data: bytes) -> Lanes:
    """LANES lanes from a packet's array (ELEMS_PER_PACKET big-endian int32, or
    ELEMS16_PER_PACKET int16: the same bytes)."""
    return tuple(int.from_bytes(data[i * LANE_BYTES:(i + 1) * LANE_BYTES], "big")
                 for i in range(LANES))


def to_bytes(lanes: Lanes) -> bytes:
    return b"".join(lane.to_bytes(LANE_BYTES, "big") for lane in lanes)


def from_values(values: npt.ArrayLike, width: int = 32) -> Lanes:
    """Lanes holding up to ELEMS_PER_PACKET int32 values (ELEMS16_PER_PACKET int16
    values if ``width`` is 16), zero-padded."""
    w = _WIDTHS[width]
    padded = np.zeros(w.elems, dtype=w.wire)
    array = np.asarray(values)
    padded[: array.size] = array
    return from_bytes(padded.tobytes())


def to_values(lanes: Lanes, width: int = 32) -> npt.NDArray[np.signedinteger[Any]]:
    """The ELEMS_PER_PACKET int32 values (ELEMS16_PER_PACKET int16 values if
    ``width`` is 16) the lanes hold."""
    w = _WIDTHS[width]
    return np.frombuffer(to_bytes(lanes), dtype=w.wire).astype(w.dtype)
