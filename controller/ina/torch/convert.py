"""Tensors to the data plane's arrays and back, and torch's reduce ops to its ops:
each torch collective as a collective of the rank's worker (ina.host.worker).

Reductions (all_reduce, reduce, reduce_scatter). The switches reduce signed 32- or
16-bit integers. Integer tensors of up to 32 bits travel as they are: int16 in
16-bit elements (its SUM wraps in 16 bits, as gloo's; its AVG in 32 bits, whose
exact sum it divides), the others in 32-bit ones (what the switches cannot reduce,
``on_switches`` says, and the backend hands to gloo); a float
SUM travels through the block quantization of ina.host.quantize in 32-bit elements,
float16 and bfloat16 too (16-bit ones with ``half_width`` 16: INA_HALF_WIDTH, twice
as many values per packet, coarser), their result rounded back to the tensor's type,
and the error bound grows by that rounding; a float MIN or MAX is exact (order keys:
ina.host.floatbits). Results are written into the tensor, in place, whatever its shape or
layout.

Movements (broadcast, all_gather and its forms). A tensor of any type travels as
its bytes and comes back bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ina.errors import UsageError
from ina.host.results import AllreduceResult
from ina.host.worker import Worker
from ina.protocol.constants import WIDTH16, WIDTH32, Op

#: torch's reduce ops (ReduceOp.RedOpType, by name) the data plane carries: its op,
#: and whether to divide by the ranks.
OPS: dict[str, tuple[Op, bool]] = {
    "SUM": (Op.SUM, False),
    "AVG": (Op.SUM, True),
    "MIN": (Op.MIN, False),
    "MAX": (Op.MAX, False),
}
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
#: Float types that travel in 16-bit elements.
HALF_FLOATS = (torch.float16, torch.bfloat16)
#: Integer types whose values all fit in the data plane's 32 bits: their SUM wraps
#: around in the tensor's own type, as gloo's does.
NARROW_INTS = (torch.int8, torch.uint8, torch.int16, torch.int32)


#: Types the data plane reduces (float64, int64, bool, complex go through gloo:
#: ``on_switches``).
PLANE_TYPES = FLOATS + NARROW_INTS


def on_switches(tensors: Sequence[torch.Tensor], op: str) -> bool:
    """Whether the data plane reduces ``tensors`` with ``op``: SUM, AVG, MIN or MAX of
    dense CPU tensors of PLANE_TYPES. The rest (PRODUCT and bitwise ops, sparse
    tensors, float64, int64, bool, complex) is reduced on the hosts, by the backend's
    gloo group, as gloo reduces it: the switches have no multiplication, 64-bit or
    sparse arithmetic. The same at every rank: it depends only on the op and types."""
    return op in OPS and all(
        t.layout == torch.strided and t.dtype in PLANE_TYPES for t in tensors)


def plane_op(op: str) -> tuple[Op, bool]:
    """The data plane's op for torch's ``op`` (a RedOpType's name)."""
    if op not in OPS:
        raise UsageError(f"the ina backend reduces with SUM, AVG, MIN and MAX, not {op}"
                         " (the switches have no multiplication or bitwise ops); use gloo "
                         "for this call")
    return OPS[op]


def check_tensor(tensor: torch.Tensor) -> None:
    """UsageError if the data plane cannot reduce ``tensor`` (``on_switches``)."""
    check_cpu(tensor)
    if tensor.dtype not in PLANE_TYPES:
        raise UsageError(f"the data plane reduces float32, float16, bfloat16 and integer "
                         f"tensors of up to 32 bits, not {tensor.dtype}")


def check_cpu(tensor: torch.Tensor) -> None:
    if tensor.device.type != "cpu":
        raise UsageError(f"the ina backend takes CPU tensors, not {tensor.device}")


@dataclass(frozen=True)
class Reduced:
    """What a call returned besides the tensor it wrote: for floats, per element, how
    far each value may be from the exact reduction (shaped like the tensor)."""

    error_bound: torch.Tensor | None
    retransmissions: int
    packets: int


# --- reductions ----------------------------------------------------------------------


def _plane(tensor: torch.Tensor, average: bool, half_width: int
           ) -> tuple[npt.NDArray[Any], int]:
    """``tensor``'s values as the data plane's array, and the elements' width
    (``half_width`` for float16 and bfloat16)."""
    flat = tensor.detach().reshape(-1)
    if tensor.dtype in FLOATS:
        width = half_width if tensor.dtype in HALF_FLOATS else WIDTH32
        return flat.to(torch.float32).numpy(), width
    if tensor.dtype == torch.int16 and not average:
        return flat.numpy(), WIDTH16
    return flat.to(torch.int32).numpy(), WIDTH32


def _written(result: AllreduceResult, tensor: torch.Tensor, average: bool,
             ranks: int) -> torch.Tensor | None:
    """``result`` written into ``tensor`` (in place); the error bound, for floats."""
    values = torch.from_numpy(np.ascontiguousarray(result.values))
    bound = None
    if tensor.dtype in FLOATS:
        assert result.error_bound is not None
        bound = torch.from_numpy(result.error_bound)
        if average:
            values = values / ranks
            bound = bound / ranks
        if tensor.dtype in HALF_FLOATS:
            # Rounded to the tensor's type: half an ulp of it more.
            bound = bound + values.abs().double() * (torch.finfo(tensor.dtype).eps / 2)
        bound = bound.reshape(tensor.shape)
    elif average:
        # NCCL's integer AVG: the exact sum divided, truncated toward zero.
        values = torch.div(values.to(torch.int64), ranks, rounding_mode="trunc")
    with torch.no_grad():
        tensor.copy_(values.reshape(tensor.shape))  # casts, wrapping narrow ints as gloo
    return bound


def _reduction(worker: Worker, source: torch.Tensor, target: torch.Tensor, op: str,
               ranks: int, half_width: int,
               call: Callable[[npt.NDArray[Any], Op, int], AllreduceResult],
               writes: bool = True) -> Reduced:
    """What every reduction does: check the tensors, the op and the width; ``call``
    the worker's collective on ``source``'s values; write its result into ``target``
    (where ``writes``: at a reduce's root only)."""
    check_tensor(source)
    check_tensor(target)
    plane, average = plane_op(op)
    if target.numel() == 0:
        return Reduced(None, 0, 0)
    array, width = _plane(source, average, half_width)
    result = call(array, plane, width)
    bound = _written(result, target, average, ranks) if writes else None
    return Reduced(bound, result.retransmissions, result.packets)


def allreduce_tensor(worker: Worker, tensor: torch.Tensor, op: str, ranks: int,
                     half_width: int = WIDTH32) -> Reduced:
    """Reduce ``tensor`` with every rank's through ``worker``'s job, in place."""
    return _reduction(worker, tensor, tensor, op, ranks, half_width,
                      lambda a, plane, width: worker.allreduce(a, plane, width))


def reduce_tensor(worker: Worker, tensor: torch.Tensor, op: str, root: int,
                  ranks: int, half_width: int = WIDTH32) -> Reduced:
    """Reduce ``tensor`` with every rank's into rank ``root``'s (in place there; the
    other ranks' tensors stay as they are)."""
    return _reduction(worker, tensor, tensor, op, ranks, half_width,
                      lambda a, plane, width: worker.reduce(a, root, plane, width),
                      writes=worker.config.rank == root)


def reduce_scatter_tensor(worker: Worker, output: torch.Tensor, whole: torch.Tensor,
                          op: str, ranks: int, half_width: int = WIDTH32) -> Reduced:
    """Reduce ``whole`` (``ranks`` parts, rank r's part the size of ``output``) with
    every rank's; this rank's part of the result into ``output``, in place."""
    if whole.numel() != ranks * output.numel():
        raise UsageError(f"reduce_scatter: the input has {whole.numel()} values, not "
                         f"{ranks} x the output's {output.numel()}")
    if whole.dtype != output.dtype:
        raise UsageError(f"reduce_scatter: the input is {whole.dtype}, the output "
                         f"{output.dtype}")
    return _reduction(worker, whole, output, op, ranks, half_width,
                      lambda a, plane, width: worker.reduce_scatter(a, plane, width))


# --- movements -----------------------------------------------------------------------


def as_bytes(tensor: torch.Tensor) -> npt.NDArray[np.uint8]:
    """``tensor``'s values as bytes (a copy if it is not contiguous)."""
    check_cpu(tensor)
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return flat.view(torch.uint8).numpy()


def from_bytes(raw: npt.NDArray[np.uint8], like: torch.Tensor) -> torch.Tensor:
    """Bytes as a flat tensor of ``like``'s type."""
    if raw.size == 0:  # an empty tensor's (torch cannot view no bytes as another type)
        return torch.empty(0, dtype=like.dtype)
    if like.dtype == torch.bool:
        return torch.from_numpy(raw.copy()).to(torch.bool)
    return torch.from_numpy(raw.copy()).view(like.dtype)


def write(tensor: torch.Tensor, values: torch.Tensor) -> None:
    with torch.no_grad():
        tensor.copy_(values.reshape(tensor.shape))


def broadcast_tensor(worker: Worker, tensor: torch.Tensor, root: int) -> Reduced:
    """Rank ``root``'s ``tensor`` into every rank's, in place, bit for bit."""
    raw = as_bytes(tensor)
    if raw.size == 0:
        return Reduced(None, 0, 0)
    result = worker.broadcast(raw, root)
    if worker.config.rank != root:
        write(tensor, from_bytes(result.values, tensor))
    return Reduced(None, result.retransmissions, result.packets)


def _gathered(worker: Worker, raw: npt.NDArray[np.uint8], ranks: int
              ) -> tuple[list[npt.NDArray[np.uint8]], AllreduceResult]:
    result = worker.allgather(raw)
    return [result.values[r * raw.size: (r + 1) * raw.size] for r in range(ranks)], result


def allgather_tensors(worker: Worker, outputs: Sequence[torch.Tensor], tensor: torch.Tensor,
                      ranks: int) -> Reduced:
    """Every rank's ``tensor`` into ``outputs[r]`` (of its size and type), bit for bit."""
    if len(outputs) != ranks:
        raise UsageError(f"all_gather: {len(outputs)} output tensors for {ranks} ranks")
    for out in outputs:
        if out.numel() != tensor.numel() or out.dtype != tensor.dtype:
            raise UsageError(f"all_gather: an output tensor of {out.numel()} {out.dtype} "
                             f"values for an input of {tensor.numel()} {tensor.dtype}")
    raw = as_bytes(tensor)
    if raw.size == 0:
        return Reduced(None, 0, 0)
    parts, result = _gathered(worker, raw, ranks)
    for out, part in zip(outputs, parts, strict=True):
        write(out, from_bytes(part, tensor))
    return Reduced(None, result.retransmissions, result.packets)


def allgather_into(worker: Worker, output: torch.Tensor, tensor: torch.Tensor,
                   ranks: int) -> Reduced:
    """Every rank's ``tensor``, rank 0's first, into ``output`` (``ranks`` times its size)."""
    if output.numel() != ranks * tensor.numel() or output.dtype != tensor.dtype:
        raise UsageError(f"all_gather_into_tensor: an output of {output.numel()} "
                         f"{output.dtype} values for {ranks} inputs of {tensor.numel()} "
                         f"{tensor.dtype}")
    raw = as_bytes(tensor)
    if raw.size == 0:
        return Reduced(None, 0, 0)
    result = worker.allgather(raw)
    write(output, from_bytes(result.values, tensor))
    return Reduced(None, result.retransmissions, result.packets)


def allgather_coalesced(worker: Worker, outputs: Sequence[Sequence[torch.Tensor]],
                        tensors: Sequence[torch.Tensor], ranks: int) -> Reduced:
    """Every rank's ``tensors`` (of any types) in one call: ``outputs[r][i]`` gets rank
    r's ``tensors[i]``."""
    if len(outputs) != ranks or any(len(o) != len(tensors) for o in outputs):
        raise UsageError(f"all_gather_coalesced: the outputs must be {ranks} lists of "
                         f"{len(tensors)} tensors")
    pieces = [as_bytes(t) for t in tensors]
    raw = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
    if raw.size == 0:
        return Reduced(None, 0, 0)
    parts, result = _gathered(worker, raw, ranks)
    for r, part in enumerate(parts):
        offset = 0
        for out, t, piece in zip(outputs[r], tensors, pieces, strict=True):
            write(out, from_bytes(part[offset: offset + piece.size], t))
            offset += piece.size
    return Reduced(None, result.retransmissions, result.packets)


def allgather_into_coalesced(worker: Worker, outputs: Sequence[torch.Tensor],
                             tensors: Sequence[torch.Tensor], ranks: int) -> Reduced:
    """Several all_gather_into_tensor in one call: ``outputs[i]`` gets every rank's
    ``tensors[i]``, rank 0's first."""
    if len(outputs) != len(tensors) or any(
            o.numel() != ranks * t.numel() or o.dtype != t.dtype
            for o, t in zip(outputs, tensors, strict=True)):
        raise UsageError("all_gather_into_tensor_coalesced: each output must hold the ranks' "
                         "inputs of its type")
    pieces = [as_bytes(t) for t in tensors]
    raw = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
    if raw.size == 0:
        return Reduced(None, 0, 0)
    parts, result = _gathered(worker, raw, ranks)
    offset = 0
    for out, t, piece in zip(outputs, tensors, pieces, strict=True):
        gathered = np.concatenate([part[offset: offset + piece.size] for part in parts])
        write(out, from_bytes(gathered, t))
        offset += piece.size
    return Reduced(None, result.retransmissions, result.packets)


# --- several tensors in one call ----------------------------------------------------


def flat_concat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One flat tensor of ``tensors`` (all of one type), for a coalesced call."""
    if len({t.dtype for t in tensors}) > 1:
        raise UsageError("a coalesced call takes tensors of one type")
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def rank_major(tensors: Sequence[torch.Tensor], ranks: int) -> torch.Tensor:
    """Tensors each of ``ranks`` equal parts, as one flat tensor of ``ranks`` parts:
    part r holds every tensor's part r, in order (a coalesced reduce_scatter's input)."""
    if len({t.dtype for t in tensors}) > 1:
        raise UsageError("a coalesced call takes tensors of one type")
    for t in tensors:
        if t.numel() % ranks:
            raise UsageError(f"reduce_scatter: an input of {t.numel()} values does not "
                             f"split into {ranks} equal parts")
    return torch.cat([t.detach().reshape(ranks, -1) for t in tensors], dim=1).reshape(-1)


def split_into(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    """``flat``'s values back into ``tensors``, in order."""
    with torch.no_grad():
        for t, piece in zip(tensors, split_like(flat, tensors), strict=True):
            t.copy_(piece)


def split_like(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``flat`` cut into pieces shaped like ``tensors``."""
    pieces, offset = [], 0
    for t in tensors:
        pieces.append(flat[offset: offset + t.numel()].reshape(t.shape))
        offset += t.numel()
    return pieces
