"""The worker API: ``Worker.allreduce`` and ``allreduce()`` send a worker's array
(int32 or float32) for a job and return the reduced array.

An AllReduce is a call (ina.host.call: its start, the agreement on what the workers
call, re-plans, ABORT) whose body reduces the array, cut into packets of
ELEMS_PER_PACKET values with the sequence numbers after the call's descriptor: an
integer array in one reduction; a float32 array in two, first its block exponents
with MAX, then its values as integers (ina.host.quantize). Each reduction runs in
a window on the network (ina.host.window) over a transport (ina.host.transport: a
UDP socket; the reference model and the embedded network offer one too), or on a
ring of the job's workers if no switch aggregates the job (ina.host.onhosts). What
a worker knows of its job: ina.host.config; what its calls return and count:
ina.host.results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.host import quantize
from ina.host.call import KIND_FLOAT, KIND_INT, CallDescriptor, Caller, agree
from ina.host.config import WorkerConfig
from ina.host.results import AllreduceResult, Reduce
from ina.host.transport import UdpTransport
from ina.host.window import DEFAULT_RTO, RtoEstimator, check_ints
from ina.protocol.arith import seq_add
from ina.protocol.constants import Op


@dataclass
class Worker(Caller):
    """A worker of one job: ``allreduce(array)`` returns the reduced array.

    Every worker of the job must make the same calls (array length, op, integer
    or float) in the same order; the workers that disagree all fail with
    CallMismatch. ``timeout`` bounds the time without progress (a peer gone, the
    job not deployed): then AllreduceTimeout says what was observed. How a call
    survives a re-plan of the job or moves to hosts, and the limits of that:
    ``Caller`` (ina.host.call).
    """

    def allreduce(self, values: npt.ArrayLike | Sequence[int],
                  op: Op | None = None) -> AllreduceResult:
        """Reduce ``values`` (integers, or float32: see ina.host.quantize) with ``op``
        (default: the job's)."""
        the_op = self.config.op if op is None else op
        array = np.asarray(values)
        is_float = bool(np.issubdtype(array.dtype, np.floating))
        if not is_float:  # refuse bad input before anything is sent
            check_ints(array)
        elif array.ndim != 1 or array.size == 0:
            raise ValueError("allreduce takes a non-empty one-dimensional array")
        return self.call(lambda reduce, seq: self._allreduce(array, the_op, is_float, seq,
                                                             reduce))

    def _allreduce(self, array: npt.NDArray[Any], op: Op, is_float: bool, seq: int,
                   reduce: Reduce) -> tuple[AllreduceResult, int]:
        """The call's body from ``seq`` with ``reduce``: the result and the sequence
        number after the call's last."""
        descriptor = CallDescriptor(int(array.size), KIND_FLOAT if is_float else KIND_INT,
                                    int(op))
        seq = agree(reduce, descriptor, seq, self.config.job_id)
        if not is_float:
            r = reduce(array, op, seq, "reducing")
            return r, seq_add(seq, r.packets)
        x = array.astype(np.float32)
        e = reduce(quantize.block_exponents(x), Op.MAX, seq, "agreeing on exponents")
        n = self.config.workers
        seq = seq_add(seq, e.packets)
        r = reduce(quantize.quantize(x, e.values, op, n), op, seq, "reducing")
        result = quantize.dequantize(r.values, e.values, op, n)
        return AllreduceResult(result, r.overflow, e.packets + r.packets,
                               e.retransmissions + r.retransmissions,
                               quantize.bound(result, e.values, op, n),
                               on_hosts=r.on_hosts), seq_add(seq, r.packets)


def allreduce(values: npt.ArrayLike, *, topology: str | Path, job: str | Path, worker: str,
              op: Op | str | None = None, timeout: float = 5.0, rto: float = DEFAULT_RTO,
              progress: Callable[[int, int], None] | None = None) -> AllreduceResult:
    """One AllReduce from this host as ``worker`` of ``job``: int or float32 arrays,
    op SUM, MIN or MAX (default: the job's). Every worker of the job must call it
    with an array of the same length."""
    config = WorkerConfig.from_files(topology, job, worker)
    if isinstance(op, str):
        op = Op[op.upper()]
    with UdpTransport(config.target) as transport:
        return Worker(config, transport, timeout=timeout, rto=RtoEstimator(initial=rto),
                      progress=progress).allreduce(values, op)
