"""Real torch.distributed ranks for the tests of ina.torch, each its own process.

``RankPool`` starts one process per rank (``python -m torchranks``), with torchrun's
variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and the job's (INA_TOPOLOGY,
INA_JOB, ...). Each rank runs ``init_process_group(backend)``, says ``ready`` and then
runs the scenarios the test names, one JSON line in and one out: every rank the same
scenario, as every rank of a job makes the same calls. The scenarios are in
tests/torchscenarios.py (SCENARIOS); what each returns is the rank's report.

Run alone (``python -m torchranks once SCENARIO [JSON]``), a rank runs one scenario
and exits: for the tests where a rank fails or dies.
"""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from ina.bench.hostprocess import HostProcess, stop_all

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT = 120.0


#: Ports for the ranks' store: below the kernel's ephemeral range (32768 on), so no
#: connect() elsewhere can take the port between our check and the store's bind, and
#: above the rings' on hosts (ina.host.config.ring_port).
STORE_PORTS = range(28_000, 32_700)


def free_port() -> int:
    """A port no socket holds now, from STORE_PORTS (a port the kernel hands out for
    port 0 may be taken by another process's connect() before the store binds it)."""
    rng = random.Random()
    while True:
        port = rng.choice(STORE_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port


#: Starts rank ``r``'s process: called as ``launch(rank, argv, env, **popen)``, where
#: ``popen`` are subprocess.Popen's arguments for its pipes; the process. Default: on
#: this machine; the BMv2 tier starts each rank on its worker's host.
Launch = Callable[..., "subprocess.Popen[Any]"]
Started = TypeVar("Started")


def local_launch(rank: int, argv: list[str], env: dict[str, str], **popen: Any
                 ) -> subprocess.Popen[Any]:
    return subprocess.Popen(argv, env=env, **popen)


def rank_env(rank: int, size: int, port: int, extra: Mapping[str, str],
             master: str = "127.0.0.1") -> dict[str, str]:
    env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(rank),
           "MASTER_ADDR": master, "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT / "controller"),
                                          os.environ.get("PYTHONPATH", "")]),
           **extra}
    return env


def start_ranks(size: int, args: list[str], extra: Mapping[str, str],
                start: Callable[[int, list[str], dict[str, str]], Started],
                master: str = "127.0.0.1") -> list[Started]:
    """``start(rank, argv, env)`` for every rank of ``size``: ``python -m torchranks
    ARGS`` with its torchrun variables."""
    port = free_port()
    return [start(r, [sys.executable, "-m", "torchranks", *args],
                  rank_env(r, size, port, extra, master)) for r in range(size)]


class RankPool:
    """``size`` ranks of one process group, serving scenarios, each a HostProcess
    (ina.errors.LabError, a RuntimeError, if one does not start)."""

    def __init__(self, size: int, extra: Mapping[str, str], backend: str = "ina",
                 launch: Launch = local_launch, master: str = "127.0.0.1"):
        def start(rank: int, argv: list[str], env: dict[str, str]) -> HostProcess:
            return HostProcess(f"rank {rank}", argv, env=env, spawn=partial(launch, rank))

        self.procs: list[HostProcess] = []
        try:
            self.procs = start_ranks(size, ["serve", backend], extra, start, master)
            deadline = time.monotonic() + READY_TIMEOUT
            for proc in self.procs:
                proc.ready(b"ready", deadline - time.monotonic())
        except BaseException:
            self.close()
            raise

    def run(self, scenario: str, timeout: float = 120.0, **params: Any) -> list[Any]:
        """Every rank's report of ``scenario``; RuntimeError with a rank's error."""
        for proc in self.procs:
            proc.send({"scenario": scenario, "params": params})
        deadline = time.monotonic() + timeout
        reports = []
        for r, proc in enumerate(self.procs):
            line = proc.next_line(deadline - time.monotonic())
            if not line:
                raise RuntimeError(f"rank {r} did not answer {scenario} within {timeout:g}s: "
                                   + proc.tail())
            reports.append(json.loads(line))
        errors = [f"rank {r}: {rep['error']}" for r, rep in enumerate(reports) if "error" in rep]
        if errors:
            raise RuntimeError("; ".join(errors))
        return [rep["report"] for rep in reports]

    def close(self) -> None:
        stop_all(self.procs, grace=20)


