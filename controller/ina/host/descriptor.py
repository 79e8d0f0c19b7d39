"""A call's descriptor: what every worker of a call agrees on before any value is
returned (step 2 of a call, ina.host.call): the array's length, its kind, the op,
the collective, its root and its elements' width, and whether a worker refuses the
call. ``agreeing`` wraps a call's reductions so that the first one carries it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ina.errors import AllreduceError, CallMismatch, CallRefused, UsageError
from ina.host.config import WorkerConfig
from ina.host.flow import Flow
from ina.host.results import EXPONENTS, AllreduceResult, Lead, Reduce, Reductions
from ina.protocol.constants import OP_COPY, WIDTH32, Op


@runtime_checkable
class StartsEarly(Protocol):
    """A reduction that knows whether its call started without a SYNC (``early``:
    the worker's array may then ride in the descriptor's window)."""

    early: bool


#: Kinds of call: an integer or float reduction; a collective that moves elements of
#: k bytes as they are (broadcast, allgather: KIND_BYTES + k).
KIND_INT, KIND_FLOAT, KIND_BYTES = 0, 1, 16


class Collective(enum.IntEnum):
    """The collective a call makes (its descriptor's ``collective``)."""

    ALLREDUCE = 1
    BROADCAST = 2
    REDUCE = 3
    REDUCE_SCATTER = 4
    ALLGATHER = 5
    BARRIER = 6


#: A descriptor's ``root`` when the collective has none.
NO_ROOT = -1


def _kind_name(kind: int) -> str:
    if kind == KIND_INT:
        return "integers"
    if kind == KIND_FLOAT:
        return "floats"
    return f"elements of {kind - KIND_BYTES} bytes"


def _op_name(code: int) -> str:
    if code == OP_COPY:
        return "COPY (each chunk once from its owner)"
    return Op(code).name if code in Op._value2member_map_ else str(code)


def _collective_name(code: int) -> str:
    return Collective(code).name.lower() if code in Collective._value2member_map_ \
        else str(code)


class Refusal(enum.IntEnum):
    """Why a worker refuses a call (its descriptor's ``refusal``): its own input does
    not fit the data plane. Every worker then fails the call, naming it."""

    NONE = 0
    #: An integer beyond the signed range of the call's elements.
    INT_RANGE = 1


REFUSALS = {Refusal.INT_RANGE: "an integer beyond the range of the call's elements"}
#: A descriptor's ``refusal`` is ``code << REFUSAL_SHIFT | rank``: MAX gives the
#: highest code, and of the ranks refusing so, the highest.
REFUSAL_SHIFT = 20


@dataclass(frozen=True)
class CallDescriptor:
    """What every worker of a call must agree on: the array's length, its kind, the
    op, the collective, its root (the rank a broadcast comes from or a reduce goes
    to; NO_ROOT) and the elements' width; and ``refusal``, whether a worker refuses
    the call (``Refusal``, with the worker's rank; 0: none) with ``detail``, what is
    wrong with its input (not sent). Reduced with MAX as ``[f, -f]`` for each field
    ``f``: for each field, the largest and the smallest value any worker gave."""

    size: int
    kind: int
    op: int
    collective: int = Collective.ALLREDUCE
    root: int = NO_ROOT
    width: int = WIDTH32
    refusal: int = 0
    detail: str = ""

    FIELDS: ClassVar[tuple[tuple[str, Callable[[int], str]], ...]] = (
        ("array length", str), ("kind", _kind_name), ("op", _op_name),
        ("collective", _collective_name), ("root rank", str), ("element width", str))

    def values(self) -> npt.NDArray[np.int32]:
        fields = (self.size, self.kind, self.op, self.collective, self.root, self.width,
                  self.refusal)
        return np.array([v for f in fields for v in (f, -f)], dtype=np.int32)

    @staticmethod
    def disagreement(reduced: npt.NDArray[np.int32]) -> list[str]:
        """What the workers disagree on, from the reduced descriptor."""
        problems = []
        for i, (name, show) in enumerate(CallDescriptor.FIELDS):
            high, low = int(reduced[2 * i]), -int(reduced[2 * i + 1])
            if high != low:
                problems.append(f"{name} from {show(low)} to {show(high)}")
        return problems

    def refused(self, reduced: npt.NDArray[np.int32], config: WorkerConfig) -> None:
        """Fail the call if the reduced descriptor says a worker refuses it: this
        worker's own refusal as a UsageError (its input is at fault), another's as
        CallRefused, naming that worker and why."""
        high = int(reduced[2 * len(self.FIELDS)])
        if high <= 0:
            return
        if self.refusal:
            raise UsageError(f"job {config.job_id}: {config.name}: {self.detail}; the "
                             "call is refused at every worker")
        code, rank = high >> REFUSAL_SHIFT, high & ((1 << REFUSAL_SHIFT) - 1)
        who = config.peers[rank] if rank < len(config.peers) else "?"
        why = REFUSALS.get(Refusal(code), str(code)) if code in Refusal._value2member_map_ \
            else f"code {code}"
        raise CallRefused(f"job {config.job_id}: rank {rank} ({who}) refused the call: "
                          f"{why}; the call is refused at every worker")


def refusal(code: Refusal, rank: int) -> int:
    """A descriptor's ``refusal`` field: ``code`` at ``rank``."""
    return int(code) << REFUSAL_SHIFT | rank


def agreeing(reduce: Reduce, descriptor: CallDescriptor, config: WorkerConfig) -> Reduce:
    """``reduce`` that agrees on the call first (step 2): the call's descriptor is
    reduced with MAX at the call's first sequence number, and the call's first
    reduction follows at the next one. A worker that started the call without a
    SYNC sends its array in the descriptor's window (``_after_descriptor``); the
    others, once the descriptor's result shows that every worker made the same
    call (else CallMismatch at every worker, before any value is returned).

    A float call's exponents (phase EXPONENTS: a MAX that each worker checks against
    its own, ina.host.collective) need no such wait: the descriptor rides as the
    lead chunk of their window, in the same round trips, and the mismatch stops the
    window as soon as the lead's result shows it. So a call costs one round trip
    before its array's reduction, its descriptor's or its exponents'. A first
    reduction with a lead of its own (a float call's guessed exponents:
    ina.host.guesses) takes the descriptor at the head of that lead: its values
    were scaled without waiting for any result, so the call takes one round trip
    in all; its result's ``lead`` is its own lead's part."""
    first = True
    described = len(descriptor.values())
    job_id = config.job_id

    def check(reduced: npt.NDArray[np.int32]) -> None:
        problems = CallDescriptor.disagreement(reduced)
        if problems:
            raise CallMismatch(
                f"job {job_id}: the workers do not make the same call: "
                + "; ".join(problems) + " (every worker must make the same collectives, "
                "with the same array length, type, op, root and width, in the same order)")
        descriptor.refused(reduced, config)

    def agreed(values: npt.NDArray[Any], op: Op, seq: int, phase: str,
               flow: Flow | None = None, lead: Lead | None = None) -> AllreduceResult:
        nonlocal first
        if not first:
            return reduce(values, op, seq, phase, flow, lead)
        first = False
        mine = Lead(descriptor.values(), check)
        if phase == EXPONENTS and op == Op.MAX and lead is None:
            return reduce(values, op, seq, phase, flow, mine)
        if lead is not None:
            inner = lead

            def both(reduced: npt.NDArray[np.int32]) -> None:
                check(reduced[:described])
                inner.check(reduced[described:])

            r = reduce(values, op, seq, phase, flow,
                       Lead(np.concatenate((mine.values, inner.values)), both))
            return dataclasses.replace(r, lead=None if r.lead is None
                                       else r.lead[described:])
        early = isinstance(reduce, StartsEarly) and reduce.early
        return _after_descriptor(reduce, values, op, seq, phase, flow, mine, early, job_id)

    return agreed


def _after_descriptor(reduce: Reduce, values: npt.NDArray[Any], op: Op, seq: int,
                      phase: str, flow: Flow | None, descriptor: Lead, early: bool,
                      job_id: int) -> AllreduceResult:
    """A call's first reduction (not a float one's), after its ``descriptor``, which
    leads with ``[e, -e]``: e = 1 if this worker sends its array in the same window
    (``early``: it completed the call before this one, so it knows the start without
    a SYNC), else 0, its array following once the descriptor's result is back.
    Every worker sees the same result: all early, so the arrays stand (one round
    trip); none, so the arrays follow; some, so the others fill the early ones'
    chunks with zeros and every worker sends its array after them. The early
    arrays went before every worker was known to have joined; a call of fresh
    processes at the same start as a dead early one (its workers killed before
    all joined) sees its ``e`` in the descriptor's result and sends its arrays
    past what that call left in the cells."""
    described = descriptor.values.size

    def flags(reduced: npt.NDArray[np.int32]) -> tuple[int, int]:
        """The largest and the least e of the workers: MAX of [e, -e]."""
        return int(reduced[described]), -int(reduced[described + 1])

    def check(reduced: npt.NDArray[np.int32]) -> None:
        descriptor.check(reduced[:described])
        high, low = flags(reduced)
        if not low <= int(early) <= high:
            raise AllreduceError(
                f"job {job_id}: the call's descriptor came back without this worker's: "
                "a round of an interrupted call was left in the switches at its start; "
                "this call is given up, the next one is exact")

    e = int(early)
    lead = Lead(np.concatenate((descriptor.values, np.array([e, -e], dtype=np.int32))),
                check)
    run = Reductions(reduce, seq)
    if early:
        first = run(values, op, phase, flow, lead)
    else:
        first = run(np.zeros(0, dtype=np.int32), Op.MAX, "agreeing on the call", None, lead)
    assert first.lead is not None
    high, low = flags(first.lead)
    if early and low == 1:
        return dataclasses.replace(first, lead=None)
    if not early and high == 1:
        run(np.zeros_like(values), op, phase, flow)  # fills the early ones' chunks
    return run.total(run(values, op, phase, flow))
