"""The scenarios a rank of tests/torchranks.py runs (imported in the rank's process
only: it imports torch). Each is a function of keyword parameters that the test sends as
JSON, and returns the rank's report; SCENARIOS names them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _coalescing_manager as coalescing

import ina.torch

ops = {"SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.AVG, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX, "PRODUCT": dist.ReduceOp.PRODUCT}
groups: dict[str, Any] = {}


def gloo() -> Any:
    if "gloo" not in groups:
        groups["gloo"] = dist.new_group(backend="gloo")
    return groups["gloo"]


def rank_tensor(rank: int, dtype: str, shape: list[int], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    t = getattr(torch, dtype)
    if t.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 3).to(t)
    info = torch.iinfo(t)
    low, high = max(info.min, -1000), min(info.max, 1000)
    return torch.randint(low, high + 1, shape, generator=g, dtype=torch.int64).to(t)


def backend() -> dict[str, Any]:
    import hashlib

    secret = ina.torch.backend_of().member.worker.config.ring_secret
    return {"backend": dist.get_backend(), "rank": dist.get_rank(),
            "world": dist.get_world_size(), "stats": ina.torch.stats(),
            "ring_secret": hashlib.sha256(secret).hexdigest() if secret else None}


def allreduce(dtype: str, op: str, shape: list[int], seed: int = 0) -> dict[str, Any]:
    """One all_reduce; the report compares it with the exact reduction of every
    rank's tensor (each rank draws them all from the seed)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    tensor = rank_tensor(rank, dtype, shape, seed)
    dist.all_reduce(tensor, op=ops[op])
    inputs = torch.stack([rank_tensor(r, dtype, shape, seed).double()
                          for r in range(size)])
    exact = {"SUM": inputs.sum(0), "AVG": inputs.sum(0) / size,
             "MIN": inputs.min(0).values, "MAX": inputs.max(0).values}[op]
    if not tensor.is_floating_point():  # wrapped around in the type, as gloo does
        exact = exact.trunc().to(torch.int64).to(tensor.dtype).double()
    bound = ina.torch.error_bound(tensor)
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype).split(".")[1],
            "max_error": float((tensor.double() - exact).abs().max()),
            "within_bound": None if bound is None else
            bool(((tensor.double() - exact).abs() <= bound).all()),
            "digest": float(tensor.double().sum())}


def like_gloo(dtype: str, shape: list[int], seed: int = 0) -> dict[str, Any]:
    """The same SUM all_reduce through the switches and through gloo."""
    rank, size = dist.get_rank(), dist.get_world_size()
    mine = rank_tensor(rank, dtype, shape, seed)
    theirs = mine.clone()
    dist.all_reduce(mine)
    dist.all_reduce(theirs, group=gloo())
    bound = ina.torch.error_bound(mine)
    diff = (mine.double() - theirs.double()).abs()
    report = {"same_bits": bool(torch.equal(mine, theirs)), "max_diff": float(diff.max())}
    if bound is not None:
        # gloo sums in the tensor's type: each of its N - 1 additions rounds, by up
        # to half an ulp of the partial sum (at most the sum of magnitudes).
        inputs = torch.stack([rank_tensor(r, dtype, shape, seed).double()
                              for r in range(size)])
        gloo_rounding = (size - 1) * torch.finfo(mine.dtype).eps / 2 * inputs.abs().sum(0)
        exact = inputs.sum(0)
        report["within_bound_of_exact"] = bool(
            ((mine.double() - exact).abs() <= bound).all())
        report["within_bound_of_gloo"] = bool((diff <= bound + gloo_rounding).all())
        report["gloo_error"] = float((theirs.double() - exact).abs().max())
        report["ina_error"] = float((mine.double() - exact).abs().max())
    return report


