"""A DDP communication hook that sends the gradient buckets through the switches.

For users who keep gloo (or NCCL) as their process group and want only the
gradients in the network::

    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(ina.torch.hook_state(), ina.torch.allreduce_hook)

Each bucket is averaged over the ranks (DDP leaves that to the hook) by an INA
AllReduce of the job that INA_TOPOLOGY and INA_JOB name, rank r being the job's
r-th worker (as with the ``ina`` backend, see ina.torch.member). Buckets are
reduced one after another in the order DDP hands them over.
"""

# No ``from __future__ import annotations``: DDP compares the hook's annotations
# with the objects dist.GradBucket and torch.futures.Future[torch.Tensor].
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import GradBucket, PrefixStore

from ina.torch.convert import allreduce_tensor
from ina.torch.member import Member, Settings


@dataclass
class HookState:
    """The rank's member of its INA job, for ``allreduce_hook``."""

    member: Member

    def close(self) -> None:
        self.member.close()


def hook_state(settings: Settings | None = None,
               group: dist.ProcessGroup | None = None) -> HookState:
    """This rank's state for ``allreduce_hook`` in ``group`` (default: the default
    group); every rank must call it (the ranks agree on the job through the group's
    store)."""
    store = PrefixStore("ina-hook", dist.distributed_c10d._get_default_store())  # noqa: SLF001
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    return HookState(Member.join(store, rank, size, settings))


def allreduce_hook(state: "HookState",
                   bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's gradient bucket averaged over the ranks through the switches."""
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    buffer = bucket.buffer()
    member = state.member

    def call() -> torch.Tensor:
        allreduce_tensor(member.worker, buffer, "AVG", member.size, member.half_width)
        return buffer

    def done(result: torch.Tensor, error: BaseException | None) -> None:
        if error is not None:
            future.set_exception(error)  # type: ignore[arg-type]
        else:
            future.set_result(result)

    member.counts.add("ddp_hook_allreduce", "switches")
    member.calls.submit(call, done)
    return future
