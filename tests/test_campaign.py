"""A randomized campaign of calls, none silently wrong: float32, float16 (in 32- and
16-bit elements) and integer AllReduces of random shapes, ops and magnitudes across
workers, in a random order (so that guessed exponents meet calls of another scale),
each result checked against a float64 oracle: within its own error bound, that
bound within the documented one (ina.host.quantize.relative_bound, relative to each
block's largest magnitude), MIN and MAX and integers exact, NaN and infinities as
IEEE's, an integer SUM that wraps flagged. Reference model, real Workers in threads.

CI runs CAMPAIGN_CALLS calls; ``INA_CAMPAIGN_CALLS=5000 make test
PYTEST_ARGS=tests/test_campaign.py`` runs a longer one (``INA_CAMPAIGN_SEED`` too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial

import numpy as np
import numpy.typing as npt
import pytest

from ina.host.guesses import GUESS_TOLERANCE
from ina.host.quantize import relative_bound
from ina.host.results import AllreduceResult
from ina.host.worker import Worker
from ina.protocol.arith import wrap_int32
from ina.protocol.constants import ELEMS_BY_WIDTH, WIDTH16, WIDTH32, Op

from inatest import ModelLab, figure1_job, in_threads, model_workers

CAMPAIGN_CALLS = int(os.environ.get("INA_CAMPAIGN_CALLS", "120"))
CAMPAIGN_SEED = int(os.environ.get("INA_CAMPAIGN_SEED", "45"))
#: Array lengths the campaign draws from: a few kinds of call repeat (their exponents
#: are guessed), the others are new.
SIZES = (1, 7, 320, 321, 1000, 2500)


@dataclass(frozen=True)
class Case:
    """One call of the campaign: every worker's input, the op, the elements' width."""

    arrays: dict[str, npt.NDArray[np.generic]]
    op: Op
    width: int | None
    kind: str


def _magnitudes(rng: np.random.Generator, size: int) -> npt.NDArray[np.float64]:
    """Per element: a scale, per block of 320 its own (10**-30..10**30 or near one
    scale), and heavy tails (Student's t with 2 degrees of freedom)."""
    blocks = -(-size // ELEMS_BY_WIDTH[WIDTH32])
    spread = rng.choice([0, 3, 30])
    scales = 10.0 ** rng.uniform(-spread, spread, blocks)
    return np.repeat(scales, ELEMS_BY_WIDTH[WIDTH32])[:size] * rng.standard_t(2, size)


def _float_case(rng: np.random.Generator, workers: tuple[str, ...], size: int) -> Case:
    kind = str(rng.choice(["float32", "float16", "float16/16"]))
    op = Op(int(rng.choice([Op.SUM, Op.SUM, Op.SUM, Op.MIN, Op.MAX])))
    dtype = np.float32 if kind == "float32" else np.float16
    arrays = {}
    for w in workers:
        x = _magnitudes(rng, size)
        if kind != "float32":
            x = np.clip(x, -6e4, 6e4)
        a = x.astype(dtype)
        if rng.random() < 0.2:
            a[rng.integers(0, size, 3)] = rng.choice([np.nan, np.inf, -np.inf], 3)
        if rng.random() < 0.2:
            a[: min(size, 320)] = 0
        arrays[w] = a
    return Case(arrays, op, WIDTH16 if kind == "float16/16" else None, kind)


def _int_case(rng: np.random.Generator, workers: tuple[str, ...], size: int) -> Case:
    kind = str(rng.choice(["int32", "int16"]))
    op = Op(int(rng.choice([Op.SUM, Op.MIN, Op.MAX])))
    info = np.iinfo(np.int32 if kind == "int32" else np.int16)
    high = int(rng.choice([1000, info.max]))
    arrays = {w: rng.integers(-high, high, size, endpoint=True).astype(kind) for w in workers}
    return Case(arrays, op, None, kind)


def _case(rng: np.random.Generator, workers: tuple[str, ...]) -> Case:
    size = int(rng.choice(SIZES))
    return (_float_case if rng.random() < 0.75 else _int_case)(rng, workers, size)


def _problems(case: Case, r: AllreduceResult) -> list[str]:
    """What is wrong with ``r`` as the result of ``case`` (nothing: right)."""
    stacked = np.stack([a.astype(np.float64) for a in case.arrays.values()])
    n = stacked.shape[0]
    if case.kind.startswith("int"):
        exact = {Op.SUM: stacked.sum(0), Op.MIN: stacked.min(0), Op.MAX: stacked.max(0)}[case.op]
        if case.op == Op.SUM:
            wrapped = wrap_int32(exact.astype(np.int64)) if case.kind == "int32" \
                else exact.astype(np.int64).astype(np.int16)
            if not np.array_equal(r.values.astype(np.int64), np.asarray(wrapped, np.int64)):
                return ["an integer SUM differs from the wrapped exact sum"]
            fits = np.all(np.abs(exact) <= np.iinfo(case.kind).max)
            return [] if fits or r.overflow else ["a wrapped integer SUM not flagged"]
        same = np.array_equal(r.values.astype(np.float64), exact)
        return [] if same else [f"an integer {case.op.name} is not exact"]
    with np.errstate(invalid="ignore"):
        exact = {Op.SUM: stacked.sum(0), Op.MIN: stacked.min(0), Op.MAX: stacked.max(0)}[case.op]
    got = r.values.astype(np.float64)
    if case.op != Op.SUM:
        return [] if np.array_equal(got, exact, equal_nan=True) else [
            f"a float {case.op.name} is not exact"]
    problems = []
    nonfinite = ~np.isfinite(exact)
    if not np.array_equal(got[nonfinite], exact[nonfinite], equal_nan=True):
        problems.append("NaN or an infinity not as IEEE's sum")
    assert r.error_bound is not None
    ok = np.isfinite(exact) & np.isfinite(got)
    if np.any(np.abs(got[ok] - exact[ok]) > r.error_bound[ok]):
        problems.append("a float SUM beyond its own bound")
    width = case.width or WIDTH32
    per = ELEMS_BY_WIDTH[width]
    finite = np.where(np.isfinite(stacked), np.abs(stacked), 0).max(0)
    blocks = -(-finite.size // per)
    peak = np.zeros(blocks * per)
    peak[: finite.size] = finite
    block_peak = np.repeat(peak.reshape(blocks, per).max(1), per)[: finite.size]
    above = 0 if width == WIDTH16 else GUESS_TOLERANCE
    stated = relative_bound(n, width, above) * block_peak + np.abs(got) * 2.0**-24
    if np.any((r.error_bound > stated * (1 + 1e-12))[ok]):
        problems.append("a float SUM's bound beyond the documented one")
    return problems


@pytest.fixture
def workers(model_lab: ModelLab) -> dict[str, Worker]:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    return model_workers(model_lab, job, timeout=30.0)


def test_no_call_of_a_random_campaign_is_silently_wrong(workers: dict[str, Worker]) -> None:
    rng = np.random.default_rng(CAMPAIGN_SEED)
    names = tuple(workers)
    wrong: list[str] = []
    for i in range(CAMPAIGN_CALLS):
        case = _case(rng, names)
        outcomes = in_threads({w: partial(workers[w].allreduce, case.arrays[w], case.op,
                                          case.width) for w in names})
        for w, outcome in outcomes.items():
            assert isinstance(outcome, AllreduceResult), (i, case.kind, w, outcome)
            wrong += [f"call {i} ({case.kind} {case.op.name}, {w}): {p}"
                      for p in _problems(case, outcome)]
    assert not wrong, "\n".join(wrong[:20])
