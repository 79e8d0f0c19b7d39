"""Arrays the CLIs, benchmarks and tests share: the random arrays ``--random SIZE
--seed SEED`` stands for, and a digest to compare results by."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import numpy.typing as npt


def random_array(size: int, seed: int, width: int = 32) -> npt.NDArray[np.int32]:
    """The array `--random SIZE --seed SEED` stands for (tests recompute it); with
    ``width`` 16 (`--width 16`), values that fit in 16-bit elements with room for a
    sum of 8 workers."""
    rng = np.random.default_rng(seed)
    high = 2**12 if width == 16 else 2**24
    return rng.integers(-high, high, size=size, dtype=np.int32)


def random_floats(size: int, seed: int) -> npt.NDArray[np.float32]:
    """The array `--random SIZE --seed SEED --float` stands for: gradient-like values."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(size) * 10.0 ** rng.integers(-4, 2, size)).astype(np.float32)


def digest(values: npt.NDArray[Any]) -> str:
    return hashlib.sha256(values.astype(values.dtype.newbyteorder(">")).tobytes()).hexdigest()[:16]
