"""Tensors to the data plane's arrays and back, and torch's reduce ops to its ops.

The switches reduce signed 32-bit integers. Integer tensors travel as they are
(int64 only with values that fit in 32 bits); float32, float16 and bfloat16 travel
as float32 through the block quantization of ina.host.quantize, their result
rounded back to the tensor's type, and the error bound grows by that rounding.
Results are written into the tensor, in place, whatever its shape or layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ina.errors import AllreduceError, UsageError
from ina.host.results import AllreduceResult
from ina.host.worker import Worker
from ina.protocol.constants import Op

#: torch's reduce ops (ReduceOp.RedOpType, by name) the data plane carries: its op,
#: and whether to divide by the ranks.
OPS: dict[str, tuple[Op, bool]] = {
    "SUM": (Op.SUM, False),
    "AVG": (Op.SUM, True),
    "MIN": (Op.MIN, False),
    "MAX": (Op.MAX, False),
}
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
#: Integer types whose values all fit in the data plane's 32 bits: their SUM wraps
#: around in the tensor's own type, as gloo's does.
NARROW_INTS = (torch.int8, torch.uint8, torch.int16, torch.int32)


def plane_op(op: str) -> tuple[Op, bool]:
    """The data plane's op for torch's ``op`` (a RedOpType's name)."""
    if op not in OPS:
        raise UsageError(f"the ina backend reduces with SUM, AVG, MIN and MAX, not {op}"
                         " (the switches have no multiplication or bitwise ops); use gloo "
                         "for this call")
    return OPS[op]


def check_tensor(tensor: torch.Tensor) -> None:
    """UsageError if the data plane cannot carry ``tensor``."""
    if tensor.device.type != "cpu":
        raise UsageError(f"the ina backend takes CPU tensors, not {tensor.device}")
    if tensor.dtype not in FLOATS + NARROW_INTS + (torch.int64,):
        # float64 would travel at float32 precision, beyond the bound the data plane's
        # quantization reports: refused rather than silently less precise.
        raise UsageError(f"the ina backend reduces float32, float16, bfloat16 and integer "
                         f"tensors, not {tensor.dtype}")


@dataclass(frozen=True)
class Reduced:
    """What a call returned besides the tensor it wrote: for floats, per element, how
    far each value may be from the exact reduction (shaped like the tensor)."""

    error_bound: torch.Tensor | None
    retransmissions: int
    packets: int


def allreduce_tensor(worker: Worker, tensor: torch.Tensor, op: str, ranks: int) -> Reduced:
    """Reduce ``tensor`` with every rank's through ``worker``'s job, in place."""
    check_tensor(tensor)
    plane, average = plane_op(op)
    if tensor.numel() == 0:
        return Reduced(None, 0, 0)
    flat = tensor.detach().reshape(-1)
    floating = tensor.dtype in FLOATS
    array = (flat.to(torch.float32) if floating else flat).numpy()
    result: AllreduceResult = worker.allreduce(array, plane)
    if result.overflow and tensor.dtype not in NARROW_INTS:
        raise AllreduceError(f"the SUM of {tensor.dtype} values overflowed the data plane's "
                             "32 bits: the result would not be exact")
    values = torch.from_numpy(result.values)
    bound = None
    if floating:
        assert result.error_bound is not None
        bound = torch.from_numpy(result.error_bound)
        if average:
            values = values / ranks
            bound = bound / ranks
        if tensor.dtype in (torch.float16, torch.bfloat16):
            # Rounded to the tensor's type: half an ulp of it more.
            bound = bound + values.abs().double() * (torch.finfo(tensor.dtype).eps / 2)
        bound = bound.reshape(tensor.shape)
    elif average:
        # NCCL's integer AVG: the exact sum divided, truncated toward zero.
        values = torch.div(values.to(torch.int64), ranks, rounding_mode="trunc")
    with torch.no_grad():
        tensor.copy_(values.reshape(tensor.shape))  # casts, wrapping narrow ints as gloo
    return Reduced(bound, result.retransmissions, result.packets)


def flat_concat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One flat tensor of ``tensors`` (all of one type), for a coalesced call."""
    if len({t.dtype for t in tensors}) > 1:
        raise UsageError("a coalesced all_reduce takes tensors of one type")
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def split_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """``flat``'s values back into ``tensors``, in order."""
    with torch.no_grad():
        for t, piece in zip(tensors, split_like(flat, tensors), strict=True):
            t.copy_(piece)



def split_like(flat: torch.Tensor, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """``flat`` cut into pieces shaped like ``tensors``."""
    pieces, offset = [], 0
    for t in tensors:
        pieces.append(flat[offset: offset + t.numel()].reshape(t.shape))
        offset += t.numel()
    return pieces
