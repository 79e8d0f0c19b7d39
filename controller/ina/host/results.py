"""What a worker's calls return and count, and how a call's parts fit together.

A call (ina.host.call) runs a body, the collective itself (ina.host.allreduce,
broadcast, reduce, reduce_scatter, allgather, barrier), with a ``Reduce``: one
reduction at a time, in a window on the network (ina.host.window) or on the ring
of the job's hosts (ina.host.onhosts), each returning an ``AllreduceResult``.
``CallStats`` counts what a worker's calls sent, and profiles where their time went.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ina.host.flow import Flow
from ina.protocol.arith import seq_add
from ina.protocol.constants import Op


@dataclass(frozen=True)
class AllreduceResult:
    """What a collective (or one of its reductions) gave this worker."""

    #: The result: int32 or int16 (a reduction of that width), float32 (a float
    #: one), the caller's type (broadcast, allgather); empty where the collective
    #: gives this worker nothing (a reduce to another worker, a barrier).
    values: npt.NDArray[Any]
    overflow: bool  # a SUM wrapped somewhere (32 or 16 bits): the values are not exact
    packets: int
    retransmissions: int = 0
    #: Float AllReduce only: per element, how far a value may be from the exact one.
    error_bound: npt.NDArray[np.float64] | None = None
    on_hosts: bool = False  # reduced among the workers: no switch aggregated the job
    #: The reduction's lead chunk (a call's descriptor, reduced with MAX), if it had one.
    lead: npt.NDArray[np.int32] | None = None
    #: Float reductions only: each block's exponent its values were scaled by (the
    #: agreed one, or a guess above it: ina.host.guesses), which with every worker's
    #: array says what the result is, bit for bit (ina.host.quantize).
    exponents: npt.NDArray[np.int32] | None = None


@dataclass
class CallStats:
    """Packets of the calls a Worker made."""

    packets: int = 0
    retransmissions: int = 0
    early_retransmissions: int = 0
    probes: int = 0  # early retransmissions of a window's oldest chunk, nothing after it
    queries: int = 0  # QUERYs sent before sending a chunk's values again
    held: int = 0  # of those, answered HELD: the values were not sent again
    marked: int = 0  # results that carried a congestion mark (ECN CE)
    syncs: int = 0
    replans: int = 0  # calls run again from their start under a new plan of the job
    on_hosts: int = 0  # calls reduced among the workers (no switch aggregated the job)
    ring_refused: int = 0  # connections to the ring on hosts refused: not the job's workers
    #: Seconds spent in each phase of the calls on switches, summed over the calls:
    #: "starting" (the SYNC's round trip), "agreeing on the call" (the descriptor),
    #: "agreeing on exponents" (float calls), "reducing" (the array). A profile.
    seconds: dict[str, float] = field(default_factory=dict)

    def spent(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds


#: The phase of a float reduction's block exponents (ina.host.collective): a MAX whose
#: result every worker checks against its own exponents, so that a call's descriptor
#: may ride in its window (ina.host.call.agreeing).
EXPONENTS = "agreeing on exponents"
#: The phase that moves the array itself; every other phase is a call's overhead.
REDUCING = "reducing"


@dataclass(frozen=True)
class Lead:
    """Values a reduction's window sends ahead of its array, reduced with MAX in the
    same round trips (a call's descriptor), and ``check``, called with their result
    as soon as it arrives, which may raise to stop the reduction (a mismatched call
    stops before its array is waited for)."""

    values: npt.NDArray[np.int32]
    check: Callable[[npt.NDArray[np.int32]], None]


class Reduce(Protocol):
    """A reduction backend: (values, op, first sequence number, phase, what each
    chunk carries: ina.host.flow (default: every chunk, data to every worker, 32
    bits), and a ``Lead``: values reduced with MAX before the array, in the same
    round trips (a call's descriptor; the result's ``lead``)) -> the result."""

    def __call__(self, values: npt.NDArray[Any], op: Op, seq: int, phase: str,
                 flow: Flow | None = None, lead: Lead | None = None, /
                 ) -> AllreduceResult: ...


@dataclass
class Reductions:
    """A collective's reductions one after another: each starts where the one
    before ended (``seq``: after the last, where the next starts), and their
    packets and retransmissions add up (``total``)."""

    reduce: Reduce
    seq: int
    packets: int = 0
    retransmissions: int = 0

    def __call__(self, values: npt.NDArray[Any], op: Op, phase: str, flow: Flow | None = None,
                 lead: Lead | None = None) -> AllreduceResult:
        r = self.reduce(values, op, self.seq, phase, flow, lead)
        self.seq = seq_add(self.seq, r.packets)
        self.packets += r.packets
        self.retransmissions += r.retransmissions
        return r

    def total(self, r: AllreduceResult) -> AllreduceResult:
        """``r`` with the packets and retransmissions of every reduction so far."""
        return dataclasses.replace(r, packets=self.packets,
                                   retransmissions=self.retransmissions)


#: A call's body, the collective: (a reduction backend, the call's first sequence
#: number) -> the result and the sequence number after the call's last.
CallBody = Callable[[Reduce, int], tuple[AllreduceResult, int]]
