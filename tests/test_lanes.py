"""The SWAR lane arithmetic of the data plane (ina.protocol.lanes, p4src/include/lane_math.p4)
against numpy, element by element, on random and edge values."""

import numpy as np

from ina.protocol import lanes
from ina.protocol.codec import array_bytes
from ina.protocol.constants import (
    ELEMS16_PER_LANE,
    ELEMS16_PER_PACKET,
    ELEMS_PER_LANE,
    ELEMS_PER_PACKET,
    LANE_BITS,
    LANES,
    Op,
)

EDGES = np.array([-(2**31), -(2**31) + 1, -(2**30), -2, -1, 0, 1, 2, 2**30, 2**31 - 2, 2**31 - 1],
                 dtype=np.int64)


def _pairs() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    pairs = []
    for _ in range(50):
        pairs.append((rng.integers(-(2**31), 2**31, ELEMS_PER_PACKET),
                      rng.integers(-(2**31), 2**31, ELEMS_PER_PACKET)))
        pairs.append((rng.choice(EDGES, ELEMS_PER_PACKET), rng.choice(EDGES, ELEMS_PER_PACKET)))
    # Every pair of edge values, in one packet.
    a, b = np.meshgrid(EDGES, EDGES)
    pairs.append((np.resize(a.ravel(), ELEMS_PER_PACKET), np.resize(b.ravel(), ELEMS_PER_PACKET)))
    return pairs


def _combine(op: Op, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, bool]:
    out, overflow = lanes.combine(op, lanes.from_values(a.astype(np.int32)),
                                  lanes.from_values(b.astype(np.int32)))
    return lanes.to_values(out).astype(np.int64), overflow


def test_sum_wraps_like_int32_and_flags_overflow_exactly() -> None:
    for a, b in _pairs():
        got, overflow = _combine(Op.SUM, a, b)
        exact = a + b
        wrapped = (exact + 2**31) % 2**32 - 2**31
        assert np.array_equal(got, wrapped)
        assert overflow == bool(np.any(exact != wrapped))


def test_min_and_max_are_signed_and_elementwise() -> None:
    for a, b in _pairs():
        assert np.array_equal(_combine(Op.MAX, a, b)[0], np.maximum(a, b))
        assert np.array_equal(_combine(Op.MIN, a, b)[0], np.minimum(a, b))


def test_the_overflow_of_one_element_is_seen_in_any_lane() -> None:
    for lane in range(LANES):
        a = np.zeros(ELEMS_PER_PACKET, dtype=np.int64)
        a[lane * ELEMS_PER_LANE + ELEMS_PER_LANE - 1] = 2**31 - 1
        b = np.zeros(ELEMS_PER_PACKET, dtype=np.int64)
        b[lane * ELEMS_PER_LANE + ELEMS_PER_LANE - 1] = 1
        assert _combine(Op.SUM, a, b)[1], lane
        assert not _combine(Op.SUM, a, -b)[1], lane


def test_a_lane_holds_its_elements_in_wire_order() -> None:
    values = np.arange(ELEMS_PER_PACKET, dtype=np.int32) - 5
    packed = lanes.from_values(values)
    assert len(packed) == LANES
    # Element 0 is the most significant 32 bits of lane 0, as on the big-endian wire.
    assert packed[0] >> (LANE_BITS - 32) == (-5) & 0xFFFFFFFF
    assert lanes.to_bytes(packed) == array_bytes(values)
    assert np.array_equal(lanes.to_values(packed), values)


def test_a_short_array_is_padded_with_zero_lanes() -> None:
    packed = lanes.from_values(np.array([7], dtype=np.int32))
    assert packed[1:] == (0,) * (LANES - 1)
    assert lanes.to_values(packed)[0] == 7


# --- 16-bit elements: the same lanes, twice as many elements --------------------------------

EDGES16 = np.array([-(2**15), -(2**15) + 1, -(2**14), -2, -1, 0, 1, 2, 2**14, 2**15 - 2,
                    2**15 - 1], dtype=np.int64)


