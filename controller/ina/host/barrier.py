"""Barrier: returns once every worker of the job has entered it.

One chunk of NODATA contributions (every worker's bit, no array) behind the call's
descriptor, in the same round trip: it completes, and the root tells every worker
(a completion), once every worker has sent it. A worker's links each carry one header for it.
"""

from __future__ import annotations

import numpy as np

from ina.host.collective import describe
from ina.host.config import WorkerConfig
from ina.host.descriptor import KIND_INT, Collective, agreeing
from ina.host.flow import no_data
from ina.host.results import AllreduceResult, CallBody, Reduce
from ina.protocol.arith import seq_add
from ina.protocol.constants import Op


def barrier(config: WorkerConfig) -> CallBody:
    """The body of a Barrier: its result has no values."""

    def body(reduce: Reduce, seq: int) -> tuple[AllreduceResult, int]:
        reduce = agreeing(reduce, describe(Collective.BARRIER, 1, KIND_INT), config)
        r = reduce(np.zeros(1, dtype=np.int32), Op.SUM, seq, "waiting at the barrier",
                   no_data())
        return AllreduceResult(np.zeros(0, dtype=np.int32), False, r.packets,
                               r.retransmissions, on_hosts=r.on_hosts), seq_add(seq, r.packets)

    return body
