"""One rank of ``inabench collectives`` on a worker's host: a process that stays up
for a whole case and runs, one command at a time, a collective three ways on the same
arrays: through the switches (an ina.host.worker.Worker), through torch's gloo
(torch.distributed, TCP between the hosts through the switches' IPv4 forwarding),
and on the ring of hosts the fallback uses (ina.host.onhosts.call_on_hosts, as if no
switch aggregated the job).

    python -m ina.bench.collective_rank --worker w1 [--timeout 60]

It reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, INA_TOPOLOGY, INA_JOB and
GLOO_SOCKET_IFNAME from the environment (ina.lab.ranks.rank_env), sets up gloo and
the worker (one warm-up barrier each), says ``up``, then for each command line (a
``Command`` as JSON): builds its arrays and the exact result it expects (rank r's
array is ``random_floats(size, r)``, so every rank knows every other's), says
``ready``, waits for a line (``go``: every rank starts at once), runs the
collective, and prints one JSON line: a ``RankReport``. ``quit`` ends it. Keeping
the processes up keeps torch's import and gloo's set-up out of every figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.bench.timing import wait_for_go
from ina.errors import UsageError
from ina.host.arrays import random_floats

LOG = logging.getLogger(__name__)
COLLECTIVES = ("broadcast", "reduce", "reduce_scatter", "allgather", "allreduce", "barrier")
METHODS = ("INA", "gloo", "hosts")
#: INA with each chunk of a Broadcast or an Allgather sent once from its owner
#: (WorkerConfig.owned), measured beside INA's default.
OWNED = "INA owned"
OWNED_COLLECTIVES = ("broadcast", "allgather")
DTYPES = {"float32": np.float32, "float16": np.float16}


@dataclass(frozen=True)
class Command:
    """One measurement: ``method`` runs ``collective`` on ``size`` values of ``dtype``
    (Allgather: each rank's part is size / N of them; Barrier: ``repeat`` barriers
    in a row), ``width``: the elements' bits through the switches (None: the
    type's default), ``root``: Broadcast's source and Reduce's destination."""

    method: str
    collective: str
    size: int
    dtype: str = "float32"
    width: int | None = None
    root: int = 0
    repeat: int = 1


#: What a method's call gave: the values (None: none), their error bound (None: exact
#: or gloo's), retransmissions, whether it ran on hosts.
Outcome = tuple["npt.NDArray[Any] | None", "npt.NDArray[np.float64] | None", int, bool]


@dataclass
class RankReport:
    seconds: float  # from go to the last call's end
    correct: bool  # bit for bit (movements), within the bound (reductions)
    max_error: float  # largest difference from the exact result (0 for movements)
    retransmissions: int = 0
    on_hosts: bool = False  # a call through the switches ran on hosts instead
    error: str = ""  # why the collective failed (then nothing else counts)


def inputs(command: Command, world: int) -> list[npt.NDArray[Any]]:
    """Every rank's array for ``command`` (Allgather: its part)."""
    dtype = DTYPES[command.dtype]
    n = command.size // world if command.collective == "allgather" else command.size
    return [random_floats(n, r).astype(dtype) for r in range(world)]


def expected(command: Command, arrays: list[npt.NDArray[Any]], rank: int
             ) -> npt.NDArray[Any] | None:
    """What rank ``rank`` must get (None: nothing, a Reduce's other ranks, a Barrier);
    sums exact, in float64."""
    c = command.collective
    world = len(arrays)
    if c == "broadcast":
        return arrays[command.root]
    if c == "allgather":
        return np.concatenate(arrays)
    if c == "barrier" or (c == "reduce" and rank != command.root):
        return None
    total = np.sum([a.astype(np.float64) for a in arrays], axis=0)
    if c == "reduce_scatter":
        part = command.size // world
        return np.asarray(total[rank * part: (rank + 1) * part])
    return np.asarray(total)


def float_rounding(arrays: list[npt.NDArray[Any]], dtype: Any, part: slice
                   ) -> npt.NDArray[np.float64]:
    """How far a sum of ``arrays`` added in ``dtype`` one at a time may be from the
    exact one: half an ulp of at most the sum of magnitudes per addition (and of the
    smallest normal, for float16's subnormals)."""
    magnitudes = np.sum([np.abs(a[part].astype(np.float64)) for a in arrays], axis=0)
    info = np.finfo(dtype)
    return np.asarray(len(arrays) * info.eps / 2 * (magnitudes + float(info.tiny)))


