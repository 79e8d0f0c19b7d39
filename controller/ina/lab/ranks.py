"""torchrun for a running lab: one process per host (a job's workers, or hosts named),
each on its host.

``run_ranks`` starts a command once per host, rank r on the r-th (entering that
host's network namespace, as ``inalab host`` does), with what torch.distributed and
the ina backend read from the environment: RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR (rank 0's address), MASTER_PORT, INA_TOPOLOGY, INA_JOB
(if a job names the hosts; without it the default group's job is planned and
deployed by the lab, as every other group's), INA_WORKER (the rank's host),
INA_JOB_SERVICE (the lab's job service, if it runs one), INA_NETWORK=lab and
GLOO_SOCKET_IFNAME (the host's interface, for gloo). Every line a rank prints comes
out prefixed with its rank and host, as torchrun's do; once one rank fails, the
others are stopped.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ina.errors import LabError
from ina.spec.topology import Topology

LOG = logging.getLogger(__name__)
#: torchrun's default store port.
DEFAULT_PORT = 29500
#: Seconds the other ranks get to end after one failed, before they are killed.
GRACE = 5.0


@dataclass(frozen=True)
class Rank:
    rank: int
    worker: str
    host_pid: int  # a process in the host's network namespace (this machine's PID)


def interface_of(host_pid: int, address: str) -> str:
    """The interface that has ``address`` in the network namespace of ``host_pid``."""
    out = subprocess.run(["nsenter", "--target", str(host_pid), "--net", "--",
                          "ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                         check=False).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == address:
            return fields[1]
    raise LabError(f"no interface has {address} on that host (is the lab up?)")


def rank_env(rank: Rank, world: int, topology: Topology, topology_path: Path,
             job_path: Path | None, master: str, port: int, interface: str,
             job_service: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("INA_JOB", "INA_JOB_SERVICE")}
    env.update({"RANK": str(rank.rank), "WORLD_SIZE": str(world),
                "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": master,
                "MASTER_PORT": str(port), "INA_TOPOLOGY": str(topology_path.resolve()),
                "INA_WORKER": rank.worker, "INA_NETWORK": "lab",
                "GLOO_SOCKET_IFNAME": interface})
    if job_path is not None:
        env["INA_JOB"] = str(job_path.resolve())
    if job_service is not None:
        env["INA_JOB_SERVICE"] = str(job_service.resolve())
    return env


def run_ranks(topology: Topology, topology_path: Path, job_path: Path | None,
              workers: Sequence[str], host_pids: Mapping[str, int], command: Sequence[str],
              port: int = DEFAULT_PORT, out: IO[str] = sys.stdout,
              job_service: Path | None = None) -> int:
    """Run ``command`` as every rank, rank r on host ``workers[r]``; 0 if every rank
    ended with 0, else the first failure's exit code."""
    ranks = [Rank(r, w, host_pids[w]) for r, w in enumerate(workers)]
    master = topology.hosts[workers[0]].ip
    procs: dict[int, subprocess.Popen[str]] = {}
    for rank in ranks:
        env = rank_env(rank, len(ranks), topology, topology_path, job_path, master, port,
                       interface_of(rank.host_pid, topology.hosts[rank.worker].ip),
                       job_service)
        procs[rank.rank] = subprocess.Popen(
            ["nsenter", "--target", str(rank.host_pid), "--net", "--", *command], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    failed: int | None = None
    try:
        with selectors.DefaultSelector() as sel:
            for rank in ranks:
                stream = procs[rank.rank].stdout
                assert stream is not None
                sel.register(stream, selectors.EVENT_READ, rank)
            open_streams = len(ranks)
            while open_streams:
                for key, _ in sel.select():
                    rank = key.data
                    line = key.fileobj.readline()  # type: ignore[union-attr]
                    if not line:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                        code = procs[rank.rank].wait()
                        if code != 0 and failed is None:
                            failed = code
                            out.write(f"[rank {rank.rank} {rank.worker}] exited with {code}: "
                                      "stopping the other ranks\n")
                            _stop_others(procs, rank.rank)
                        continue
                    out.write(f"[rank {rank.rank} {rank.worker}] {line}")
                    out.flush()
    finally:
        _stop_others(procs, None)
    return failed or 0


def _stop_others(procs: Mapping[int, subprocess.Popen[str]], done: int | None) -> None:
    for r, proc in procs.items():
        if r != done and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for r, proc in procs.items():
        if r == done:
            continue
        try:
            proc.wait(GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