def _pairs16() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(16)
    pairs = []
    for _ in range(50):
        pairs.append((rng.integers(-(2**15), 2**15, ELEMS16_PER_PACKET),
                      rng.integers(-(2**15), 2**15, ELEMS16_PER_PACKET)))
        pairs.append((rng.choice(EDGES16, ELEMS16_PER_PACKET),
                      rng.choice(EDGES16, ELEMS16_PER_PACKET)))
    a, b = np.meshgrid(EDGES16, EDGES16)
    pairs.append((np.resize(a.ravel(), ELEMS16_PER_PACKET),
                  np.resize(b.ravel(), ELEMS16_PER_PACKET)))
    return pairs


def _combine16(op: Op, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, bool]:
    out, overflow = lanes.combine(op, lanes.from_values(a.astype(np.int16), 16),
                                  lanes.from_values(b.astype(np.int16), 16), width=16)
    return lanes.to_values(out, 16).astype(np.int64), overflow


def test_16_bit_sum_wraps_like_int16_and_flags_overflow_exactly() -> None:
    for a, b in _pairs16():
        got, overflow = _combine16(Op.SUM, a, b)
        exact = a + b
        wrapped = (exact + 2**15) % 2**16 - 2**15
        assert np.array_equal(got, wrapped)
        assert overflow == bool(np.any(exact != wrapped))


def test_16_bit_min_and_max_are_signed_and_elementwise() -> None:
    for a, b in _pairs16():
        assert np.array_equal(_combine16(Op.MAX, a, b)[0], np.maximum(a, b))
        assert np.array_equal(_combine16(Op.MIN, a, b)[0], np.minimum(a, b))


def test_the_16_bit_overflow_of_any_element_is_seen_in_any_lane() -> None:
    """Every element of every lane: its overflow alone is seen, and, folded onto the
    32-bit top bits as the data plane does (lanes.fold16), tested with HIGH."""
    for element in range(ELEMS16_PER_PACKET):
        a = np.zeros(ELEMS16_PER_PACKET, dtype=np.int64)
        b = np.zeros(ELEMS16_PER_PACKET, dtype=np.int64)
        a[element], b[element] = 2**15 - 1, 1
        assert _combine16(Op.SUM, a, b)[1], element
        assert not _combine16(Op.SUM, a, -b)[1], element
        x, y = lanes.from_values(a, 16), lanes.from_values(b, 16)
        lane = element // ELEMS16_PER_LANE
        s = lanes.lane_sum(x[lane], y[lane], 16)
        raw = (x[lane] ^ s) & (y[lane] ^ s)  # what the P4 lanes_sum16 accumulates
        assert lanes.fold16(raw & lanes.HIGH16) & lanes.HIGH, element
        assert lanes.lane_overflow(x[lane], y[lane], s, 16), element


def test_16_bit_min_max_of_an_element_at_each_lane_edge() -> None:
    """The mask spreads to the whole element, the top one of a lane included."""
    for element in (0, ELEMS16_PER_LANE - 1, ELEMS16_PER_LANE, ELEMS16_PER_PACKET - 1):
        a = np.full(ELEMS16_PER_PACKET, -1, dtype=np.int64)
        b = np.zeros(ELEMS16_PER_PACKET, dtype=np.int64)
        a[element], b[element] = 2**15 - 1, -(2**15)
        assert np.array_equal(_combine16(Op.MAX, a, b)[0], np.maximum(a, b)), element
        assert np.array_equal(_combine16(Op.MIN, a, b)[0], np.minimum(a, b)), element


def test_16_bit_elements_lie_in_wire_order_in_the_same_bytes() -> None:
    values = np.arange(ELEMS16_PER_PACKET, dtype=np.int16) - 7
    packed = lanes.from_values(values, 16)
    assert len(packed) == LANES
    assert packed[0] >> (LANE_BITS - 16) == (-7) & 0xFFFF
    assert lanes.to_bytes(packed) == array_bytes(values, width=16)
    assert np.array_equal(lanes.to_values(packed, 16), values)
    assert ELEMS16_PER_LANE * LANES == ELEMS16_PER_PACKET == 2 * ELEMS_PER_PACKET
