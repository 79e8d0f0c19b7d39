"""A float call that repeats sends its values with its exponents, scaled by a guess
from the last calls' agreed exponents (ina.host.guesses): one window where two were
needed; blocks the guess missed are reduced again, and workers whose guesses
differ all reduce every block again (reference model, real Workers in threads)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from ina.errors import AllreduceTimeout, CallMismatch
from ina.host.config import WorkerConfig
from ina.host.guesses import GUESS_HEADROOM
from ina.host.results import EXPONENTS, AllreduceResult
from ina.host.worker import Worker
from ina.model.network import ModelTransport
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.spec.job import Job

from inatest import ModelLab, figure1_job, in_threads, model_workers

BLOCKS = 4
SIZE = P * (BLOCKS - 1) + 5


def _floats(job: Job, seed: int) -> dict[str, np.ndarray]:
    """Each worker's array: values in (-1, 1), every block holding a 0.75, so that
    every block's agreed exponent is 0 in every call (and any history guesses alike)."""
    rng = np.random.default_rng(seed)
    arrays = {w: rng.uniform(-0.7, 0.7, SIZE).astype(np.float32) for w in job.workers}
    for array in arrays.values():
        array[::P] = 0.75
    return arrays


def _call(workers: dict[str, Worker], arrays: dict[str, np.ndarray]
          ) -> dict[str, AllreduceResult | Exception]:
    return in_threads({w: partial(workers[w].allreduce, arrays[w]) for w in arrays})


def _within_bound(outcomes: dict[str, AllreduceResult | Exception],
                  arrays: dict[str, np.ndarray]) -> None:
    exact = np.sum([a.astype(np.float64) for a in arrays.values()], axis=0)
    for w, outcome in outcomes.items():
        assert isinstance(outcome, AllreduceResult), (w, outcome)
        assert outcome.error_bound is not None
        assert np.all(np.abs(outcome.values - exact) <= outcome.error_bound), w


def _packets(workers: dict[str, Worker]) -> dict[str, int]:
    return {w: worker.stats.packets for w, worker in workers.items()}


def _sent_in(workers: dict[str, Worker], arrays: dict[str, np.ndarray]) -> set[int]:
    """The call's packets at each worker (its SYNC aside), once it is made exactly."""
    before = _packets(workers)
    _within_bound(_call(workers, arrays), arrays)
    return {workers[w].stats.packets - before[w] for w in workers}


@pytest.fixture
def deployed(model_lab: ModelLab) -> tuple[Job, dict[str, Worker]]:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    return job, model_workers(model_lab, job)


