"""The worker API: a ``Worker``'s collectives, and one-call functions for each
(``allreduce()``, ``broadcast()``, ``reduce()``, ``reduce_scatter()``,
``allgather()``, ``barrier()``), which ``ina`` exports.

Each collective is a call (ina.host.call: its start, the agreement on what the
workers call, re-plans, ABORT, the fallback to hosts) whose body is a module of its
own: ina.host.allreduce, broadcast, reduce, reduce_scatter, allgather, barrier, on
what they share (ina.host.collective). Each reduction of a body runs in a window on
the network (ina.host.window) over a transport (ina.host.transport: a UDP socket;
the reference model and the embedded network offer one too), or on a ring of the
job's workers if no switch aggregates the job (ina.host.onhosts). What a worker
knows of its job: ina.host.config; what its calls return and count:
ina.host.results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy.typing as npt

from ina.host.allgather import allgather as allgather_body
from ina.host.allreduce import allreduce as allreduce_body
from ina.host.barrier import barrier as barrier_body
from ina.host.broadcast import broadcast as broadcast_body
from ina.host.call import Caller
from ina.host.config import WorkerConfig
from ina.host.link import Endpoints, LinkTransport, on_loopback
from ina.host.reduce import reduce_to
from ina.host.reduce_scatter import reduce_scatter as reduce_scatter_body
from ina.host.results import AllreduceResult
from ina.host.transport import UdpTransport
from ina.host.window import DEFAULT_RTO, RtoEstimator
from ina.protocol.constants import Op
from ina.spec.topology import Topology


@dataclass
class Worker(Caller):
    """A worker of one job, rank ``config.rank`` of its workers: its collectives
    return an ``AllreduceResult`` each.

    Every worker of the job must make the same calls (collective, array length and
    type, op, root, element width) in the same order; the workers that disagree
    all fail with CallMismatch. ``timeout`` bounds the time without progress (a
    peer gone, the job not deployed): then AllreduceTimeout says what was observed.
    How a call survives a re-plan of the job or moves to hosts, and the limits of
    that: ``Caller`` (ina.host.call).

    Reductions (``allreduce``, ``reduce``, ``reduce_scatter``) take integers
    (exact, SUM wrapping around in 32 or 16 bits with the overflow flag) or floats
    (through the block quantization: float32 results with an error bound per
    element); ``width`` 16 puts twice as many values in a packet (the default for
    float16 and int16 arrays; integers must then fit in 16 bits). ``op`` defaults
    to the job's. Movements (``broadcast``, ``allgather``) take any type and give
    it back bit for bit.
    """

    def allreduce(self, values: npt.ArrayLike | Sequence[int], op: Op | None = None,
                  width: int | None = None) -> AllreduceResult:
        """Every worker's ``values`` reduced with ``op``, at every worker."""
        return self.call(allreduce_body(self.config, values, self._op(op), width,
                                        self.guesses))

    def reduce(self, values: npt.ArrayLike, root: int = 0, op: Op | None = None,
               width: int | None = None) -> AllreduceResult:
        """Every worker's ``values`` reduced with ``op``, at rank ``root`` only (the
        others' result has no values)."""
        return self.call(reduce_to(self.config, values, root, self._op(op), width,
                                   self.guesses))

    def reduce_scatter(self, values: npt.ArrayLike, op: Op | None = None,
                       width: int | None = None) -> AllreduceResult:
        """Every worker's ``values`` (S of them) reduced with ``op``; this worker gets
        its part: values ``[r * P, (r + 1) * P)`` of the result, P = ceil(S / N)."""
        return self.call(reduce_scatter_body(self.config, values, self._op(op), width,
                                             self.guesses))

    def broadcast(self, values: npt.ArrayLike, root: int = 0) -> AllreduceResult:
        """Rank ``root``'s ``values`` at every worker (every worker gives an array of
        the same length and type)."""
        return self.call(broadcast_body(self.config, values, root))

    def allgather(self, values: npt.ArrayLike) -> AllreduceResult:
        """Every worker's ``values`` (of one length and type), rank 0's first."""
        return self.call(allgather_body(self.config, values))

    def barrier(self) -> AllreduceResult:
        """Returns once every worker of the job has entered the barrier."""
        return self.call(barrier_body(self.config))

    def _op(self, op: Op | None) -> Op:
        return self.config.op if op is None else op


