"""In-network aggregation (draft-song-ina-00) on BMv2: controller, worker library, model.

The worker API in one call::

    from ina import allreduce
    result = allreduce(array, topology="topologies/figure1.yaml",
                       job="jobs/figure1-sum.yaml", worker="w1")
    result.values        # the reduced array (int32, or float32 for float input)
    result.error_bound   # float input only: per-element bound on the error

The subpackages, each depending only on those before it: protocol (the wire),
spec (topology, jobs), control (the controller), host (workers, server roots),
model (the reference data plane), lab (emulation, benchmarks), cli (the
commands); errors holds every exception class. docs/design.md, "Layering".
"""

from ina.errors import AllreduceError, AllreduceTimeout
from ina.host.results import AllreduceResult
from ina.host.worker import allreduce

__all__ = ["allreduce", "AllreduceResult", "AllreduceError", "AllreduceTimeout"]
__version__ = "0.1.0"
