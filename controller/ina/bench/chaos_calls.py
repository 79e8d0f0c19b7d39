"""The chaos soak's calls (ina.bench.soak), decided by a seed: call ``i`` of the
training-like loop has a size and a kind (int32 or float32) from ``(seed, i)``, and
worker ``r``'s array from ``(seed, i, r)``; every worker computes the exact result
the AllReduce must give (``expected_result``: for float32, the block-floating-point
result of ina.host.quantize, bit for bit), so a result is right or wrong, never
close."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.errors import UsageError
from ina.host import quantize
from ina.protocol.constants import (
    ELEMS_PER_PACKET,
    Op,
)

# --- The calls ------------------------------------------------------------------------

#: Integer values lie in [-INT_RANGE, INT_RANGE): no SUM of up to 64 workers wraps.
INT_RANGE = 1 << 24
#: Values per call: log-uniform from 1 to this (the median 256, a packet; the mean
#: about 23 packets).
MAX_SIZE = 65536
#: One call in FLOAT_EVERY (on average) is a float32 one.
FLOAT_EVERY = 4
#: Elements of a call's descriptor (ina.host.worker.CallDescriptor).
DESCRIPTOR_COUNT = 6


@dataclass(frozen=True)
class CallPlan:
    """Call ``index`` of the loop: its size and kind, the same at every worker."""

    index: int
    size: int
    is_float: bool


def call_plan(seed: int, index: int) -> CallPlan:
    rng = np.random.default_rng([seed, index])
    size = int(np.exp(rng.uniform(0.0, np.log(MAX_SIZE + 1))))
    return CallPlan(index, max(1, min(MAX_SIZE, size)), bool(rng.integers(FLOAT_EVERY) == 0))


def call_array(seed: int, plan: CallPlan, rank: int) -> npt.NDArray[Any]:
    """Worker ``rank``'s array for the call: int32, or gradient-like float32."""
    rng = np.random.default_rng([seed, plan.index, rank, 1])
    if plan.is_float:
        return (rng.standard_normal(plan.size)
                * 10.0 ** rng.integers(-4, 2, plan.size)).astype(np.float32)
    return rng.integers(-INT_RANGE, INT_RANGE, size=plan.size, dtype=np.int32)


def expected_result(seed: int, plan: CallPlan, workers: int,
                    used: npt.NDArray[np.int32] | None = None) -> npt.NDArray[Any]:
    """What a SUM AllReduce of the call must give every worker, exactly: the integer
    sum, or the float32 result of the protocol's block floating point (the block
    exponents agreed with MAX, each worker's values quantized, the integers summed,
    the sum scaled back): see ina.host.quantize. ``used``: the exponents the call
    says it scaled its values by (a guess above the agreed ones: ina.host.guesses),
    taken where no block's is below the agreed one (ValueError otherwise: a value
    would have been clipped)."""
    arrays = [call_array(seed, plan, r) for r in range(workers)]
    if not plan.is_float:
        return np.asarray(np.sum(np.stack(arrays).astype(np.int64), axis=0), dtype=np.int32)
    exponents = np.max(np.stack([quantize.block_exponents(a) for a in arrays]), axis=0)
    if used is not None:
        if used.shape != exponents.shape or np.any(used < exponents):
            raise UsageError(f"exponents {used.tolist()} used, below or unlike the agreed "
                             f"{exponents.tolist()}")
        exponents = used
    total = np.sum(np.stack([quantize.quantize(a, exponents, Op.SUM, workers)
                             for a in arrays]).astype(np.int64), axis=0)
    return quantize.dequantize(total.astype(np.int32), exponents, Op.SUM, workers)


def call_counts(plan: CallPlan) -> set[int]:
    """The element counts the call's packets carry (its descriptor, its exponents if
    float, its values): a forged packet with none of them matches no real one."""
    counts = {DESCRIPTOR_COUNT, min(plan.size, ELEMS_PER_PACKET)}
    if plan.size % ELEMS_PER_PACKET:
        counts.add(plan.size % ELEMS_PER_PACKET)
    if plan.is_float:
        blocks = -(-plan.size // ELEMS_PER_PACKET)
        counts.add(min(blocks, ELEMS_PER_PACKET))
        if blocks % ELEMS_PER_PACKET:
            counts.add(blocks % ELEMS_PER_PACKET)
    return counts
