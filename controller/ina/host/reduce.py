"""Reduce: every worker's array reduced with the op, the result at one worker (the
root rank) only.

It aggregates as AllReduce does; only the chunks' ``dest`` differs: the root's BFR-id,
so the root's BIER copies keep their array only toward the root, and every other
worker gets completions (headers alone) that move its window. The root's downlink
carries the array, every other worker's only completions.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from ina.host.allreduce import trimmed
from ina.host.collective import bfr_id, check_rank, reducible, reduction
from ina.host.config import WorkerConfig
from ina.host.descriptor import Collective, agreeing
from ina.host.flow import Layout
from ina.host.guesses import Guesses
from ina.host.results import AllreduceResult, CallBody, Reduce
from ina.protocol.constants import Op


def reduce_to(config: WorkerConfig, values: npt.ArrayLike, root: int, op: Op,
              width: int | None = None, guesses: Guesses | None = None) -> CallBody:
    """The body of a Reduce of ``values`` to rank ``root``: its result has the values
    at the root, none (an empty array) at the others. ``guesses``: as an AllReduce's."""
    operand = reducible(values, width, "reduce", op, config)
    check_rank(root, config, "reduce")
    dest_id = bfr_id(config, root)

    def body(reduce: Reduce, seq: int) -> tuple[AllreduceResult, int]:
        reduce = agreeing(reduce, operand.describe(Collective.REDUCE, op, root), config)
        layout = Layout(operand.size, operand.width)
        dest = np.full(layout.chunks, dest_id, dtype=np.int64)
        r, seq = reduction(reduce, config, operand, op, seq, layout, dest, guesses)
        if config.rank == root:
            return trimmed(r, operand.size), seq
        return dataclasses.replace(r, values=r.values[:0], error_bound=None,
                                   overflow=False), seq

    return body
