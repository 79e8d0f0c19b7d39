"""Bitmaps (P-BM, A-BM, F-BM, BitString) as Python ints in the BIER encoding of
RFC 8279: BFR-id ``k`` is bit ``k - 1`` counted from the least significant bit.

In the control plane a bitmap spans every set (BFR-ids up to MAX_BFR_ID); on the
wire a packet carries one set: its set identifier (SI, RFC 8279 section 3) and that
set's BITSTRING_BITS bits. ``split_sets`` and ``join_set`` convert.
"""

from __future__ import annotations

from ina.errors import WireError
from ina.protocol.constants import BIER_SETS, BITSTRING_BITS, MAX_BFR_ID

SET_MASK = (1 << BITSTRING_BITS) - 1


def bit_of(bfr_id: int) -> int:
    """The bitmap with only BFR-id ``bfr_id`` set (RFC 8279: id k is bit k-1)."""
    if not 1 <= bfr_id <= MAX_BFR_ID:
        raise WireError(f"BFR-id {bfr_id} outside 1..{MAX_BFR_ID}")
    return 1 << (bfr_id - 1)


def set_of(bfr_id: int) -> int:
    """The BIER set (SI) of a BFR-id."""
    return (bfr_id - 1) // BITSTRING_BITS


def split_sets(bitmap: int) -> dict[int, int]:
    """A bitmap over all sets as {SI: that set's BITSTRING_BITS-bit bitmap}, non-empty sets only."""
    if not 0 <= bitmap < 1 << MAX_BFR_ID:
        raise WireError(f"bitmap has bits beyond BFR-id {MAX_BFR_ID}")
    return {si: part for si in range(BIER_SETS)
            if (part := bitmap >> (si * BITSTRING_BITS) & SET_MASK)}


def join_set(si: int, bits: int) -> int:
    """A set's bitmap as bits of the bitmap over all sets."""
    return (bits & SET_MASK) << (si * BITSTRING_BITS)


def one_set(bitmap: int) -> tuple[int, int]:
    """(SI, bits) of a non-empty bitmap that lies within one set; ValueError otherwise."""
    sets = split_sets(bitmap)
    if len(sets) != 1:
        raise WireError(f"bitmap spans {len(sets)} BIER sets, not one")
    return next(iter(sets.items()))


def bfr_ids_of(bitmap: int) -> list[int]:
    """BFR-ids set in ``bitmap``, ascending."""
    return [i + 1 for i in range(bitmap.bit_length()) if bitmap >> i & 1]


def format_bitmap(bitmap: int, width: int) -> str:
    """The draft's notation: BFR-id 1 leftmost, ``width`` bits (e.g. 11000000 = w1, w2)."""
    return "".join("1" if bitmap >> i & 1 else "0" for i in range(width))
