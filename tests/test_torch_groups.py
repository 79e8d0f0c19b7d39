"""Process groups on the ``ina`` backend, on the embedded network: every group a job of
its own, planned and deployed by the network when the group is made and torn down
when it ends (ina.torch.member, ina.control.jobservice), four real rank processes
without INA_JOB (the default group's job is planned too)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="torch is not installed: pip install 'ina[torch]' "
                                    "(make setup installs it)")

from torchranks import RankPool, creation_cost, run_once

from ina.host.jobclient import JobClient
from ina.host.link import Endpoints
from ina.spec.jobservice import FIRST_JOB_ID, Jobs

from inatest import FIGURE1

PLANNED_ENV = {"INA_TOPOLOGY": str(FIGURE1), "INA_NETWORK": "auto"}


@pytest.fixture(scope="module")
def ranks() -> Iterator[RankPool]:
    pool = RankPool(4, PLANNED_ENV)
    try:
        yield pool
    finally:
        pool.close()


class OwnNetwork:
    """An embedded network the test starts (``inanet --endpoints``), which outlives
    the ranks: what is left on it after a program ends can be asked."""

    def __init__(self, tmp: Path):
        self.endpoints_file = tmp / "endpoints.json"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ina.cli.inanet", "-t", str(FIGURE1), "--endpoints",
             str(self.endpoints_file), "--jobs-socket", str(tmp / "jobs.sock")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.endpoints = Endpoints.from_json(self.proc.stdout.readline())
        assert self.endpoints.jobs is not None
        self.env = {**PLANNED_ENV, "INA_NETWORK": str(self.endpoints_file)}

    def client(self) -> JobClient:
        assert self.endpoints.jobs is not None
        return JobClient(self.endpoints.jobs)

    def jobs(self) -> Jobs:
        with self.client() as c:
            return c.jobs()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.communicate(timeout=20)


@pytest.fixture
def network(tmp_path: Path) -> Iterator[OwnNetwork]:
    net = OwnNetwork(tmp_path)
    try:
        yield net
    finally:
        net.close()


def test_without_ina_job_the_default_groups_job_is_planned_by_the_network(
        ranks: RankPool) -> None:
    reports = ranks.run("subgroup", members=[0, 1, 2, 3], calls=1)
    for r in reports:
        assert r["world_job"] >= FIRST_JOB_ID
        assert r["job"]["job_id"] not in (r["world_job"],)  # a group of every rank: a job too


def test_a_subgroups_all_reduce_is_exact_with_the_other_ranks_idle(ranks: RankPool) -> None:
    reports = ranks.run("subgroup", members=[1, 2], calls=3)
    assert [r["member"] for r in reports] == [False, True, True, False]
    for r in reports[1:3]:
        assert r["wrong"] == 0
        assert r["stats"] == {"allreduce": {"switches": 3}}
        assert r["job"]["workers"] == ["w2", "w3"] and not r["job"]["on_hosts"]
        assert r["job"]["vat"]  # planned by the controller
    assert reports[1]["job"] == reports[2]["job"]


def test_two_overlapping_groups_used_alternately_and_at_once(ranks: RankPool) -> None:
    reports = ranks.run("overlapping", a=[0, 1, 2], b=[1, 2, 3], rounds=3)
    for r in reports:
        assert r["wrong"] == 0
        assert all(set(where) == {"switches"} for s in r["stats"].values()
                   for where in s.values())
    assert reports[1]["jobs"]["a"] != reports[1]["jobs"]["b"]


def test_new_subgroups_are_jobs_of_their_own(ranks: RankPool) -> None:
    reports = ranks.run("subgroups", size=2)
    assert [r["members"] for r in reports] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    for r in reports:
        assert r["wrong"] == 0 and r["stats"] == {"allreduce": {"switches": 2}}
    assert reports[0]["job"]["job_id"] != reports[2]["job"]["job_id"]


def test_a_group_made_and_destroyed_20_times_leaves_no_job_and_no_entry(ranks: RankPool
                                                                        ) -> None:
    reports = ranks.run("churn", times=20, members=[0, 2], timeout=300)
    owner = reports[0]
    assert owner["wrong"] == 0 and reports[2]["wrong"] == 0
    assert owner["after"] == owner["before"]  # the same jobs, entries and groups as before
    print(creation_cost("the embedded network", reports, [0, 2]))


def test_split_group_fails_on_cpu_as_it_does_with_gloo(ranks: RankPool) -> None:
    ours = ranks.run("split", members=[[0, 1], [2, 3]])
    gloos = ranks.run("split", members=[[0, 1], [2, 3]], backend="gloo")
    for a, b in zip(ours, gloos, strict=True):
        assert a["error"] == b["error"] and "No device associated" in a["error"]


def test_hsdp_on_a_2x2_mesh_matches_gloo_with_every_collective_through_the_switches(
        ranks: RankPool) -> None:
    reports = ranks.run("hsdp", shape=[2, 2], steps=4, timeout=300)
    for r in reports:
        assert r["max_param_diff"] < 1e-4
        stats = r["stats"]
        assert stats["allreduce"]["switches"] >= 4  # across the replicas
        assert stats["reduce_scatter_single"]["switches"] >= 4  # within a replica
        assert stats["all_gather_single"]["switches"] >= 4
        assert all(set(where) == {"switches"} for where in stats.values())
        assert {len(j["workers"]) for j in r["jobs"]} == {2}


def test_tensor_parallel_and_fully_shard_on_a_2x2_mesh_match_gloo(ranks: RankPool) -> None:
    reports = ranks.run("tensor_parallel", shape=[2, 2], steps=4, timeout=300)
    for r in reports:
        assert r["max_param_diff"] < 1e-4
        stats = r["stats"]
        assert stats["allreduce"]["switches"] >= 4  # the row-wise Linear's output, in tp
        assert stats["reduce_scatter_single"]["switches"] >= 4  # fully_shard, in dp
        assert all(set(where) == {"switches"} for where in stats.values()), stats
        # Building it, distribute_tensor scatters the shards: scatter has no form in
        # the data plane (docs/training.md), it goes through the group's gloo.
        assert set(r["construction"].get("scatter", {"gloo": 0})) == {"gloo"}


# --- Networks of the test's own: what is left after a program ends --------------------


def _report(out: str) -> Any:
    return json.loads(out.strip().splitlines()[-1])


def test_a_group_no_switch_can_take_runs_on_its_hosts_and_says_so(network: OwnNetwork
                                                                   ) -> None:
    # s1 is the edge switch of w1 and w2: 64 jobs there leave it no job index.
    with network.client() as filler:
        grants = [filler.deploy(["w1", "w2"]) for _ in range(64)]
        assert not any(g.on_hosts for g in grants)
        results = run_once(4, "subgroup", network.env, timeout=200,
                           params={"members": [0, 1], "calls": 3})
        for rank, (code, out, err) in enumerate(results):
            assert code == 0, f"rank {rank}: {out} {err[-2000:]}"
        for r in (_report(results[0][1])["report"], _report(results[1][1])["report"]):
            assert r["wrong"] == 0
            assert r["job"]["on_hosts"] and "s1 already holds 64 jobs" in r["job"]["reason"]
            assert r["stats"] == {"allreduce": {"hosts": 3}}
    assert network.jobs() == Jobs((), (), 0)  # the filler's went with its connection


def test_a_rank_killed_while_its_group_is_deployed_leaves_nothing_behind(
        network: OwnNetwork) -> None:
    results = run_once(4, "die_in_group", {**network.env, "INA_TIMEOUT": "1"}, timeout=200,
                       params={"members": [1, 2, 3], "victim": 1})
    assert results[1][0] == 17
    for rank in (2, 3):  # each names the victim (and may name the other, if it ended first)
        assert results[rank][0] == 1, results[rank]
        assert re.search(r"rank 0 \(w2\)(, rank \d \(w\d\))? stopped", results[rank][1])
    deadline = time.monotonic() + 30
    while (jobs := network.jobs()) != Jobs((), (), 0) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert jobs == Jobs((), (), 0)
