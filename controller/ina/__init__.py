"""In-network aggregation (draft-song-ina-00) on BMv2: controller, worker library, model.

The worker API in one call per collective; here four workers on the embedded network
(the reference model, in this process: no BMv2 needed; on a lab, leave out
``embedded=`` and run each worker on its host)::

    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    import ina
    from ina.model.embedded import spawn

    topo, job = "topologies/figure1.yaml", "jobs/figure1-sum.yaml"
    with spawn(topo, [job]) as net, ThreadPoolExecutor(4) as pool:
        calls = [pool.submit(ina.allreduce, np.full(3, 0.25 * i, dtype=np.float32),
                             topology=topo, job=job, worker=f"w{i}",
                             embedded=net.endpoints) for i in (1, 2, 3, 4)]
        result = calls[0].result()
    print(result.values)  # the reduced array: [2.5 2.5 2.5] (int32 for int input)
    print(bool((result.error_bound < 1e-6).all()))  # float input: a bound per element

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
