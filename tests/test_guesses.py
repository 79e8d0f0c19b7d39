"""Guessed block exponents (ina.host.guesses), alone: the guess from a history, the
digest every worker compares, and what a lead's result decides."""

from __future__ import annotations

import numpy as np

from ina.host.guesses import (
    DIGEST_VALUES,
    GUESS_HEADROOM,
    GUESS_TOLERANCE,
    Guesses,
    Verdict,
    counted,
    digest,
    guessable,
)
from ina.host.quantize import ZERO_EXPONENT
from ina.protocol.constants import ELEMS_PER_PACKET, WIDTH16, WIDTH32

KEY = (4, 1, True)


def _exps(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def _led(*leads: np.ndarray) -> np.ndarray:
    """The lead's result: the workers' leads reduced with MAX."""
    led: np.ndarray = np.max(np.stack(leads), axis=0).astype(np.int32)
    return led


def _guess(g: Guesses, key: tuple[int, int, bool]) -> np.ndarray:
    guess = g.guess(key)
    assert guess is not None
    return guess


def test_no_guess_before_a_call_of_the_kind_completed() -> None:
    assert Guesses().guess(KEY) is None


def test_the_guess_is_the_largest_of_the_history_plus_the_headroom() -> None:
    g = Guesses(history=2)
    for agreed in (_exps(1, 9, -149), _exps(4, 2, -149), _exps(3, 3, -149)):
        g.learn(KEY, agreed)
    assert np.array_equal(_guess(g, KEY), _exps(4, 3, -149) + GUESS_HEADROOM)  # last two


def test_kinds_of_call_have_their_own_history_and_the_oldest_kind_is_forgotten() -> None:
    g = Guesses(kinds=2)
    for chunks in (1, 2, 3):
        g.learn((chunks, 1, True), _exps(chunks))
    assert g.guess((1, 1, True)) is None
    assert np.array_equal(_guess(g, (3, 1, True)), _exps(3 + GUESS_HEADROOM))


def test_the_digest_is_zero_without_a_guess_and_pairs_of_positive_numbers_with_one() -> None:
    assert not digest(KEY, None).any()
    d = digest(KEY, _exps(1, 2)).astype(np.int64)
    assert d.size == DIGEST_VALUES and np.all(d[0::2] > 0) and np.all(d[1::2] == -d[0::2])


def test_the_digest_differs_for_another_guess_or_another_kind_of_call() -> None:
    d = digest(KEY, _exps(1, 2))
    assert np.array_equal(d, digest(KEY, _exps(1, 2)))
    assert not np.array_equal(d, digest(KEY, _exps(1, 3)))
    assert not np.array_equal(d, digest((4, 2, True), _exps(1, 2)))


def test_only_32_bit_arrays_whose_exponents_fit_the_lead_packet_guess() -> None:
    # The descriptor (14 values), the digest (4) and the specials flag (1) go first.
    assert guessable(ELEMS_PER_PACKET - 19, WIDTH32)
    assert not guessable(ELEMS_PER_PACKET - 18, WIDTH32)
    assert not guessable(1, WIDTH16)


def _lead(guess: np.ndarray | None, exps: np.ndarray, special: int = 0) -> np.ndarray:
    return np.concatenate((digest(KEY, guess), [special], exps)).astype(np.int32)


def test_a_guess_every_worker_made_stands_where_the_agreed_exponent_is_within_it() -> None:
    guess = _exps(5, 5, 5)
    led = _led(_lead(guess, _exps(5, 1, -149)), _lead(guess, _exps(2, 6, 0)))
    v = Verdict.of(led, guess)
    assert v.anyone_guessed and v.all_same
    assert np.array_equal(v.exponents, _exps(5, 6, 0))
    assert v.missed.tolist() == [False, True, False]


def test_a_guess_far_above_the_agreed_exponent_misses_unless_the_block_is_zero() -> None:
    guess = _exps(18, 18, 18, 18)
    agreed = _exps(18 - GUESS_TOLERANCE, 17 - GUESS_TOLERANCE, -13, ZERO_EXPONENT)
    v = Verdict.of(_led(_lead(guess, agreed), _lead(guess, agreed)), guess)
    assert v.missed.tolist() == [False, True, True, False]


def test_the_lead_says_whether_any_worker_holds_a_nan_or_an_infinity() -> None:
    guess = _exps(1)
    assert not Verdict.of(_led(_lead(guess, _exps(1)), _lead(guess, _exps(1))), guess).special
    assert Verdict.of(_led(_lead(guess, _exps(1), 1), _lead(guess, _exps(1))), guess).special


def test_a_call_that_missed_forgets_its_kinds_history() -> None:
    g = Guesses()
    g.learn(KEY, _exps(31))
    g.learn(KEY, _exps(3), missed=True)
    assert _guess(g, KEY).tolist() == [3 + GUESS_HEADROOM]


def test_no_worker_guessed_the_values_follow_with_the_agreed_exponents() -> None:
    v = Verdict.of(_led(_lead(None, _exps(1)), _lead(None, _exps(2))), None)
    assert not v.anyone_guessed and not v.missed.any()


def test_workers_that_guessed_differently_or_not_at_all_reduce_every_block_again() -> None:
    for other in (None, _exps(6, 6)):
        guess = _exps(5, 5)
        led = _led(_lead(guess, _exps(1, 1)), _lead(other, _exps(1, 1)))
        for own in (guess, other):
            v = Verdict.of(led, own)
            assert v.anyone_guessed and not v.all_same and v.missed.all()


def test_a_lead_is_counted_only_if_the_result_can_hold_the_workers_own() -> None:
    mine = _lead(_exps(5), _exps(3))
    assert counted(_led(mine, _lead(None, _exps(1))), mine)
    assert not counted(_led(_lead(_exps(6), _exps(3)), _lead(_exps(6), _exps(3))), mine)
    assert not counted(_led(_lead(_exps(5), _exps(2))), mine)  # an exponent below its own
    no_guess = _lead(None, _exps(3))
    assert not counted(_led(mine), no_guess)  # the round completed without it
