"""PyTorch through the switches (needs the ``torch`` extra: ``pip install 'ina[torch]'``).

``import ina.torch`` registers the torch.distributed backend ``ina``::

    import ina.torch, torch.distributed as dist
    dist.init_process_group("ina")   # INA_TOPOLOGY, INA_JOB name the job; torchrun's env

and offers a DDP communication hook for a gloo or NCCL process group::

    ddp.register_comm_hook(ina.torch.hook_state(), ina.torch.allreduce_hook)

See ina.torch.backend, ina.torch.hook and ina.torch.member.
"""

from ina.torch.backend import (
    ProcessGroupIna,
    backend_of,
    error_bound,
    job,
    profile,
    register,
    round_trip,
    set_half_width,
    stats,
)
from ina.torch.hook import HookState, allreduce_hook, hook_state
from ina.torch.member import Settings

register()

__all__ = ["HookState", "ProcessGroupIna", "Settings", "allreduce_hook", "backend_of",
           "error_bound", "hook_state", "job", "profile", "register", "round_trip",
           "set_half_width", "stats"]