class RankProcess:
    """This rank's gloo group and switch worker, and the commands it runs."""

    def __init__(self, worker_name: str, timeout: float):
        import torch.distributed as dist

        from ina.host.config import WorkerConfig
        from ina.host.transport import UdpTransport
        from ina.host.window import RtoEstimator
        from ina.host.worker import Worker

        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.timeout = timeout
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
        self.config = WorkerConfig.from_files(os.environ["INA_TOPOLOGY"],
                                              os.environ["INA_JOB"], worker_name)
        if self.config.rank != self.rank:
            raise UsageError(f"{worker_name} is rank {self.config.rank} of the job, not "
                             f"{self.rank}")
        self.transport = UdpTransport(self.config.target)
        self.worker = Worker(self.config, self.transport, timeout=timeout,
                             rto=RtoEstimator())
        dist.barrier()
        self.worker.barrier()

    def close(self) -> None:
        import torch.distributed as dist

        self.transport.close()
        dist.destroy_process_group()

    def run(self, command: Command, go: Callable[[], None]) -> RankReport:
        """Prepare ``command``, ``go()`` (every rank at once), run and check it."""
        arrays = inputs(command, self.world)
        mine = arrays[self.rank].copy()
        if command.collective == "broadcast" and self.rank != command.root:
            mine[:] = 0  # only the root's values may reach anyone
        want = expected(command, arrays, self.rank)
        call = {"INA": self._ina, OWNED: self._ina, "gloo": self._gloo,
                "hosts": self._hosts}[command.method]
        go()
        started = time.monotonic()
        try:
            got, bound, retransmissions, on_hosts = call(command, mine)
        except Exception as exc:  # a failed collective is a figure too: reported
            LOG.exception("%s %s failed", command.method, command.collective)
            return RankReport(time.monotonic() - started, False, float("nan"),
                              error=f"{type(exc).__name__}: {exc}")
        seconds = time.monotonic() - started
        if want is None:
            return RankReport(seconds, got is None or got.size == 0, 0.0, retransmissions,
                              on_hosts)
        if command.collective in ("broadcast", "allgather"):
            exact = got is not None and got.dtype == want.dtype and np.array_equal(got, want)
            return RankReport(seconds, bool(exact), 0.0, retransmissions, on_hosts)
        assert got is not None
        diff = np.abs(got.astype(np.float64) - want)
        if bound is None:  # gloo: its own float rounding
            dtype = DTYPES[command.dtype]
            world = self.world
            part = (slice(self.rank * (command.size // world),
                          (self.rank + 1) * (command.size // world))
                    if command.collective == "reduce_scatter" else slice(None))
            bound = float_rounding(arrays, dtype, part)
        return RankReport(seconds, bool(np.all(diff <= bound)), float(diff.max()),
                          retransmissions, on_hosts)

    def _ina(self, command: Command, mine: npt.NDArray[Any]) -> Outcome:
        from ina.host.allgather import allgather
        from ina.host.broadcast import broadcast
        from ina.host.window import RtoEstimator

        w, c = self.worker, command.collective
        # Round trips measured before (the other regime's, say) are not this one's: each
        # measurement starts from the initial timeout, as a fresh inaworker does.
        w.rto = RtoEstimator()
        if c == "barrier":
            for _ in range(command.repeat):
                r = w.barrier()
        elif command.method == OWNED:
            owned = dataclasses.replace(w.config, owned=True)
            r = w.call(broadcast(owned, mine, command.root) if c == "broadcast"
                       else allgather(owned, mine))
        elif c == "broadcast":
            r = w.broadcast(mine, command.root)
        elif c == "reduce":
            r = w.reduce(mine, command.root, width=command.width)
        elif c == "reduce_scatter":
            r = w.reduce_scatter(mine, width=command.width)
        elif c == "allgather":
            r = w.allgather(mine)
        else:
            r = w.allreduce(mine, width=command.width)
        return r.values, r.error_bound, r.retransmissions, r.on_hosts

    def _hosts(self, command: Command, mine: npt.NDArray[Any]) -> Outcome:
        """As the fallback runs a call when no switch aggregates the job."""
        from ina.host.allgather import allgather
        from ina.host.allreduce import allreduce
        from ina.host.barrier import barrier
        from ina.host.broadcast import broadcast
        from ina.host.onhosts import call_on_hosts
        from ina.host.reduce import reduce_to
        from ina.host.reduce_scatter import reduce_scatter
        from ina.host.results import CallStats

        cfg, c, op = self.config, command.collective, self.config.op
        bodies = {
            "barrier": lambda: barrier(cfg),
            "broadcast": lambda: broadcast(cfg, mine, command.root),
            "reduce": lambda: reduce_to(cfg, mine, command.root, op, command.width),
            "reduce_scatter": lambda: reduce_scatter(cfg, mine, op, command.width),
            "allgather": lambda: allgather(cfg, mine),
            "allreduce": lambda: allreduce(cfg, mine, op, command.width),
        }
        for _ in range(command.repeat if c == "barrier" else 1):
            r, _ = call_on_hosts(cfg, self.timeout, CallStats(), bodies[c](), 0, True)
        return r.values, r.error_bound, 0, True

    def _gloo(self, command: Command, mine: npt.NDArray[Any]) -> Outcome:
        import torch
        import torch.distributed as dist

        c, t = command.collective, torch.from_numpy(mine)
        if c == "barrier":
            for _ in range(command.repeat):
                dist.barrier()
            return None, None, 0, False
        if c == "broadcast":
            dist.broadcast(t, command.root)
        elif c == "reduce":
            dist.reduce(t, command.root)
            if self.rank != command.root:
                return None, None, 0, False
        elif c == "reduce_scatter":
            out = torch.empty(t.numel() // self.world, dtype=t.dtype)
            dist.reduce_scatter_tensor(out, t)
            t = out
        elif c == "allgather":
            out = torch.empty(t.numel() * self.world, dtype=t.dtype)
            dist.all_gather_into_tensor(out, t)
            t = out
        else:
            dist.all_reduce(t)
        return t.numpy(), None, 0, False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ina.bench.collective_rank",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", required=True, help="this host's worker of the job")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds without progress before a collective fails")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    rank = RankProcess(args.worker, args.timeout)
    print("up", flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            report = rank.run(Command(**json.loads(line)), wait_for_go)
            print(json.dumps(asdict(report)), flush=True)
    finally:
        rank.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