# Where an embedded network's links end: its endpoints file (inanet --endpoints), or them.
Embedded = str | Path | Endpoints


@contextmanager
def _worker(topology: str | Path, job: str | Path, worker: str, timeout: float, rto: float,
            progress: Callable[[int, int], None] | None = None,
            embedded: Embedded | None = None) -> Iterator[Worker]:
    """``worker`` on its host's own network, or (``embedded``: the endpoints file an
    embedded network wrote, ``inanet --endpoints``, or those endpoints themselves) on
    its link of the embedded network."""
    config = WorkerConfig.from_files(topology, job, worker)
    transport: UdpTransport | LinkTransport
    if embedded is None:
        transport = UdpTransport(config.target)
    else:
        config = on_loopback(config)
        endpoints = embedded if isinstance(embedded, Endpoints) else Endpoints.load(embedded)
        transport = LinkTransport(Topology.load(topology), worker, endpoints, config.target)
    with transport:
        yield Worker(config, transport, timeout=timeout, rto=RtoEstimator(initial=rto),
                     progress=progress)


def _op_of(op: Op | str | None) -> Op | None:
    return Op[op.upper()] if isinstance(op, str) else op


def allreduce(values: npt.ArrayLike, *, topology: str | Path, job: str | Path, worker: str,
              op: Op | str | None = None, timeout: float = 5.0, rto: float = DEFAULT_RTO,
              progress: Callable[[int, int], None] | None = None,
              width: int | None = None, embedded: Embedded | None = None) -> AllreduceResult:
    """One AllReduce from this host as ``worker`` of ``job``: integer or float arrays,
    op SUM, MIN or MAX (default: the job's). Every worker of the job must call it
    with an array of the same length. Each of these functions runs on the worker's
    lab host, or anywhere on the embedded network whose endpoints file ``embedded``
    names (``inanet --endpoints FILE``)."""
    with _worker(topology, job, worker, timeout, rto, progress, embedded) as w:
        return w.allreduce(values, _op_of(op), width)


def reduce(values: npt.ArrayLike, *, root: int = 0, topology: str | Path, job: str | Path,
           worker: str, op: Op | str | None = None, timeout: float = 5.0,
           rto: float = DEFAULT_RTO, width: int | None = None,
           embedded: Embedded | None = None) -> AllreduceResult:
    """One Reduce to rank ``root`` (the job's ``root``-th worker) from this host."""
    with _worker(topology, job, worker, timeout, rto, embedded=embedded) as w:
        return w.reduce(values, root, _op_of(op), width)


def reduce_scatter(values: npt.ArrayLike, *, topology: str | Path, job: str | Path,
                   worker: str, op: Op | str | None = None, timeout: float = 5.0,
                   rto: float = DEFAULT_RTO, width: int | None = None,
                   embedded: Embedded | None = None) -> AllreduceResult:
    """One Reduce-scatter from this host: this worker's part of the reduction."""
    with _worker(topology, job, worker, timeout, rto, embedded=embedded) as w:
        return w.reduce_scatter(values, _op_of(op), width)


def broadcast(values: npt.ArrayLike, *, root: int = 0, topology: str | Path,
              job: str | Path, worker: str, timeout: float = 5.0,
              rto: float = DEFAULT_RTO, embedded: Embedded | None = None
              ) -> AllreduceResult:
    """One Broadcast from rank ``root`` (the job's ``root``-th worker) to every worker."""
    with _worker(topology, job, worker, timeout, rto, embedded=embedded) as w:
        return w.broadcast(values, root)


def allgather(values: npt.ArrayLike, *, topology: str | Path, job: str | Path, worker: str,
              timeout: float = 5.0, rto: float = DEFAULT_RTO,
              embedded: Embedded | None = None) -> AllreduceResult:
    """One Allgather from this host: every worker's ``values``, rank 0's first."""
    with _worker(topology, job, worker, timeout, rto, embedded=embedded) as w:
        return w.allgather(values)


def barrier(*, topology: str | Path, job: str | Path, worker: str, timeout: float = 5.0,
            rto: float = DEFAULT_RTO, embedded: Embedded | None = None) -> AllreduceResult:
    """One Barrier: returns once every worker of the job has entered it."""
    with _worker(topology, job, worker, timeout, rto, embedded=embedded) as w:
        return w.barrier()