def bucket(mib: int) -> dict[str, Any]:
    """One float32 bucket of ``mib`` MiB (DDP's default bucket is 25 MiB), through
    the switches and through gloo."""
    mine = rank_tensor(dist.get_rank(), "float32", [mib * 2**18], 11)
    theirs = mine.clone()
    started = time.monotonic()
    dist.all_reduce(mine)
    ina_seconds = time.monotonic() - started
    started = time.monotonic()
    dist.all_reduce(theirs, group=gloo())
    gloo_seconds = time.monotonic() - started
    bound = ina.torch.error_bound(mine)
    assert bound is not None
    # gloo's own rounding: half an ulp per addition, of at most the sum of magnitudes.
    magnitudes = rank_tensor(dist.get_rank(), "float32", [mib * 2**18], 11).double().abs()
    dist.all_reduce(magnitudes, group=gloo())
    gloo_rounding = (dist.get_world_size() - 1) * torch.finfo(torch.float32).eps / 2 \
        * magnitudes
    diff = (mine.double() - theirs.double()).abs()
    return {"within_bound_of_gloo": bool((diff <= bound + gloo_rounding).all()),
            "ina_seconds": ina_seconds, "gloo_seconds": gloo_seconds}


def wrapping_sum() -> dict[str, Any]:
    """int32 SUM beyond 2**31 - 1 through the switches and through gloo."""
    mine = torch.full((300,), 2**30 + dist.get_rank(), dtype=torch.int32)
    theirs = mine.clone()
    dist.all_reduce(mine)
    dist.all_reduce(theirs, group=gloo())
    return {"same_bits": bool(torch.equal(mine, theirs)), "value": int(mine[0])}


def beside_gloo(op: str, dtype: str) -> dict[str, Any]:
    """One all_reduce the switches cannot make, through ina and through gloo; what
    ina counted for it."""
    rank = dist.get_rank()
    if dtype == "bool":
        mine = torch.tensor([True, False, rank == 0, rank == 1])
    else:
        mine = (torch.arange(5) + rank + (2**40 if dtype == "int64" else 0)).to(
            getattr(torch, dtype))
    theirs = mine.clone()
    before = ina.torch.stats()
    dist.all_reduce(mine, op=ops[op])
    gloo_op = ops["SUM"] if op == "AVG" else ops[op]
    dist.all_reduce(theirs, op=gloo_op, group=gloo())
    if op == "AVG":  # gloo refuses an integer AVG: its SUM divided, as ina's
        n = dist.get_world_size()
        theirs = theirs / n if theirs.is_floating_point() else \
            torch.div(theirs, n, rounding_mode="trunc")
    return {"same_as_gloo": bool(torch.equal(mine, theirs)),
            "counted": since(before, ina.torch.stats())}


def async_calls(count: int, size: int) -> dict[str, Any]:
    """``count`` async all_reduces in flight, waited for in reverse order."""
    rank = dist.get_rank()
    tensors = [torch.full((size,), float(rank + i)) for i in range(count)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    futures = [w.get_future() for w in works]
    for w in reversed(works):
        w.wait()
    world = dist.get_world_size()
    expected = [sum(r + i for r in range(world)) for i in range(count)]
    return {"values": [float(t[0]) for t in tensors], "expected": expected,
            "futures_done": all(f.done() for f in futures),
            "future_values": [float(f.value()[0][0]) for f in futures]}


def repeated(calls: int) -> dict[str, Any]:
    """Many calls in a row, of changing sizes."""
    rank, world = dist.get_rank(), dist.get_world_size()
    wrong = 0
    for i in range(calls):
        t = torch.full((1 + 97 * i,), rank + i, dtype=torch.int32)
        dist.all_reduce(t)
        wrong += int((t != sum(r + i for r in range(world))).sum())
    return {"wrong": wrong}


def noncontiguous() -> dict[str, Any]:
    rank = dist.get_rank()
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)
    view = base.t()  # not contiguous: written back through the view
    dist.all_reduce(view)
    world = dist.get_world_size()
    factor = world * (world + 1) / 2
    return {"ok": bool(torch.allclose(base, torch.arange(12.).reshape(3, 4) * factor))}


def via_gloo() -> dict[str, Any]:
    """all_to_all, gather and scatter: through the backend's gloo group."""
    rank, world = dist.get_rank(), dist.get_world_size()
    before = counts()
    outs = [torch.zeros(1) for _ in range(world)]
    dist.all_to_all(outs, [torch.full((1,), float(10 * rank + r)) for r in range(world)])
    gathered = [torch.zeros(2) for _ in range(world)] if rank == 0 else None
    dist.gather(torch.full((2,), float(rank)), gathered, dst=0)
    scattered = torch.zeros(3)
    dist.scatter(scattered, [torch.full((3,), float(r)) for r in range(world)]
                 if rank == 1 else None, src=1)
    made = since(before, counts())
    return {"all_to_all": [float(o[0]) for o in outs],
            "gathered": None if gathered is None else [float(g[0]) for g in gathered],
            "scattered": float(scattered[0]), "counted": made}


