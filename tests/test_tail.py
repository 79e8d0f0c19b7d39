"""A run's step times summarised as the benchmarks report them: the median, the
tail by nearest rank, and the steps that stalled."""

from __future__ import annotations

import pytest

from ina.bench.timing import Tail


def test_percentiles_are_steps_that_happened() -> None:
    tail = Tail.of([float(t) for t in range(1, 101)])
    assert (tail.median, tail.p90, tail.p99, tail.largest) == (50.5, 90.0, 99.0, 100.0)


def test_a_step_over_three_medians_is_a_stall() -> None:
    tail = Tail.of([1.0] * 9 + [3.0, 3.5])
    assert tail.stalls == 1 and tail.total == 15.5


def test_steps_come_from_the_clock_of_their_ends() -> None:
    tail = Tail.of_clock([0.5, 1.0, 1.5, 10.0])
    assert (tail.median, tail.largest, tail.stalls) == (0.5, 8.5, 1)


def test_no_steps_is_refused() -> None:
    with pytest.raises(ValueError, match="no times"):
        Tail.of([])
