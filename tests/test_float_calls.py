"""Float calls are right or fail everywhere, never silently wrong: a guessed exponent
far above a block's values is not used, MIN and MAX are exact, NaN and infinities
reach every worker as IEEE's addition gives them, and an integer beyond the wire's
width fails the call at every worker at once (reference model, real Workers in
threads)."""

from __future__ import annotations

import time
from functools import partial

import numpy as np
import pytest

from ina.errors import CallRefused, UsageError
from ina.host.results import AllreduceResult
from ina.host.worker import Worker
from ina.protocol.constants import Op
from ina.spec.job import Job

from inatest import ModelLab, figure1_job, in_threads, model_workers


@pytest.fixture
def deployed(model_lab: ModelLab) -> tuple[Job, dict[str, Worker]]:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    return job, model_workers(model_lab, job, timeout=30.0)


def _call(workers: dict[str, Worker], arrays: dict[str, np.ndarray], op: Op = Op.SUM
          ) -> dict[str, AllreduceResult | Exception]:
    return in_threads({w: partial(workers[w].allreduce, arrays[w], op) for w in arrays})


def _same(workers: dict[str, Worker], values: list[float], op: Op = Op.SUM
          ) -> dict[str, AllreduceResult]:
    """Every worker reduces the same float32 ``values``."""
    outcomes = _call(workers, {w: np.array(values, dtype=np.float32) for w in workers}, op)
    results = {}
    for w, outcome in outcomes.items():
        assert isinstance(outcome, AllreduceResult), (w, outcome)
        results[w] = outcome
    return results


def _values(results: dict[str, AllreduceResult]) -> list[float]:
    (values,) = {tuple(r.values.tolist()) for r in results.values()}  # the same everywhere
    return list(values)


def _within_bound(results: dict[str, AllreduceResult], exact: np.ndarray) -> None:
    for w, r in results.items():
        assert r.error_bound is not None
        assert np.all(np.abs(r.values.astype(np.float64) - exact) <= r.error_bound), w


def test_a_loss_alternating_with_a_large_counter_keeps_its_value(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    _, workers = deployed
    for _ in range(4):  # each call's guess comes from the other one's exponents
        assert _values(_same(workers, [60000.0])) == [240000.0]
        loss = _same(workers, [1e-4])
        _within_bound(loss, np.array([4e-4]))
        assert _values(loss)[0] == pytest.approx(4e-4, rel=1e-5)


def test_one_huge_call_does_not_zero_the_calls_after_it(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    _, workers = deployed
    _within_bound(_same(workers, [2.0**30, 5.0]), np.array([2.0**32, 20.0]))
    for _ in range(3):
        assert _values(_same(workers, [3.0, 5.0])) == [12.0, 20.0]


def test_the_max_of_tiny_negatives_beside_a_one_is_exact(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    _, workers = deployed
    values = np.array([-1e-10, -2e-10, -3e-10, -4e-10, 1.0], dtype=np.float32)
    got = _values(_same(workers, values.tolist(), Op.MAX))
    assert np.array_equal(np.array(got, dtype=np.float32), values)


def test_the_min_is_one_of_the_inputs_bit_for_bit(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    rng = np.random.default_rng(3)
    arrays = {w: (rng.standard_normal(1000) * 10.0 ** rng.integers(-30, 30, 1000))
              .astype(np.float32) for w in job.workers}
    arrays["w1"][:4] = [0.1, 0.2, 0.3, 0.4]
    for w in ("w2", "w3", "w4"):
        arrays[w][:4] = [0.5, 0.5, 0.5, 0.5]
    for op, pick in ((Op.MIN, np.minimum), (Op.MAX, np.maximum)):
        expected = pick.reduce(np.stack(list(arrays.values())))
        for w, outcome in _call(workers, arrays, op).items():
            assert isinstance(outcome, AllreduceResult), (w, outcome)
            assert np.array_equal(outcome.values.view(np.int32), expected.view(np.int32)), w


def test_a_nan_at_one_worker_reaches_every_worker(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    arrays = {w: np.array([1.0, 2.0, 3.0], dtype=np.float32) for w in job.workers}
    arrays["w2"][1] = np.nan
    for w, outcome in _call(workers, arrays).items():
        assert isinstance(outcome, AllreduceResult), (w, outcome)
        assert outcome.values[0] == 4.0 and np.isnan(outcome.values[1]), w
        assert outcome.values[2] == 12.0, w


def test_infinities_add_as_ieee_says(deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    arrays = {w: np.zeros(4, dtype=np.float32) for w in job.workers}
    arrays["w1"][:3] = [np.inf, np.inf, -np.inf]
    arrays["w3"][:3] = [1.0, -np.inf, -np.inf]
    arrays["w4"][3] = 7.0
    for w, outcome in _call(workers, arrays).items():
        assert isinstance(outcome, AllreduceResult), (w, outcome)
        got = outcome.values
        assert got[0] == np.inf and np.isnan(got[1]) and got[2] == -np.inf, (w, got)
        assert got[3] == 7.0, w


@pytest.mark.parametrize("op", [Op.MIN, Op.MAX])
def test_a_nan_wins_a_min_or_a_max(deployed: tuple[Job, dict[str, Worker]], op: Op) -> None:
    job, workers = deployed
    arrays = {w: np.array([1.0, -np.inf, np.inf], dtype=np.float32) for w in job.workers}
    arrays["w4"][:] = np.nan
    for w, outcome in _call(workers, arrays, op).items():
        assert isinstance(outcome, AllreduceResult), (w, outcome)
        assert np.isnan(outcome.values).all(), (w, outcome.values)


def test_a_sum_past_float32s_range_is_infinite(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    _, workers = deployed
    assert _values(_same(workers, [3e38, -3e38])) == [np.inf, -np.inf]


def test_an_integer_beyond_32_bits_at_one_worker_fails_every_worker_at_once(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    arrays = {w: np.arange(600, dtype=np.int64) for w in job.workers}
    arrays["w3"][500] = 3_000_000_000
    began = time.monotonic()
    outcomes = _call(workers, arrays)
    assert time.monotonic() - began < 5.0  # a round trip, not the call's 30 s timeout
    assert isinstance(outcomes["w3"], UsageError), outcomes["w3"]
    assert "3000000000 at index 500" in str(outcomes["w3"])
    for w in ("w1", "w2", "w4"):
        assert isinstance(outcomes[w], CallRefused), (w, outcomes[w])
        assert "rank 2 (w3) refused the call: an integer beyond" in str(outcomes[w])
    after = {w: np.arange(600, dtype=np.int64) for w in job.workers}
    for w, outcome in _call(workers, after).items():  # the next call is exact
        assert isinstance(outcome, AllreduceResult), (w, outcome)
        assert np.array_equal(outcome.values, 4 * np.arange(600)), w
