"""Guessed block exponents: a float reduction in one window, not two.

A float reduction (ina.host.quantize) agrees on its blocks' exponents first, a MAX
of its own, and only then sends its values: two round trips. But a training job
makes the same call again and again (a DDP bucket: same length, same op), and its
blocks' exponents move little from one step to the next. So a worker keeps, per
kind of call (``key``: its chunks, its op, where its data goes), the exponents
agreed in its last GUESS_HISTORY calls, and guesses this call's as their largest
plus GUESS_HEADROOM bits (``Guesses.guess``). It then sends its values scaled by
the guess in the same window as its exponents (the window's lead, with the call's
descriptor), and the lead's result decides, identically at every worker
(``Verdict``):

- every worker guessed, and the same (a digest of the guess rides in the lead as
  ``[d, -d]``, reduced with MAX: its largest and its smallest): the values stand
  for every block whose agreed exponent is within the guess; the other blocks
  (``missed``) are reduced again with the agreed exponents, next in sequence;
- no worker guessed (a call's first of its kind): the values follow with the
  agreed exponents, as without guesses;
- some guessed and others did not, or differently (a worker restarted, or one
  that failed a call the others completed): every block is reduced again; a
  worker without a guess first sends zeros in the chunks the others filled, so
  that every worker's sequence numbers stay in step.

The cost of a guess: up to its headroom and the history's spread in precision
(the values are scaled to the guess, not to the agreed exponent: the error bound
says it). Measured on the example's training (examples/train.py, 4 workers,
gradients of 103 blocks): 2.5% of calls missed at least one block with 8 calls of
history and 2 bits of headroom, the guess 3.2 bits above the agreed exponent on
average; with 1 call and 1 bit, 73% missed.

Only for 32-bit elements (16-bit ones have no bits to spare) and for arrays whose
exponents fit the lead's packet with the descriptor (``guessable``): a longer
array's data outweighs the extra round trip.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ina.protocol.constants import ELEMS_PER_PACKET, WIDTH32

IntArray = npt.NDArray[np.int32]
#: A kind of call: its chunks, its op, whether every worker gets every chunk.
Key = tuple[int, int, bool]
#: Agreed exponents kept per kind of call.
GUESS_HISTORY = 8
#: Bits a guess adds above the largest exponent of the history.
GUESS_HEADROOM = 2
#: Kinds of call remembered (the least recently used ones are forgotten).
GUESS_KINDS = 64
#: The digest of a guess in the lead: two fields, each as ``[d, -d]``.
DIGEST_VALUES = 4
#: Lead values a call's descriptor takes (ina.host.call.CallDescriptor: six fields,
#: each as a pair).
DESCRIPTOR_VALUES = 12


def guessable(blocks: int, width: int) -> bool:
    """Whether a float reduction of ``blocks`` blocks of ``width``-bit elements may
    guess: its exponents, the digest and a descriptor fit one lead packet."""
    return width == WIDTH32 and DESCRIPTOR_VALUES + DIGEST_VALUES + blocks <= ELEMS_PER_PACKET


def digest(key: Key, guess: IntArray | None) -> IntArray:
    """The lead's digest fields for ``guess`` (zeros: no guess): two positive 31-bit
    numbers, each as ``[d, -d]``."""
    if guess is None:
        return np.zeros(DIGEST_VALUES, dtype=np.int32)
    h = hashlib.blake2b(repr(key).encode() + guess.astype("<i4").tobytes(), digest_size=8)
    raw = int.from_bytes(h.digest(), "little")
    d1, d2 = (raw & 0x7FFFFFFF) | 1, ((raw >> 32) & 0x7FFFFFFF) | 1
    return np.array([d1, -d1, d2, -d2], dtype=np.int32)


@dataclass
class Guesses:
    """A worker's history of agreed exponents, per kind of call, and how many of its
    reductions sent their values with a guess (``guessed``)."""

    history: int = GUESS_HISTORY
    headroom: int = GUESS_HEADROOM
    kinds: int = GUESS_KINDS
    guessed: int = 0
    _agreed: OrderedDict[Key, deque[IntArray]] = field(default_factory=OrderedDict)

    def guess(self, key: Key) -> IntArray | None:
        """This call's exponents, guessed from the last ones agreed (None: no history)."""
        past = self._agreed.get(key)
        if not past:
            return None
        self._agreed.move_to_end(key)
        guess: IntArray = (np.max(np.stack(past), axis=0) + self.headroom).astype(np.int32)
        return guess

    def learn(self, key: Key, agreed: IntArray) -> None:
        """A call of ``key`` completed with these exponents agreed."""
        past = self._agreed.setdefault(key, deque(maxlen=self.history))
        past.append(np.asarray(agreed, dtype=np.int32).copy())
        self._agreed.move_to_end(key)
        while len(self._agreed) > self.kinds:
            self._agreed.popitem(last=False)

    def forget(self) -> None:
        self._agreed.clear()


@dataclass(frozen=True)
class Verdict:
    """What a lead's result (digest fields, then exponents, MAX-reduced) decides, the
    same at every worker: ``exponents`` agreed; whether any worker guessed, and
    whether all guessed the same; the blocks to reduce again (``missed``)."""

    exponents: IntArray
    anyone_guessed: bool
    all_same: bool
    missed: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, led: IntArray, guess: IntArray | None) -> Verdict:
        fields = led[:DIGEST_VALUES].astype(np.int64)
        high, low = fields[0::2], -fields[1::2]
        exponents = led[DIGEST_VALUES:].astype(np.int32)
        anyone = bool(np.any(high != 0))
        same = anyone and bool(np.all(high == low))
        if same and guess is not None:
            missed = exponents > guess
        else:
            missed = np.full(exponents.size, anyone, dtype=bool)
        return cls(exponents, anyone, same, missed)


def counted(led: IntArray, mine: IntArray) -> bool:
    """Whether a lead's result (digest fields and exponents) can include this
    worker's own lead ``mine``: each digest field between the smallest and the
    largest, each exponent at least this worker's. Not so: a round of an interrupted
    call was completed in the switches at this sequence number without it."""
    fields, own = led[:DIGEST_VALUES].astype(np.int64), mine[:DIGEST_VALUES].astype(np.int64)
    high, low = fields[0::2], -fields[1::2]
    return bool(np.all((low <= own[0::2]) & (own[0::2] <= high))
                and np.all(led[DIGEST_VALUES:] >= mine[DIGEST_VALUES:]))