Checks = list[tuple[torch.Tensor, torch.Tensor]]  # (result, reference)


@dataclass
class Case:
    """One collective's inputs at this rank: every rank's tensor of ``size`` values
    (``salt``: another draw), the exact reduction of all of them, the op, the root."""

    dtype: str
    op: str
    root: int
    seed: int
    part: int
    rank: int = field(default_factory=dist.get_rank)
    world: int = field(default_factory=dist.get_world_size)

    @property
    def type(self) -> torch.dtype:
        return getattr(torch, self.dtype)  # type: ignore[no-any-return]

    def of(self, r: int, size: int, salt: int = 0) -> torch.Tensor:
        return rank_tensor(r, self.dtype, [size], self.seed * 7 + salt)

    def reduced(self, size: int, salt: int = 0) -> torch.Tensor:
        inputs = torch.stack([self.of(r, size, salt).double() for r in range(self.world)])
        exact = {"SUM": inputs.sum(0), "AVG": inputs.sum(0) / self.world,
                 "MIN": inputs.min(0).values, "MAX": inputs.max(0).values}[self.op]
        if not self.type.is_floating_point:  # wrapped around in the type, as gloo does
            exact = exact.trunc().to(torch.int64).to(self.type).double()
        return exact

    def everyone(self, size: int, salt: int = 0) -> torch.Tensor:
        """Every rank's tensor, one after the other (what an all-gather makes)."""
        return torch.cat([self.of(r, size, salt) for r in range(self.world)]).double()


def _broadcast(c: Case) -> Checks:
    out = c.of(c.rank, c.part)
    dist.broadcast(out, src=c.root)
    return [(out, c.of(c.root, c.part).double())]


def _all_gather(c: Case) -> Checks:
    outs = [torch.zeros(c.part, dtype=c.type) for _ in range(c.world)]
    dist.all_gather(outs, c.of(c.rank, c.part))
    return [(o, c.of(r, c.part).double()) for r, o in enumerate(outs)]


def _all_gather_into_tensor(c: Case) -> Checks:
    out = torch.zeros(c.world * c.part, dtype=c.type)
    dist.all_gather_into_tensor(out, c.of(c.rank, c.part))
    return [(out, c.everyone(c.part))]


def _all_gather_into_tensor_coalesced(c: Case) -> Checks:
    outs = [torch.zeros(c.world * (c.part + k), dtype=c.type) for k in range(2)]
    with coalescing(async_ops=True) as cm:
        for k, o in enumerate(outs):
            dist.all_gather_into_tensor(o, c.of(c.rank, c.part + k, k))
    cm.wait()
    return [(o, c.everyone(c.part + k, k)) for k, o in enumerate(outs)]


def _all_gather_coalesced(c: Case) -> Checks:
    lists = [[torch.zeros(c.part + k, dtype=c.type) for k in range(2)]
             for _ in range(c.world)]
    dist.all_gather_coalesced(lists, [c.of(c.rank, c.part + k, k) for k in range(2)])
    return [(lists[r][k], c.of(r, c.part + k, k).double())
            for r in range(c.world) for k in range(2)]


def _all_reduce_coalesced(c: Case) -> Checks:
    ts = [c.of(c.rank, c.part + k, k) for k in range(2)]
    with coalescing(async_ops=True) as cm:
        for x in ts:
            dist.all_reduce(x, op=ops[c.op])
    cm.wait()
    return [(x, c.reduced(c.part + k, k)) for k, x in enumerate(ts)]


def _reduce(c: Case) -> Checks:
    out = c.of(c.rank, c.part)
    dist.reduce(out, dst=c.root, op=ops[c.op])
    return [(out, c.reduced(c.part) if c.rank == c.root else c.of(c.rank, c.part).double())]


def _reduce_scatter(c: Case) -> Checks:
    out = torch.zeros(c.part, dtype=c.type)
    whole = c.of(c.rank, c.world * c.part)
    dist.reduce_scatter(out, list(whole.chunk(c.world)), op=ops[c.op])
    return [(out, c.reduced(c.world * c.part).chunk(c.world)[c.rank])]


