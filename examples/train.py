"""Train a small classifier with DistributedDataParallel (or HSDP), through the switches.

    torchrun --nproc-per-node 4 examples/train.py
    torchrun --nproc-per-node 8 examples/train.py \
        --topology topologies/fat-tree-4.yaml --job jobs/fat-tree-4-bench.yaml
    torchrun --nproc-per-node 4 examples/train.py --hsdp 2   # 2 replicas of 2 shards

Each rank is a worker of the job (rank r: the job's r-th worker) that --topology
and --job name (default: INA_TOPOLOGY and INA_JOB, else Figure 1 and its job).
Without a lab, the ranks run on the embedded network (the reference model on the
loopback, which rank 0 starts); on a lab, start them with ``inalab ranks``.
``--backend gloo`` trains the same way with PyTorch's gloo, ``--hook`` with a gloo
process group whose gradient buckets go through the switches
(ina.torch.allreduce_hook). ``--hsdp R`` trains with fully_shard on a 2-D mesh of R
replicas of world/R shards each (HSDP: each layer's parameters sharded within a
replica, gradients reduce-scattered there and all-reduced across the replicas),
every group of the mesh a job of its own through the switches.

The data: scikit-learn's bundled digits (1,797 8x8 images, no download), split with
a fixed seed into 1,437 for training and 360 for testing; rank r trains on every
world-size-th training image from r. The model, its initial weights and every
rank's batches follow from ``--seed``, so runs with different backends see the same
data in the same order. Rank 0 prints one line per ``--log-every`` steps and, with
``--json FILE``, writes the run's figures there (time of every step, loss, test
accuracy, the final parameters' file).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

ROOT = Path(__file__).resolve().parents[1]


def data(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    test, train = order[:360], order[360:]
    return x[train], y[train], x[test], y[test]


def model(hidden: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))


def hsdp(net: torch.nn.Module, replicas: int, world: int) -> tuple[torch.nn.Module, list]:
    """``net`` under fully_shard on a (replicas, world / replicas) mesh: each Linear a
    unit of its own, sharded within a replica, replicated across them; and this
    rank's groups of the mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if replicas < 1 or world % replicas:
        raise SystemExit(f"--hsdp {replicas}: the world size {world} must be a multiple")
    mesh = init_device_mesh("cpu", (replicas, world // replicas),
                            mesh_dim_names=("replicate", "shard"))
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    return net, [mesh.get_group(0), mesh.get_group(1)]


@dataclass
class InaTotals:
    """This rank's calls through the switches so far, every group's added up."""

    calls: dict[str, dict[str, int]]  # by collective, then where it ran
    phases: dict[str, float]  # seconds by phase of a call

    @property
    def allreduces(self) -> int:
        return self.calls.get("allreduce", {}).get("switches", 0)


def ina_totals(groups: list) -> InaTotals:
    import ina.torch  # imported by main() only with the ina backend

    totals = InaTotals({}, {})
    for g in groups:
        for name, by_where in ina.torch.stats(g).items():
            mine = totals.calls.setdefault(name, {})
            for where, n in by_where.items():
                mine[where] = mine.get(where, 0) + n
        for k, v in ina.torch.profile(g).items():
            totals.phases[k] = totals.phases.get(k, 0.0) + v
    return totals


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topology", type=Path,
                   default=os.environ.get("INA_TOPOLOGY", ROOT / "topologies" / "figure1.yaml"),
                   help="the topology file (default: $INA_TOPOLOGY, else %(default)s)")
    p.add_argument("--job",
                   default=os.environ.get("INA_JOB", str(ROOT / "jobs" / "figure1-sum.yaml")),
                   help="the default group's job file; '' for none: the network plans and "
                        "deploys one (default: $INA_JOB, else %(default)s)")
    p.add_argument("--backend", choices=("ina", "gloo"), default="ina",
                   help="the process group's backend (default: %(default)s)")
    p.add_argument("--hook", action="store_true",
                   help="gloo process group, gradient buckets through the switches")
    p.add_argument("--hsdp", type=int, default=0, metavar="R",
                   help="fully_shard on a mesh of R replicas x world/R shards instead of "
                        "DDP (default: DDP)")
    p.add_argument("--steps", type=int, default=300, help="default: %(default)s")
    p.add_argument("--batch", type=int, default=16, help="per rank (default: %(default)s)")
    p.add_argument("--hidden", type=int, default=128,
                   help="width of the two hidden layers (default: %(default)s)")
    p.add_argument("--lr", type=float, default=0.05, help="default: %(default)s")
    p.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    p.add_argument("--compute-steps", type=int, default=20,
                   help="steps run again at the end without communication (DDP no_sync), "
                        "to measure the share of a step spent communicating "
                        "(default: %(default)s)")
    p.add_argument("--log-every", type=int, default=50, help="default: %(default)s")
    p.add_argument("--json", type=Path, metavar="FILE", help="rank 0 writes its figures here")
    p.add_argument("--params", type=Path, metavar="FILE",
                   help="rank 0 saves the trained parameters here (torch.save)")
    args = p.parse_args()

    os.environ["INA_TOPOLOGY"], os.environ["INA_JOB"] = str(args.topology), args.job
    if args.backend == "ina" or args.hook:
        import ina.torch  # registers the backend
    dist.init_process_group("gloo" if args.hook else args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y, x_test, y_test = data(args.seed)
    x, y = x[rank::world], y[rank::world]
    groups: list = [None]  # the default group, and a mesh's
    if args.hsdp:
        net, mesh_groups = hsdp(model(args.hidden, args.seed), args.hsdp, world)
        groups += mesh_groups
    else:
        net = DDP(model(args.hidden, args.seed))
    if args.hook:
        net.register_comm_hook(ina.torch.hook_state(), ina.torch.allreduce_hook)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    batches = torch.Generator().manual_seed(args.seed * 1000 + rank)

    def step() -> float:
        idx = torch.randint(0, len(y), (args.batch,), generator=batches)
        loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    dist.barrier()
    # What the calls through the switches counted before the loop (DDP's start:
    # an all-gather and broadcasts; the barrier): the phases reported are the loop's.
    before = ina_totals(groups) if args.backend == "ina" and not args.hook else None
    started, wall_start = time.perf_counter(), time.time()
    times, losses, clock = [], [], []
    for i in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)
        clock.append(time.perf_counter() - started)
        if rank == 0 and args.log_every and (i + 1) % args.log_every == 0:
            recent = statistics.median(times[-args.log_every:])
            print(f"step {i + 1:4d}  loss {losses[-1]:.4f}  {recent * 1000:.1f} ms/step",
                  flush=True)
    total, wall_end = time.perf_counter() - started, time.time()
    after = ina_totals(groups) if before is not None else None
    # Steps' compute alone (forward and backward, no gradient exchange, no update):
    # what a step costs without communication.
    compute = []
    # HSDP gathers the parameters in every forward: its compute is measured on a
    # local copy of the model, which has the same layers.
    local = model(args.hidden, args.seed) if args.hsdp else None
    with contextlib.nullcontext() if args.hsdp else net.no_sync():
        for _ in range(args.compute_steps):
            t0 = time.perf_counter()
            idx = torch.randint(0, len(y), (args.batch,), generator=batches)
            torch.nn.functional.cross_entropy((local or net)(x[idx]), y[idx]).backward()
            compute.append(time.perf_counter() - t0)
            opt.zero_grad()
    with torch.no_grad():
        accuracy = float((net(x_test).argmax(1) == y_test).float().mean())
    # Whole parameters (a sharded one gathered: every rank takes part).
    params = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in net.parameters()]
    if rank == 0:
        median = statistics.median(times)
        report = {
            "backend": "ina (hook on gloo)" if args.hook else args.backend,
            "world": world, "steps": args.steps, "batch": args.batch, "hidden": args.hidden,
            "parameters": sum(p.numel() for p in params), "hsdp": args.hsdp,
            "seconds": total, "step_median": median, "steps_per_second": args.steps / total,
            # The steps' wall-clock span, for what other processes used meanwhile.
            "wall_start": wall_start, "wall_end": wall_end,
            "compute_median": statistics.median(compute) if compute else None,
            "comm_share": max(0.0, 1 - statistics.median(compute) / median) if compute else None,
            "final_loss": statistics.mean(losses[-20:]), "test_accuracy": accuracy,
            "loss": losses, "clock": clock, "torch": torch.__version__,
        }
        if before is not None and after is not None:
            report["collectives"] = ina_totals(groups).calls  # the whole run's
            # Seconds in each phase (start, agreement, exponents, values) per all_reduce
            # of the loop (DDP), or per step (HSDP: its all-gathers, reduce-scatters,
            # all-reduces).
            calls = args.steps if args.hsdp else after.allreduces - before.allreduces
            report["phases"] = {k: (v - before.phases.get(k, 0.0)) / max(calls, 1)
                                for k, v in after.phases.items()}
            report["jobs"] = [ina.torch.job(g).to_json() for g in groups]
            # The least round trip of the default group's job tree: what a call's
            # start and agreement should cost at most.
            report["round_trip"] = ina.torch.round_trip()
        print(f"{report['backend']}: {args.steps} steps in {total:.1f}s "
              f"({median * 1000:.1f} ms/step median), loss {report['final_loss']:.4f}, "
              f"test accuracy {accuracy:.3f}", flush=True)
        if args.json:
            args.json.write_text(json.dumps(report))
        if args.params:
            torch.save([p.detach() for p in params], args.params)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