def test_a_first_float_call_agrees_on_its_exponents_before_its_values(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    # The lead (descriptor, digest, exponents), then the values.
    assert _sent_in(workers, _floats(job, 1)) == {1 + BLOCKS}
    assert all(EXPONENTS in w.stats.seconds for w in workers.values())


def test_a_repeated_float_call_sends_its_values_with_its_exponents(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    _sent_in(workers, _floats(job, 1))
    agreeing = {w: worker.stats.seconds[EXPONENTS] for w, worker in workers.items()}
    assert _sent_in(workers, _floats(job, 2)) == {1 + BLOCKS}  # one window
    assert {w: worker.stats.seconds[EXPONENTS] for w, worker in workers.items()} == agreeing


def test_a_block_that_grew_past_its_guess_is_reduced_again_alone(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    _sent_in(workers, _floats(job, 1))
    arrays = _floats(job, 2)
    arrays["w3"][P * 2: P * 3] *= 2.0 ** (GUESS_HEADROOM + 3)
    assert _sent_in(workers, arrays) == {1 + BLOCKS + 1}


def test_a_worker_that_lost_its_guesses_makes_the_call_with_the_others(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    _sent_in(workers, _floats(job, 1))
    assert workers["w2"].guesses is not None
    workers["w2"].guesses.forget()
    # The others' values in one window, w2's zeros in the same chunks, then every
    # block again with the agreed exponents.
    assert _sent_in(workers, _floats(job, 2)) == {1 + 2 * BLOCKS}
    assert _sent_in(workers, _floats(job, 3)) == {1 + BLOCKS}  # every worker guesses again


def test_workers_whose_guesses_differ_reduce_every_block_again(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    _sent_in(workers, _floats(job, 1))
    assert workers["w4"].guesses is not None
    workers["w4"].guesses.headroom += 1
    assert _sent_in(workers, _floats(job, 2)) == {1 + 2 * BLOCKS}


def test_a_new_worker_process_joins_workers_that_guess(
        model_lab: ModelLab, deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    _sent_in(workers, _floats(job, 1))
    config = WorkerConfig.for_job(job, model_lab.topology, "w1")
    workers["w1"] = Worker(config, ModelTransport(model_lab.net, "w1", config.target))
    _within_bound(_call(workers, _floats(job, 2)), _floats(job, 2))


def test_workers_without_guesses_send_the_exponents_first_every_time(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    for worker in workers.values():
        worker.guesses = None
    for seed in (1, 2):
        assert _sent_in(workers, _floats(job, seed)) == {2 + BLOCKS}  # descriptor, exponents


def test_a_call_of_new_processes_after_a_guessing_call_killed_before_all_joined_never_mixes(
        model_lab: ModelLab, deployed: tuple[Job, dict[str, Worker]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # w1..w3 guess and send their values with the lead, w4 never joins, and they die
    # without an ABORT: their values stay in the cells. New processes (no guesses)
    # start where they did; the lead shows that some worker guessed, so every block
    # is reduced again past the dead call's chunks. Or the dead leads completed the
    # new call's lead without a new worker's: every worker fails, the next is exact.
    job, workers = deployed
    _sent_in(workers, _floats(job, 1))
    for w in workers.values():
        w.timeout = 0.3
        monkeypatch.setattr(w, "_abort", lambda: None)  # killed: no ABORT
    dead = _floats(job, 2)
    del dead["w4"]
    assert all(isinstance(o, AllreduceTimeout) for o in _call(workers, dead).values())
    fresh = model_workers(model_lab, job)
    arrays = _floats(job, 3)
    outcomes = _call(fresh, arrays)
    if not all(isinstance(o, AllreduceResult) for o in outcomes.values()):
        assert not any(isinstance(o, AllreduceResult) for o in outcomes.values()), outcomes
        arrays = _floats(job, 4)
        outcomes = _call(fresh, arrays)
    _within_bound(outcomes, arrays)


def _mismatched(outcomes: dict[str, AllreduceResult | Exception], says: str) -> None:
    for w, outcome in outcomes.items():
        assert isinstance(outcome, CallMismatch), (w, outcome)
        assert says in str(outcome), (w, outcome)


def test_workers_whose_float_arrays_differ_in_length_all_fail_saying_so(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    # Their leads carry different numbers of exponents: they still meet in one round.
    job, workers = deployed
    arrays = _floats(job, 1)
    arrays["w2"] = arrays["w2"][: P * 2]
    _mismatched(_call(workers, arrays), f"array length from {P * 2} to {SIZE}")


def test_a_worker_whose_repeated_float_call_differs_fails_with_the_others_saying_so(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    _sent_in(workers, _floats(job, 1))
    arrays = _floats(job, 2)
    arrays["w4"] = np.concatenate((arrays["w4"], arrays["w4"]))
    _mismatched(_call(workers, arrays), f"array length from {SIZE} to {2 * SIZE}")


def test_a_float_call_and_an_integer_call_fail_at_every_worker_saying_so(
        deployed: tuple[Job, dict[str, Worker]]) -> None:
    job, workers = deployed
    for first in (True, False):  # a first call, and one that follows a completed one
        arrays: dict[str, np.ndarray] = dict(_floats(job, 1))
        if not first:
            _sent_in(workers, arrays)
        arrays["w3"] = np.arange(SIZE, dtype=np.int32)
        _mismatched(_call(workers, arrays), "kind from integers to floats")
