"""32-bit (and 16-bit) arithmetic as the data plane does it, in one place.

Values: signed 32-bit integers (or, in packets of width 16, signed 16-bit ones)
whose SUM wraps around (the OVERFLOW flag tells the workers). Sequence numbers:
unsigned 32-bit, compared as RFC 1982 serial numbers (``a`` comes before ``b``
iff ``a - b``, taken as signed 32 bits, is negative), which is what
p4src/include/aggregation.p4 computes as ``(int<32>)(a - b)``.
"""

from __future__ import annotations

from typing import overload

import numpy as np
import numpy.typing as npt

from ina.protocol.constants import WIDTH16, Op

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT16_MIN = -(2**15)
INT16_MAX = 2**15 - 1
#: Sequence numbers count modulo this.
SEQ_MODULO = 1 << 32


@overload
def wrap_int32(value: int) -> int: ...


@overload
def wrap_int32(value: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]: ...


def wrap_int32(value: int | npt.NDArray[np.int64]) -> int | npt.NDArray[np.int64]:
    """An integer (or each element of an int64 array) wrapped around to signed 32 bits."""
    return (value - INT32_MIN) % 2**32 + INT32_MIN


def wrap_int16(value: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Each element of an int64 array wrapped around to signed 16 bits."""
    return (value - INT16_MIN) % 2**16 + INT16_MIN


def combine(op: Op, a: npt.NDArray[np.int32], b: npt.NDArray[np.int32], width: int = 32
            ) -> tuple[npt.NDArray[np.int32], bool]:
    """a and b combined element by element as the data plane does: SUM wraps around
    int32 (int16 for ``width`` 16: the values are int16 ones, held as int32; True if
    some element did), MIN and MAX signed."""
    if op == Op.MIN:
        return np.minimum(a, b), False
    if op == Op.MAX:
        return np.maximum(a, b), False
    total = a.astype(np.int64) + b
    wrapped = wrap_int16(total) if width == WIDTH16 else wrap_int32(total)
    return wrapped.astype(np.int32), bool(np.any(wrapped != total))


def seq_add(seq: int, n: int) -> int:
    """The sequence number ``n`` after ``seq`` (``n`` may be negative)."""
    return (seq + n) % SEQ_MODULO


def seq_diff(a: int, b: int) -> int:
    """How far sequence number ``a`` lies after ``b``: negative if it comes before."""
    return wrap_int32(a - b)