def _reduce_scatter_tensor(c: Case) -> Checks:
    out = torch.zeros(c.part, dtype=c.type)
    dist.reduce_scatter_tensor(out, c.of(c.rank, c.world * c.part), op=ops[c.op])
    return [(out, c.reduced(c.world * c.part).chunk(c.world)[c.rank])]


def _reduce_scatter_tensor_coalesced(c: Case) -> Checks:
    outs = [torch.zeros(c.part + k, dtype=c.type) for k in range(2)]
    with coalescing(async_ops=True) as cm:
        for k, o in enumerate(outs):
            dist.reduce_scatter_tensor(o, c.of(c.rank, c.world * (c.part + k), k),
                                       op=ops[c.op])
    cm.wait()
    return [(o, c.reduced(c.world * (c.part + k), k).chunk(c.world)[c.rank])
            for k, o in enumerate(outs)]


def _barrier(c: Case) -> Checks:
    dist.barrier()
    return []


#: Each collective of torch's API, by its name: what it gives this rank, beside its
#: reference.
COLLECTIVES: dict[str, Callable[[Case], Checks]] = {
    "broadcast": _broadcast, "all_gather": _all_gather,
    "all_gather_into_tensor": _all_gather_into_tensor,
    "all_gather_into_tensor_coalesced": _all_gather_into_tensor_coalesced,
    "all_gather_coalesced": _all_gather_coalesced,
    "all_reduce_coalesced": _all_reduce_coalesced, "reduce": _reduce,
    "reduce_scatter": _reduce_scatter, "reduce_scatter_tensor": _reduce_scatter_tensor,
    "reduce_scatter_tensor_coalesced": _reduce_scatter_tensor_coalesced,
    "barrier": _barrier,
}


def collective(name: str, dtype: str, op: str = "SUM", root: int = 1, seed: int = 0,
               part: int = 150) -> dict[str, Any]:
    """One collective of torch's API (``name``) on every rank's tensor of ``part``
    values (``world`` parts where the collective cuts its input), against the
    reference computed from every rank's tensor (each rank draws them all from the
    seed): ``exact`` (movements, integer reductions: the same bits) or
    ``within_bound`` (float reductions: within the bound ina.torch reports), and
    where the call went."""
    if name not in COLLECTIVES:
        raise ValueError(f"no collective {name}")
    before = counts()
    checks = COLLECTIVES[name](Case(dtype, op, root, seed, part))
    made = since(before, counts())
    exact, within = True, True
    for result, reference in checks:
        diff = (result.double() - reference).abs()
        exact = exact and bool((diff == 0).all())
        bound = ina.torch.error_bound(result)
        within = within and bool((diff <= (0 if bound is None else bound)).all())
    return {"exact": exact, "within_bound": within, "counted": made,
            "bounded": any(ina.torch.error_bound(r) is not None for r, _ in checks)}


def small_model(seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


def trained(model: torch.nn.Module, steps: int, data_seed: int
            ) -> tuple[list[torch.Tensor], float]:
    """``steps`` of SGD on batches drawn from ``data_seed``: the rank's part of each
    parameter afterwards (its shard of a sharded one), and the last loss."""
    g = torch.Generator().manual_seed(data_seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss = torch.zeros(())
    for _ in range(steps):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
    local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    return [t.detach().clone() for t in local], float(loss)


def largest_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True) if x.numel())


