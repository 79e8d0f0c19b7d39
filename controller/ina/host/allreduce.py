"""AllReduce: every worker's array reduced with the op, the result at every worker.

Every worker contributes data to every chunk and every chunk's data comes back to
every worker (``dest`` 0): a worker's uplink and downlink each carry the array once.
Integers travel as they are (32-bit elements, or 16-bit ones: int16 arrays, or on
request); floats' SUM through the block quantization (32-bit elements, or 16-bit
ones on request: ina.host.quantize), their MIN and MAX as order keys, exactly
(ina.host.floatbits).
"""

from __future__ import annotations

import dataclasses

import numpy.typing as npt

from ina.host.collective import reducible, reduction
from ina.host.config import WorkerConfig
from ina.host.descriptor import Collective, agreeing
from ina.host.flow import Layout
from ina.host.guesses import Guesses
from ina.host.results import AllreduceResult, CallBody, Reduce
from ina.protocol.constants import Op


def allreduce(config: WorkerConfig, values: npt.ArrayLike, op: Op,
              width: int | None = None, guesses: Guesses | None = None) -> CallBody:
    """The body of an AllReduce of ``values`` (checked now, before anything is sent);
    ``guesses``: the worker's, for a float array (ina.host.guesses)."""
    operand = reducible(values, width, "allreduce", op, config)

    def body(reduce: Reduce, seq: int) -> tuple[AllreduceResult, int]:
        reduce = agreeing(reduce, operand.describe(Collective.ALLREDUCE, op), config)
        r, seq = reduction(reduce, config, operand, op, seq,
                           Layout(operand.size, operand.width), guesses=guesses)
        return trimmed(r, operand.size), seq

    return body


def trimmed(r: AllreduceResult, size: int) -> AllreduceResult:
    """``r`` without the padding of its last packet."""
    bound = None if r.error_bound is None else r.error_bound[:size]
    return dataclasses.replace(r, values=r.values[:size], error_bound=bound)
