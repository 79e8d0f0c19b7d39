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
  for every block whose agreed exponent ``E`` is within GUESS_TOLERANCE bits below
  the guess ``G`` (``E <= G <= E + GUESS_TOLERANCE``); the other blocks
  (``missed``) are reduced again with the agreed exponents, next in sequence: a
  block above its guess would be clipped, one far below it would keep too few bits
  (a counter of 60000 and a loss of 1e-4 of one size alternating: the loss's
  guess came from the counter). A block that is zero at every worker is exact at
  any scale, so it never misses;
- no worker guessed (a call's first of its kind): the values follow with the
  agreed exponents, as without guesses;
- some guessed and others did not, or differently (a worker restarted, or one
  that failed a call the others completed): every block is reduced again; a
  worker without a guess first sends zeros in the chunks the others filled, so
  that every worker's sequence numbers stay in step.

A call that missed a block forgets the history of its kind: the next guess is
this call's agreed exponents plus the headroom, so that one outlier (``2**30``
once) costs one call's blocks again, not the next GUESS_HISTORY calls'.

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

from ina.host.quantize import ZERO_EXPONENT
from ina.protocol.constants import ELEMS_PER_PACKET, WIDTH32

IntArray = npt.NDArray[np.int32]
#: A kind of call: its chunks, its op, whether every worker gets every chunk.
Key = tuple[int, int, bool]
#: Agreed exponents kept per kind of call.
GUESS_HISTORY = 8
#: Bits a guess adds above the largest exponent of the history.
GUESS_HEADROOM = 2
#: Bits a used guess may lie above a block's agreed exponent: what it may cost in
#: precision (ina.host.quantize's bound). Beyond, the block is reduced again.
GUESS_TOLERANCE = 6
#: Kinds of call remembered (the least recently used ones are forgotten).
GUESS_KINDS = 64
#: The digest of a guess in the lead: two fields, each as ``[d, -d]``.
DIGEST_VALUES = 4
#: The lead's values before its exponents: the digest, then whether any worker holds
#: a NaN or an infinity (1, MAX: ina.host.floatbits).
LEAD_HEAD = DIGEST_VALUES + 1
#: Lead values a call's descriptor takes (ina.host.call.CallDescriptor: seven
#: fields, each as a pair).
DESCRIPTOR_VALUES = 14


def guessable(blocks: int, width: int) -> bool:
    """Whether a float reduction of ``blocks`` blocks of ``width``-bit elements may
    guess: its exponents, the digest and a descriptor fit one lead packet."""
    return width == WIDTH32 and DESCRIPTOR_VALUES + LEAD_HEAD + blocks <= ELEMS_PER_PACKET


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

    def learn(self, key: Key, agreed: IntArray, missed: bool = False) -> None:
        """A call of ``key`` completed with these exponents agreed; ``missed``: its
        guess missed a block (the history is forgotten, this call's kept)."""
        past = self._agreed.setdefault(key, deque(maxlen=self.history))
        if missed:
            past.clear()
        past.append(np.asarray(agreed, dtype=np.int32).copy())
        self._agreed.move_to_end(key)
        while len(self._agreed) > self.kinds:
            self._agreed.popitem(last=False)

    def forget(self) -> None:
        self._agreed.clear()


@dataclass(frozen=True)
class Verdict:
    """What a lead's result (digest fields, the specials flag, then exponents,
    MAX-reduced) decides, the same at every worker: ``exponents`` agreed; whether
    any worker guessed, and whether all guessed the same; the blocks to reduce
    again (``missed``); whether a worker holds a NaN or an infinity (``special``)."""

    exponents: IntArray
    anyone_guessed: bool
    all_same: bool
    missed: npt.NDArray[np.bool_]
    special: bool = False

    @classmethod
    def of(cls, led: IntArray, guess: IntArray | None) -> Verdict:
        fields = led[:DIGEST_VALUES].astype(np.int64)
        high, low = fields[0::2], -fields[1::2]
        exponents = led[LEAD_HEAD:].astype(np.int32)
        anyone = bool(np.any(high != 0))
        same = anyone and bool(np.all(high == low))
        if same and guess is not None:
            missed = misses(exponents, guess)
        else:
            missed = np.full(exponents.size, anyone, dtype=bool)
        return cls(exponents, anyone, same, missed, bool(led[DIGEST_VALUES] > 0))


def misses(agreed: IntArray, guess: IntArray) -> npt.NDArray[np.bool_]:
    """Per block, whether ``guess`` cannot stand for the ``agreed`` exponent: below
    it (its values would be clipped), or more than GUESS_TOLERANCE bits above it
    (too few of their bits kept), unless the block is zero at every worker."""
    agreed, guess = agreed.astype(np.int64), guess.astype(np.int64)
    below = (guess - agreed > GUESS_TOLERANCE) & (agreed > ZERO_EXPONENT)
    return np.asarray((agreed > guess) | below, dtype=bool)


def counted(led: IntArray, mine: IntArray) -> bool:
    """Whether a lead's result (digest fields, specials flag, exponents) can include this
    worker's own lead ``mine``: each digest field between the smallest and the
    largest, each exponent at least this worker's. Not so: a round of an interrupted
    call was completed in the switches at this sequence number without it."""
    fields, own = led[:DIGEST_VALUES].astype(np.int64), mine[:DIGEST_VALUES].astype(np.int64)
    high, low = fields[0::2], -fields[1::2]
    return bool(np.all((low <= own[0::2]) & (own[0::2] <= high))
                and np.all(led[DIGEST_VALUES:] >= mine[DIGEST_VALUES:]))