def train(steps: int, hook: bool = False, seed: int = 0,
          bucket_cap_mb: float = 25.0) -> dict[str, Any]:
    """A small model trained with DDP, through the switches (the ina group, or
    the hook on a gloo group) and through gloo alone, from the same start and
    data: the largest difference between their parameters."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = dist.get_rank()

    def model() -> torch.nn.Module:
        return small_model(seed)

    def run(ddp: DDP) -> tuple[list[torch.Tensor], float]:
        return trained(ddp, steps, seed * 100 + rank)

    if hook:
        ddp = DDP(model(), process_group=gloo(), bucket_cap_mb=bucket_cap_mb)
        ddp.register_comm_hook(hooks.setdefault("state", ina.torch.hook_state()),
                               ina.torch.allreduce_hook)
    else:
        ddp = DDP(model(), bucket_cap_mb=bucket_cap_mb)
    worker = (hooks["state"] if hook else ina.torch.backend_of()).member.worker
    before = counts()
    guessed_before = worker.guesses.guessed if worker.guesses is not None else 0
    through_switches, loss = run(ddp)
    made = since(before, counts())
    guessed = (worker.guesses.guessed if worker.guesses is not None else 0) - guessed_before
    reference, loss_gloo = run(DDP(model(), process_group=gloo()))
    return {"max_param_diff": largest_difference(through_switches, reference),
            "loss": loss, "loss_gloo": loss_gloo, "stats": made, "guessed": guessed}


def collectives(names: list[str], dtypes: list[str], root: int = 1) -> dict[str, Any]:
    """``collective`` of each name for each type, in one run: {"name/dtype": report}."""
    return {f"{n}/{d}": collective(n, d, root=root) for n in names for d in dtypes}


def fsdp(version: str, steps: int, seed: int = 0, bf16: bool = False) -> dict[str, Any]:
    """A small model trained with FSDP (``fsdp1``: FullyShardedDataParallel;
    ``fully_shard``: FSDP2, each Linear a unit of its own; ``bf16``: its
    parameters gathered and gradients reduced in bfloat16) through the ina group
    and through gloo alone, from the same start and data: the largest difference
    between the two runs' shards of the parameters (each rank holds its shard)."""
    from torch.distributed.fsdp import (
        FullyShardedDataParallel,
        MixedPrecisionPolicy,
        fully_shard,
    )
    from torch.distributed.tensor import DTensor

    rank = dist.get_rank()

    def wrapped(group: Any) -> torch.nn.Module:
        model = small_model(seed)
        if version == "fsdp1":
            return FullyShardedDataParallel(model, process_group=group,
                                            device_id=torch.device("cpu"))
        from torch.distributed.device_mesh import DeviceMesh

        mesh = DeviceMesh.from_group(group, "cpu")
        policy = MixedPrecisionPolicy(torch.bfloat16, torch.bfloat16) if bf16 \
            else MixedPrecisionPolicy()
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        return model

    def run(model: torch.nn.Module) -> tuple[list[torch.Tensor], float]:
        return trained(model, steps, seed * 100 + rank)

    before = counts()
    model = wrapped(dist.group.WORLD)
    through_switches, loss = run(model)
    made = since(before, counts())
    full_ok = None
    if version == "fully_shard":  # DTensor's full_tensor(): an all-gather too
        full_ok = all(isinstance(p, DTensor) for p in model.parameters()) and all(
            torch.equal(p.full_tensor().chunk(dist.get_world_size())[rank], shard)
            for p, shard in zip(model.parameters(), through_switches, strict=True)
            if isinstance(p, DTensor))
    reference, loss_gloo = run(wrapped(gloo()))
    return {"max_param_diff": largest_difference(through_switches, reference),
            "loss": loss, "loss_gloo": loss_gloo, "stats": made, "full_tensor_ok": full_ok}


def packets(dtype: str, size: int, half_width: int = 32) -> dict[str, Any]:
    """Packets a SUM all_reduce of ``size`` values sent, with float16 and bfloat16
    in ``half_width``-bit elements."""
    ina.torch.set_half_width(half_width)
    try:
        worker = ina.torch.backend_of().member.worker
        before = worker.stats.packets
        tensor = rank_tensor(dist.get_rank(), dtype, [size], 1)
        dist.all_reduce(tensor)
        bound = ina.torch.error_bound(tensor)
        return {"packets": worker.stats.packets - before,
                "max_bound": None if bound is None else float(bound.max())}
    finally:
        ina.torch.set_half_width(32)


hooks: dict[str, Any] = {}


def counts() -> dict[str, dict[str, int]]:
    """Collectives made so far: the ina group's, and the DDP hook's."""
    made = ina.torch.stats() if dist.get_backend() == "ina" else {}
    if "state" in hooks:
        made.update(hooks["state"].member.counts.counts)
    return {k: dict(v) for k, v in made.items()}


def since(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
          ) -> dict[str, dict[str, int]]:
    made = {name: {where: d for where, n in by_where.items()
                   if (d := n - before.get(name, {}).get(where, 0))}
            for name, by_where in after.items()}
    return {name: by_where for name, by_where in made.items() if by_where}


def die_after(calls: int, victim: int) -> dict[str, Any]:
    """All-reduce in a loop; rank ``victim`` exits without a word after ``calls``."""
    rank = dist.get_rank()
    started = time.monotonic()
    for i in range(10_000):
        if rank == victim and i == calls:
            os._exit(17)
        dist.all_reduce(torch.ones(1000))
    return {"elapsed": time.monotonic() - started}


