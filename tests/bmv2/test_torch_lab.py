"""The torch backend on Mininet + BMv2: ranks on the job's worker hosts, each its
own process, DDP and FSDP through the switches against gloo through the same
switches, and every other collective torch offers against its reference."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from bmv2.bmv2lab import Deployed, NetLab
from inatest import FIGURE1, FIGURE1_SPEC

pytest.importorskip("torch", reason="torch is not installed: pip install 'ina[torch]' "
                                    "(make setup installs it)")

from torchranks import TORCH_COLLECTIVES, Launch, check_collective, run_once

pytestmark = pytest.mark.parametrize("deployed", [[{**FIGURE1_SPEC, "job_id": 5}]],
                                     indirect=True)


def on_hosts(lab: NetLab, workers: list[str]) -> Launch:
    """Rank r on the host of the job's r-th worker; gloo on that host's interface."""
    def launch(rank: int, argv: list[str], env: dict[str, str], **popen: Any
               ) -> subprocess.Popen[Any]:
        host = lab.lab.host(workers[rank])
        env = {**env, "GLOO_SOCKET_IFNAME": host.defaultIntf().name}
        proc: subprocess.Popen[Any] = host.popen(argv, env=env, **popen)
        return proc

    return launch


def run_on_lab(lab: NetLab, deployed: Deployed, scenario: str, timeout: float,
               **params: object) -> list[dict[str, object]]:
    (path, job), = deployed
    results = run_once(len(job.workers), scenario,
                       {"INA_TOPOLOGY": str(FIGURE1), "INA_JOB": str(path),
                        "INA_NETWORK": "lab"},
                       timeout=timeout, params=params, launch=on_hosts(lab, list(job.workers)),
                       master=lab.topology.hosts[job.workers[0]].ip)
    reports = []
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, f"rank {rank}: {out} {err[-3000:]}"
        reports.append(json.loads(out.strip().splitlines()[-1])["report"])
    return reports


def test_ddp_through_the_switches_matches_gloo_through_the_same_switches(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    for r in run_on_lab(figure1_lab, deployed, "train", 600, steps=20):
        assert r["max_param_diff"] < 1e-4  # type: ignore[operator]
        assert r["stats"]["allreduce"]["switches"] >= 20  # type: ignore[index]
        # Every bucket after the first sent its values with its exponents (guessed).
        assert r["guessed"] >= 19  # type: ignore[operator]


def test_ddps_first_bucket_lies_within_its_bound_of_gloos(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    # DDP's first bucket is 1 MiB (its 25 MiB default: `make train` measures one).
    for r in run_on_lab(figure1_lab, deployed, "bucket", 300, mib=1):
        assert r["within_bound_of_gloo"] is True


def test_fsdp_through_the_switches_matches_gloo_with_no_collective_on_gloo(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    for r in run_on_lab(figure1_lab, deployed, "fsdp", 600, version="fully_shard", steps=5):
        assert r["max_param_diff"] < 1e-4  # type: ignore[operator]
        stats: dict[str, dict[str, int]] = r["stats"]  # type: ignore[assignment]
        assert stats["reduce_scatter_single"]["switches"] >= 5
        assert all(set(where) == {"switches"} for where in stats.values())


def test_every_collective_through_the_switches_matches_its_reference(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    dtypes = ["float32", "bfloat16", "int32"]
    reports = run_on_lab(figure1_lab, deployed, "collectives", 600,
                         names=list(TORCH_COLLECTIVES), dtypes=dtypes, root=2)
    for name in TORCH_COLLECTIVES:
        for dtype in dtypes:
            check_collective([r[f"{name}/{dtype}"] for r in reports],  # type: ignore[misc]
                             name, dtype)
