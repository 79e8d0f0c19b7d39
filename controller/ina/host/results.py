"""What a worker's calls return and count, and how a call's parts fit together.

A call (ina.host.call) runs a body, the collective itself (an AllReduce:
ina.host.worker), with a ``Reduce``: one reduction at a time, in a window on the
network (ina.host.window) or on the ring of the job's hosts (ina.host.onhosts),
each returning an ``AllreduceResult``. ``CallStats`` counts what a worker's calls
sent, and profiles where their time went.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.protocol.constants import Op


@dataclass(frozen=True)
class AllreduceResult:
    values: npt.NDArray[Any]  # int32, or float32 for a float AllReduce
    overflow: bool  # a 32-bit SUM wrapped somewhere: the values are not exact
    packets: int
    retransmissions: int = 0
    #: Float AllReduce only: per element, how far a value may be from the exact one.
    error_bound: npt.NDArray[np.float64] | None = None
    on_hosts: bool = False  # reduced among the workers: no switch aggregated the job


@dataclass
class CallStats:
    """Packets of the calls a Worker made."""

    packets: int = 0
    retransmissions: int = 0
    early_retransmissions: int = 0
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


#: A reduction backend: (values, op, first sequence number, phase) -> the result.
Reduce = Callable[[npt.NDArray[Any], Op, int, str], AllreduceResult]
#: A call's body, the collective: (a reduction backend, the call's first sequence
#: number) -> the result and the sequence number after the call's last.
CallBody = Callable[[Reduce, int], tuple[AllreduceResult, int]]
