"""Reduce-scatter: every worker's array reduced with the op, part r of the result at
rank r.

The array of S values is cut into N parts of ``ceil(S / N)`` values, each padded to
whole packets, so that every chunk has one owner (ina.host.flow.Layout); every
worker contributes data to every chunk, and chunk j's ``dest`` is its owner's BFR-id.
A worker's uplink carries the array, its downlink its own part and completions of
the others' chunks (headers alone). The last parts hold fewer of the array's values
(or none) when S is not a multiple of N.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from ina.errors import UsageError
from ina.host.collective import reducible, reduction
from ina.host.config import WorkerConfig
from ina.host.descriptor import Collective, agreeing
from ina.host.flow import Layout
from ina.host.guesses import Guesses
from ina.host.results import AllreduceResult, CallBody, Reduce
from ina.protocol.constants import Op


def reduce_scatter(config: WorkerConfig, values: npt.ArrayLike, op: Op,
                   width: int | None = None, guesses: Guesses | None = None) -> CallBody:
    """The body of a Reduce-scatter of ``values``: its result holds this worker's part.
    ``guesses``: as an AllReduce's."""
    operand = reducible(values, width, "reduce_scatter", op, config)
    if not config.bfr_ids:
        raise UsageError(f"job {config.job_id}: {config.name} does not know its peers' "
                         "BFR-ids (a WorkerConfig from the job's files knows them)")
    owners = np.array(config.bfr_ids, dtype=np.int64)

    def body(reduce: Reduce, seq: int) -> tuple[AllreduceResult, int]:
        reduce = agreeing(reduce, operand.describe(Collective.REDUCE_SCATTER, op), config)
        layout = Layout(operand.size, operand.width, parts=config.workers)
        r, seq = reduction(reduce, config, operand, op, seq, layout, owners[layout.owner()],
                           guesses)
        mine = layout.take_part(r.values, config.rank)
        bound = None if r.error_bound is None else layout.take_part(r.error_bound,
                                                                     config.rank)
        return dataclasses.replace(r, values=mine, error_bound=bound), seq

    return body
