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


def lane_sum(a: int, b: int) -> int:
    """Per element: a + b, wrapping like int32."""
    return ((a & LOW) + (b & LOW)) ^ ((a ^ b) & HIGH)


def lane_overflow(a: int, b: int, s: int) -> int:
    """Non-zero iff some element of ``s = lane_sum(a, b)`` overflowed."""
    return (a ^ s) & (b ^ s) & HIGH


def lane_ge_mask(a: int, b: int) -> int:
    """Per element: all ones where a >= b (signed), zeros elsewhere."""
    ge = ((~a & b) | (~(a ^ b) & ((a | HIGH) - (b & LOW)))) & HIGH
    return ((ge << 1) - (ge >> 31)) & LANE_MASK


def lane_max(a: int, b: int) -> int:
    m = lane_ge_mask(a, b)
    return (a & m) | (b & ~m & LANE_MASK)


def lane_min(a: int, b: int) -> int:
    m = lane_ge_mask(a, b)
    return (b & m) | (a & ~m & LANE_MASK)


def lane_sum16(a: int, b: int) -> int:
    """Per 16-bit element: a + b, wrapping like int16."""
    return ((a & LOW16) + (b & LOW16)) ^ ((a ^ b) & HIGH16)


def lane_overflow16(a: int, b: int, s: int) -> int:
    """Non-zero iff some element of ``s = lane_sum16(a, b)`` overflowed."""
    return (a ^ s) & (b ^ s) & HIGH16


def fold16(w: int) -> int:
    """16-bit overflow indicators (top bits of 16-bit elements) moved onto the top
    bits of the 32-bit elements: ``w & HIGH`` is non-zero iff ``w & HIGH16`` is."""
    return (w | (w << 16)) & LANE_MASK


def lane_ge_mask16(a: int, b: int) -> int:
    """Per 16-bit element: all ones where a >= b (signed), zeros elsewhere."""
    ge = ((~a & b) | (~(a ^ b) & ((a | HIGH16) - (b & LOW16)))) & HIGH16
    return ((ge << 1) - (ge >> 15)) & LANE_MASK


def lane_max16(a: int, b: int) -> int:
    m = lane_ge_mask16(a, b)
    return (a & m) | (b & ~m & LANE_MASK)


def lane_min16(a: int, b: int) -> int:
    m = lane_ge_mask16(a, b)
    return (b & m) | (a & ~m & LANE_MASK)


def combine(op: Op | int, a: Lanes, b: Lanes, width: int = 32) -> tuple[Lanes, bool]:
    """The packet-wide reduction of elements of ``width`` bits (16, else 32):
    (lanes, whether some SUM element overflowed). An op that is not MIN or MAX
    sums, as the data plane does (it refuses other ops before this point)."""
    if width == WIDTH16:
        return _combine16(op, a, b)
    if op == Op.MIN:
        return tuple(lane_min(x, y) for x, y in zip(a, b, strict=True)), False
    if op == Op.MAX:
        return tuple(lane_max(x, y) for x, y in zip(a, b, strict=True)), False
    sums = tuple(lane_sum(x, y) for x, y in zip(a, b, strict=True))
    overflow = any(lane_overflow(x, y, s) for x, y, s in zip(a, b, sums, strict=True))
    return sums, overflow


def _combine16(op: Op | int, a: Lanes, b: Lanes) -> tuple[Lanes, bool]:
    if op == Op.MIN:
        return tuple(lane_min16(x, y) for x, y in zip(a, b, strict=True)), False
    if op == Op.MAX:
        return tuple(lane_max16(x, y) for x, y in zip(a, b, strict=True)), False
    sums = tuple(lane_sum16(x, y) for x, y in zip(a, b, strict=True))
    overflow = any(lane_overflow16(x, y, s) for x, y, s in zip(a, b, sums, strict=True))
    return sums, overflow


def from_bytes(data: bytes) -> Lanes:
    """LANES lanes from a packet's array (ELEMS_PER_PACKET big-endian int32, or
    ELEMS16_PER_PACKET int16: the same bytes)."""
    return tuple(int.from_bytes(data[i * LANE_BYTES:(i + 1) * LANE_BYTES], "big")
                 for i in range(LANES))


def to_bytes(lanes: Lanes) -> bytes:
    return b"".join(lane.to_bytes(LANE_BYTES, "big") for lane in lanes)


def from_values(values: npt.ArrayLike) -> Lanes:
    """Lanes holding up to ELEMS_PER_PACKET int32 values, zero-padded."""
    padded = np.zeros(ELEMS_PER_PACKET, dtype=">i4")
    array = np.asarray(values)
    padded[: array.size] = array
    return from_bytes(padded.tobytes())


def to_values(lanes: Lanes) -> npt.NDArray[np.int32]:
    """The ELEMS_PER_PACKET int32 values the lanes hold."""
    return np.frombuffer(to_bytes(lanes), dtype=">i4").astype(np.int32)


def from_values16(values: npt.ArrayLike) -> Lanes:
    """Lanes holding up to ELEMS16_PER_PACKET int16 values, zero-padded."""
    padded = np.zeros(ELEMS16_PER_PACKET, dtype=">i2")
    array = np.asarray(values)
    padded[: array.size] = array
    return from_bytes(padded.tobytes())


def to_values16(lanes: Lanes) -> npt.NDArray[np.int16]:
    """The ELEMS16_PER_PACKET int16 values the lanes hold."""
    return np.frombuffer(to_bytes(lanes), dtype=">i2").astype(np.int16)