def nothing() -> dict[str, Any]:
    return {}


def gil_bound(seconds: int, victim: int) -> dict[str, Any]:
    """Rank ``victim`` spends ``seconds`` in one C call that holds the GIL (no
    other thread of its process runs), then every rank all-reduces."""
    import ctypes

    dist.all_reduce(torch.ones(10))
    started = time.monotonic()
    if dist.get_rank() == victim:
        ctypes.PyDLL(None).sleep(seconds)
    tensor = torch.ones(1000)
    dist.all_reduce(tensor)
    return {"elapsed": time.monotonic() - started, "value": float(tensor[0])}


def specials(victim: int) -> dict[str, Any]:
    """Rank ``victim``'s gradient holds a NaN and an infinity (AMP's overflow):
    every rank's SUM all_reduce of float32, float16 and bfloat16 tensors."""
    out = {}
    for dtype in ("float32", "float16", "bfloat16"):
        tensor = torch.ones(700, dtype=getattr(torch, dtype))
        if dist.get_rank() == victim:
            tensor[3], tensor[500] = float("nan"), float("inf")
        dist.all_reduce(tensor)
        out[dtype] = [str(float(tensor[i])) for i in (0, 3, 500)]
    return out


def half_sums(dtype: str) -> dict[str, Any]:
    """The issue's 16-bit inputs through the switches and through gloo: 640 values
    of about 1e-3 with one 10.0 among them (the median relative error of each
    against the exact sum), and [60000, 1, 3, 5] at every rank."""
    t, size = getattr(torch, dtype), dist.get_world_size()
    g = torch.Generator().manual_seed(dist.get_rank())
    small = (torch.rand(640, generator=g, dtype=torch.float64) * 1e-3 + 5e-4)
    small[100] = 10.0
    inputs = [small.to(t)]
    exact = torch.zeros(640, dtype=torch.float64)
    for r in range(size):
        gr = torch.Generator().manual_seed(r)
        other = torch.rand(640, generator=gr, dtype=torch.float64) * 1e-3 + 5e-4
        other[100] = 10.0
        exact += other.to(t).double()
    mine, theirs = inputs[0].clone(), inputs[0].clone()
    dist.all_reduce(mine)
    dist.all_reduce(theirs, group=gloo())

    def median_error(x: torch.Tensor) -> float:
        return float(((x.double() - exact).abs() / exact.abs()).median())

    edge = torch.tensor([60000.0, 1.0, 3.0, 5.0], dtype=t)
    dist.all_reduce(edge)
    return {"ina": median_error(mine), "gloo": median_error(theirs),
            "edge": [str(float(v)) for v in edge]}

# --- process groups: each a job of its own --------------------------------------


def int_sums(group: Any, members: list[int], calls: int, size: int, salt: int = 0
             ) -> int:
    """``calls`` int32 all_reduces in ``group`` (of global ranks ``members``): how
    many values came out wrong."""
    rank, wrong = dist.get_rank(), 0
    for i in range(calls):
        t = torch.full((size + i,), rank * 10 + i + salt, dtype=torch.int32)
        dist.all_reduce(t, group=group)
        wrong += int((t != sum(r * 10 + i + salt for r in members)).sum())
    return wrong


def service_jobs() -> dict[str, Any]:
    """What the network's job service says: the jobs on its switches, those it
    granted, and the job state its switches hold."""
    from ina.host.jobclient import JobClient

    path = ina.torch.backend_of().member.node.service
    assert path is not None
    with JobClient(path) as client:
        jobs = client.jobs()
    return {"deployed": list(jobs.deployed), "granted": list(jobs.granted),
            "state": jobs.state}


def subgroup(members: list[int], calls: int = 3, size: int = 700) -> dict[str, Any]:
    """new_group(members) at every rank (as torch requires); its members make
    int32 all_reduces in it, the other ranks nothing; then it is destroyed."""
    rank = dist.get_rank()
    started = time.monotonic()
    group: Any = dist.new_group(members)
    report: dict[str, Any] = {"member": rank in members,
                              "seconds": time.monotonic() - started}
    if rank in members:
        report.update(wrong=int_sums(group, members, calls, size),
                      stats=ina.torch.stats(group), job=ina.torch.job(group).to_json(),
                      world_job=ina.torch.job().job_id)
        dist.destroy_process_group(group)
    return report


