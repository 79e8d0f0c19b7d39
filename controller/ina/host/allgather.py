"""Allgather: every worker's part, in rank order, at every worker, bit for bit.

Each worker gives a part of the same length and type; on the wire the parts lie one
after another, each padded to whole packets (ina.host.flow.Layout), so that every
chunk has one owner, who sends its data once (OP_COPY): its edge switch sends it
by BIER to every other worker, and each chunk's round is NODATA from every worker
that holds it (ina.host.collective.movement). Any type travels as its bytes in
32-bit words, exactly. A worker's uplink carries its part and a header per chunk,
its downlink every part. (Where the workers' BFR-ids span BIER sets, or a worker
does not know them, the owner contributes its data and the others zeros: every
uplink carries every part.)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ina.host.collective import bytes_kind, chunk_owners, describe, flat, movement, unwords, words
from ina.host.config import WorkerConfig
from ina.host.descriptor import Collective, agreeing
from ina.host.flow import Layout
from ina.host.results import AllreduceResult, CallBody, Reduce


def allgather(config: WorkerConfig, values: npt.ArrayLike) -> CallBody:
    """The body of an Allgather of this worker's part ``values``: the result is every
    worker's part, rank 0's first."""
    array = flat(values, "allgather")
    mine = words(array)
    n = config.workers

    def body(reduce: Reduce, seq: int) -> tuple[AllreduceResult, int]:
        layout = Layout(n * mine.size, parts=n)
        owner = layout.owner()
        owners, op = chunk_owners(config, owner)
        reduce = agreeing(reduce, describe(Collective.ALLGATHER, array.size, bytes_kind(array),
                                           op), config)
        wire = np.zeros(layout.slots, dtype=np.int32)
        start = layout.part_slots(config.rank)
        wire[start: start + mine.size] = mine
        r, seq = movement(reduce, wire, seq, layout, owner == config.rank, "gathering",
                          owners)
        parts = layout.gather(r.values).reshape(n, mine.size)
        values = np.concatenate([unwords(p, array.dtype, array.size) for p in parts])
        return AllreduceResult(values, False, r.packets, r.retransmissions,
                               on_hosts=r.on_hosts), seq

    return body