def run_once(size: int, scenario: str, extra: Mapping[str, str], timeout: float = 120.0,
             params: Mapping[str, Any] | None = None, backend: str = "ina",
             launch: Launch = local_launch, master: str = "127.0.0.1",
             ) -> list[tuple[int | None, str, str]]:
    """``size`` ranks that each init, run ``scenario`` and exit: (exit code, stdout,
    stderr) per rank (exit code None: still running after ``timeout``, then killed)."""
    def start(rank: int, argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        proc: subprocess.Popen[str] = launch(rank, argv, env, stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True)
        return proc

    procs = start_ranks(size, ["once", backend, scenario, json.dumps(params or {})], extra,
                        start, master)
    deadline = time.monotonic() + timeout
    out = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            out.append((proc.returncode, stdout, stderr))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            out.append((None, stdout, stderr))
    return out


# --- What the tiers check ---------------------------------------------------------------

#: torch's collectives (by their torch.distributed names) and the name the backend
#: counts each under in stats().
TORCH_COLLECTIVES = {
    "broadcast": "broadcast",
    "all_gather": "allgather",
    "all_gather_into_tensor": "all_gather_single",
    "all_gather_into_tensor_coalesced": "all_gather_single_coalesced",
    "all_gather_coalesced": "allgather_coalesced",
    "all_reduce_coalesced": "allreduce_coalesced",
    "reduce": "reduce",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter_single",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_single_coalesced",
}
REDUCTIONS = {"all_reduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_tensor",
              "reduce_scatter_tensor_coalesced"}


#: Types whose reductions the hosts make, by the backend's gloo group
#: (ina.torch.convert.on_switches).
ON_GLOO = {"int64", "float64", "bool"}


def check_collective(reports: list[dict[str, Any]], name: str, dtype: str) -> None:
    """Assert that every rank's report of ``collective(name, dtype)`` went through the
    switches (a reduction of ON_GLOO types: through gloo) and matched its reference
    (bit for bit, or within the bound)."""
    where = "gloo" if name in REDUCTIONS and dtype in ON_GLOO else "switches"
    for r in reports:
        assert r["counted"] == {TORCH_COLLECTIVES[name]: {where: 1}}, r["counted"]
        if name in REDUCTIONS and dtype.startswith(("float", "bfloat")):
            assert r["within_bound"] is True
        else:  # moved bit for bit, or reduced exactly
            assert r["exact"] is True
    if name in REDUCTIONS and dtype.startswith(("float", "bfloat")):
        assert any(r["bounded"] for r in reports)  # a bound was reported where a result is



def creation_cost(network: str, reports: list[dict[str, Any]], members: list[int]) -> str:
    """What making a group cost in a ``churn`` scenario: new_group's time at its
    members, and the job service's part of it (planning and writing the switches)."""
    made = [s for m in members for s in reports[m]["seconds"]]
    deploys = reports[members[0]]["deploys"]
    return (f"\nnew_group of {len(members)} ranks on {network}, at its members: median "
            f"{statistics.median(made) * 1000:.1f} ms (max {max(made) * 1000:.1f} ms) over "
            f"{len(made)}; of which the job's deploy: median "
            f"{statistics.median(deploys) * 1000:.1f} ms")


# --- Inside a rank ---------------------------------------------------------------------


def main(argv: list[str]) -> int:
    import torch.distributed as dist

    import ina.torch  # noqa: F401  (registers the backend)

    mode, backend = argv[0], argv[1]
    dist.init_process_group(backend)
    from torchscenarios import SCENARIOS as scenarios


    def answer(request: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return {"report": scenarios[request["scenario"]](**request["params"])}
        except Exception as exc:  # noqa: BLE001 (any error is the scenario's answer)
            return {"error": f"{type(exc).__name__}: {exc}"}

    if mode == "once":
        reply = answer({"scenario": argv[2], "params": json.loads(argv[3])})
        print(json.dumps(reply), flush=True)
        dist.destroy_process_group()
        return 0 if "report" in reply else 1
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(answer(json.loads(line))), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
