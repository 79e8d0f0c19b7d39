"""32-bit wrap-around and sequence-number order (ina.protocol.arith)."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ina.protocol.arith import INT32_MAX, INT32_MIN, SEQ_MODULO, seq_add, seq_diff, wrap_int32

seqs = st.integers(0, SEQ_MODULO - 1)


@given(st.integers(-(2**40), 2**40))
def test_wrap_int32_is_what_an_int32_register_holds(value: int) -> None:
    expected = int(np.array([value], dtype=np.int64).astype(np.int32)[0])
    assert wrap_int32(value) == expected
    assert wrap_int32(np.array([value], dtype=np.int64))[0] == expected


def test_wrap_int32_at_the_edges() -> None:
    assert wrap_int32(INT32_MAX + 1) == INT32_MIN
    assert wrap_int32(INT32_MIN - 1) == INT32_MAX
    assert wrap_int32(-1) == -1


@given(seqs, st.integers(-(2**31) + 1, 2**31 - 1))
def test_a_sequence_number_n_later_is_n_after(seq: int, n: int) -> None:
    later = seq_add(seq, n)
    assert 0 <= later < SEQ_MODULO
    assert seq_diff(later, seq) == n


def test_sequence_numbers_compare_across_the_wrap() -> None:
    assert seq_diff(0, SEQ_MODULO - 1) == 1
    assert seq_diff(SEQ_MODULO - 1, 0) == -1
    assert seq_add(SEQ_MODULO - 1, 1) == 0
