"""Float32 over integers: block exponents, no overflow, and the stated error bound."""

import numpy as np
import pytest

from ina.host import quantize as qz
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import Op


def _reduce_quantized(xs: list[np.ndarray], op: Op) -> tuple[np.ndarray, np.ndarray]:
    """What the workers and switches compute together: (result, bound)."""
    exponents = np.max([qz.block_exponents(x) for x in xs], axis=0)
    qs = [qz.quantize(x, exponents, op, len(xs)).astype(np.int64) for x in xs]
    if op == Op.SUM:
        total = np.sum(qs, axis=0)
    elif op == Op.MIN:
        total = np.min(qs, axis=0)
    else:
        total = np.max(qs, axis=0)
    assert np.all(np.abs(total) < 2**31), "the integer reduction must not overflow"
    result = qz.dequantize(total.astype(np.int32), exponents, op, len(xs))
    return result, qz.bound(result, exponents, op, len(xs))


@pytest.mark.parametrize("op", [Op.SUM, Op.MIN, Op.MAX])
@pytest.mark.parametrize("workers", [1, 4, 7])
def test_result_is_within_the_bound_of_the_exact_reduction(op: Op, workers: int) -> None:
    rng = np.random.default_rng(workers)
    # Blocks of very different magnitudes, negatives, zeros.
    scales = np.repeat(10.0 ** rng.integers(-30, 30, 20), P)
    xs = [(rng.standard_normal(20 * P) * scales).astype(np.float32) for _ in range(workers)]
    xs[0][:P] = 0.0
    result, bound = _reduce_quantized(xs, op)
    stacked = np.stack(xs).astype(np.float64)
    exact = {Op.SUM: stacked.sum(0), Op.MIN: stacked.min(0), Op.MAX: stacked.max(0)}[op]
    assert np.all(np.abs(result.astype(np.float64) - exact) <= bound)


def test_the_bound_is_relative_to_the_blocks_magnitude() -> None:
    x = np.full(P, 1.5, dtype=np.float32)
    _, bound = _reduce_quantized([x, x, x, x], Op.SUM)
    # E = 1, headroom 2: s = 27, so four roundings of 2**-28 each, plus float32 rounding.
    assert bound[0] == pytest.approx(4 * 2.0**-28 + 6.0 * 2.0**-24)


def test_zero_blocks_stay_zero() -> None:
    result, _ = _reduce_quantized([np.zeros(70, dtype=np.float32)] * 3, Op.SUM)
    assert not result.any()


def test_non_finite_values_are_left_out_of_the_block_exponents() -> None:
    # They travel apart (ina.host.floatbits).
    x = np.array([1.0, np.inf, np.nan, -np.inf], dtype=np.float32)
    assert qz.block_exponents(x).tolist() == [1]
