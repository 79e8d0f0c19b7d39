"""Broadcast: the root rank's array at every worker, bit for bit.

The root rank sends its data once (OP_COPY): its edge switch sends it by BIER to
every other worker, and each chunk's round is NODATA from every worker that holds
it (ina.host.collective.movement). Any type travels as its bytes in 32-bit words,
exactly. The root's uplink and every downlink carry the array, the other uplinks
a header per chunk. (Where the workers' BFR-ids span BIER sets, or a worker does
not know them, the root contributes its data and the others zeros: every uplink
carries the array.)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ina.host.collective import (
    bytes_kind,
    check_rank,
    chunk_owners,
    describe,
    flat,
    movement,
    unwords,
    words,
)
from ina.host.config import WorkerConfig
from ina.host.descriptor import Collective, agreeing
from ina.host.flow import Layout
from ina.host.results import AllreduceResult, CallBody, Reduce


def broadcast(config: WorkerConfig, values: npt.ArrayLike, root: int) -> CallBody:
    """The body of a Broadcast from rank ``root``: every worker gives an array of the
    same length and type (only the root's values matter); the result is the root's."""
    array = flat(values, "broadcast")
    check_rank(root, config, "broadcast")
    wire = words(array)
    mine = config.rank == root

    def body(reduce: Reduce, seq: int) -> tuple[AllreduceResult, int]:
        layout = Layout(wire.size)
        owners, op = chunk_owners(config, np.full(layout.chunks, root))
        reduce = agreeing(reduce, describe(Collective.BROADCAST, array.size, bytes_kind(array),
                                           op, root=root), config)
        data = np.full(layout.chunks, mine, dtype=bool)
        r, seq = movement(reduce, wire, seq, layout, data, "broadcasting", owners)
        values = unwords(r.values, array.dtype, array.size)
        return AllreduceResult(values, False, r.packets, r.retransmissions,
                               on_hosts=r.on_hosts), seq

    return body