def overlapping(a: list[int], b: list[int], rounds: int, size: int = 500
                ) -> dict[str, Any]:
    """Two groups that share ranks, used alternately, then both at once (a rank
    in both has a call of each in flight)."""
    rank = dist.get_rank()
    ga: Any = dist.new_group(a)
    gb: Any = dist.new_group(b)
    wrong = 0
    for i in range(rounds):
        for members, g in ((a, ga), (b, gb)):
            if rank in members:
                wrong += int_sums(g, members, 1, size + i, salt=100 * i)
    mine = [(k, m, g, torch.full((3000,), rank + k, dtype=torch.int32))
            for k, (m, g) in enumerate(((a, ga), (b, gb))) if rank in m]
    works = [dist.all_reduce(t, group=g, async_op=True) for _, _, g, t in mine]
    for w in works:
        assert w is not None
        w.wait()
    for k, m, _, t in mine:
        wrong += int((t != sum(r + k for r in m)).sum())
    jobs = {name: ina.torch.job(g).job_id for name, m, g in (("a", a, ga), ("b", b, gb))
            if rank in m}
    stats = {name: ina.torch.stats(g) for name, m, g in (("a", a, ga), ("b", b, gb))
             if rank in m}
    for m, g in ((a, ga), (b, gb)):
        if rank in m:
            dist.destroy_process_group(g)
    return {"wrong": wrong, "jobs": jobs, "stats": stats}


def churn(times: int, members: list[int]) -> dict[str, Any]:
    """A group of ``members`` made, used once and destroyed ``times`` times; what
    the job service holds before and after (at the group's rank 0)."""
    rank = dist.get_rank()
    before = service_jobs() if rank == members[0] else None
    wrong, ids, seconds, deploys = 0, set(), [], []
    for _ in range(times):
        started = time.monotonic()
        group: Any = dist.new_group(members)
        seconds.append(time.monotonic() - started)
        if rank in members:
            wrong += int_sums(group, members, 1, 300)
            ids.add(ina.torch.job(group).job_id)
            deploys.append(ina.torch.job(group).seconds)
            dist.destroy_process_group(group)
    dist.barrier()  # every member has given its group back
    after = service_jobs() if rank == members[0] else None
    return {"wrong": wrong, "job_ids": sorted(ids), "seconds": seconds,
            "deploys": deploys, "before": before, "after": after}


def die_in_group(members: list[int], victim: int) -> dict[str, Any]:
    """A group of ``members`` (``victim`` among them) used once; then ``victim``
    exits without a word while the others call again (and fail)."""
    from datetime import timedelta

    rank = dist.get_rank()
    store = dist.distributed_c10d._get_default_store()
    group: Any = dist.new_group(members)
    survivors = [f"die_in_group/{r}" for r in members if r != victim]
    if rank not in members:
        dist.barrier()  # the world's job: every rank's, the victim's too
        # Rank 0 keeps the store up until the survivors have seen the victim go.
        store.wait(survivors, timedelta(seconds=90))
        return {}
    int_sums(group, members, 1, 300)
    dist.barrier()
    if rank == victim:
        os._exit(17)
    try:
        int_sums(group, members, 1, 300)
    finally:
        store.set(f"die_in_group/{rank}", "failed")
    return {}


def subgroups(size: int, calls: int = 2) -> dict[str, Any]:
    """new_subgroups(group_size=size): this rank's subgroup, int32 all_reduces in it."""
    group: Any
    group, all_groups = dist.new_subgroups(group_size=size)
    members = dist.get_process_group_ranks(group)
    report = {"members": members, "wrong": int_sums(group, members, calls, 400),
              "job": ina.torch.job(group).to_json(), "stats": ina.torch.stats(group)}
    dist.destroy_process_group(group)  # every rank is in one of them
    assert group in all_groups
    return report


def split(members: list[list[int]], backend: str = "ina") -> dict[str, Any]:
    """split_group of the default group (ina) or of a gloo group of every rank:
    the error torch gives on CPU, if any."""
    parent = None if backend == "ina" else gloo()
    try:
        dist.split_group(parent, split_ranks=members)
    except Exception as exc:  # noqa: BLE001 (the error torch gives is the report)
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"error": None}


