"""In-network aggregation (draft-song-ina-00) on BMv2: controller, worker library, model.

The worker API in one call per collective::

    from ina import allreduce
    result = allreduce(array, topology="topologies/figure1.yaml",
                       job="jobs/figure1-sum.yaml", worker="w1")
    result.values        # the reduced array (int32, or float32 for float input)
    result.error_bound   # float input only: per-element bound on the error

and likewise ``broadcast(array, root=r, ...)``, ``reduce(array, root=r, ...)``,
``reduce_scatter(array, ...)``, ``allgather(part, ...)`` and ``barrier(...)``
(ina.host.worker; a ``Worker`` makes any number of them; docs/collectives.md).

The subpackages, each depending only on those before it: protocol (the wire),
spec (topology, jobs), control (the controller), host (workers, server roots),
model (the reference data plane), lab (emulation, benchmarks), cli (the
commands); errors holds every exception class. docs/design.md, "Layering".
"""

from ina.errors import AllreduceError, AllreduceTimeout, CallMismatch
from ina.host.results import AllreduceResult
from ina.host.worker import (
    Worker,
    allgather,
    allreduce,
    barrier,
    broadcast,
    reduce,
    reduce_scatter,
)

__all__ = ["allreduce", "broadcast", "reduce", "reduce_scatter", "allgather", "barrier",
           "Worker", "AllreduceResult", "AllreduceError", "AllreduceTimeout", "CallMismatch"]
__version__ = "0.1.0"
