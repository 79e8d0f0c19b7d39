"""The SWAR lane arithmetic of the data plane (ina.protocol.lanes, p4src/include/lane_math.p4)
against numpy, element by element, on random and edge values."""

import numpy as np

from ina.protocol import lanes
from ina.protocol.codec import array_bytes
from ina.protocol.constants import ELEMS_PER_LANE, ELEMS_PER_PACKET, LANE_BITS, LANES, Op

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