def gloo_mesh(shape: list[int], names: tuple[str, str]) -> Any:
    """A 2-D DeviceMesh of gloo groups, laid out as init_device_mesh lays out ranks
    (row-major): every rank makes every group, as new_group requires."""
    from torch.distributed.device_mesh import DeviceMesh

    ids = torch.arange(shape[0] * shape[1]).reshape(shape)
    rank = dist.get_rank()
    mine: list[Any] = [None, None]
    for dim in (0, 1):
        lines = ids.t() if dim == 0 else ids
        for line in lines:
            g = dist.new_group(line.tolist(), backend="gloo")
            if rank in line.tolist():
                mine[dim] = g
    return DeviceMesh.from_group(mine, "cpu", mesh=ids, mesh_dim_names=names)


def mesh_stats(mesh: Any) -> dict[str, dict[str, int]]:
    """The collectives of every group of ``mesh`` at this rank, by where they went."""
    total: dict[str, dict[str, int]] = {}
    for dim in range(mesh.ndim):
        for name, by_where in ina.torch.stats(mesh.get_group(dim)).items():
            for where, n in by_where.items():
                total.setdefault(name, {})[where] = total.get(name, {}).get(where, 0) + n
    return total


def hsdp(shape: list[int], steps: int, seed: int = 0) -> dict[str, Any]:
    """fully_shard on a 2-D mesh (HSDP: replicas x shards; init_device_mesh, each
    dimension's groups jobs of their own) through the switches, and the same on a
    mesh of gloo groups, from the same start and data: the largest difference
    between the two runs' shards; and every mesh group's collectives."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    names = ("replicate", "shard")
    started = time.monotonic()
    mesh = init_device_mesh("cpu", tuple(shape), mesh_dim_names=names)
    made = time.monotonic() - started

    def wrapped(m: Any) -> torch.nn.Module:
        model = small_model(seed)
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=m)
        fully_shard(model, mesh=m)
        return model

    data = seed * 100 + dist.get_rank()
    through_switches, loss = trained(wrapped(mesh), steps, data)
    reference, loss_gloo = trained(wrapped(gloo_mesh(shape, names)), steps, data)
    return {"max_param_diff": largest_difference(through_switches, reference),
            "loss": loss, "loss_gloo": loss_gloo, "stats": mesh_stats(mesh),
            "jobs": [ina.torch.job(mesh.get_group(d)).to_json() for d in range(2)],
            "mesh_seconds": made}


def tensor_parallel(shape: list[int], steps: int, seed: int = 0) -> dict[str, Any]:
    """Tensor parallelism on a 2-D mesh's "tp" groups (a column-wise then a
    row-wise Linear, parallelize_module) and fully_shard on its "dp" groups,
    through the switches and on a mesh of gloo groups, from the same start and
    data (the ranks of a tp group share their batches): the largest difference
    between the two runs' local parameters; and every mesh group's collectives,
    while the model is built (distribute_tensor scatters each parameter's shards)
    and while it trains."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    names = ("dp", "tp")
    mesh = init_device_mesh("cpu", tuple(shape), mesh_dim_names=names)

    def wrapped(m: Any) -> torch.nn.Module:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 10))
        parallelize_module(model, m["tp"], {"0": ColwiseParallel(),
                                            "2": RowwiseParallel()})
        fully_shard(model, mesh=m["dp"])
        return model

    data = seed * 100 + mesh["dp"].get_local_rank()
    model = wrapped(mesh)
    made = mesh_stats(mesh)
    through_switches, loss = trained(model, steps, data)
    reference, loss_gloo = trained(wrapped(gloo_mesh(shape, names)), steps, data)
    return {"max_param_diff": largest_difference(through_switches, reference),
            "loss": loss, "loss_gloo": loss_gloo, "construction": made,
            "stats": since(made, mesh_stats(mesh))}


#: The scenarios a test names, by name.
SCENARIOS: dict[str, Callable[..., Any]] = {f.__name__: f for f in (
    backend, allreduce, like_gloo, bucket, wrapping_sum, beside_gloo, async_calls, repeated,
    noncontiguous, via_gloo, collective, collectives, train, fsdp, packets, die_after, nothing,
    gil_bound, specials, half_sums, service_jobs, subgroup, overlapping, churn, die_in_group,
    hsdp, tensor_parallel, subgroups, split,
)}
