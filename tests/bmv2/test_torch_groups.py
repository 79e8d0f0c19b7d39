"""Process groups on Mininet + BMv2: ranks on the lab's hosts, every group a job the
lab's job service deploys when the group is made and tears down when it ends (or
when the rank that asked for it is killed), checked against what the controller
reads from the switches; HSDP on Figure 1 (2 x 2) and on the k=4 fat-tree (2 x 4)
against gloo through the same switches."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bmv2.bmv2lab import Labs, NetLab
from inatest import FIGURE1, ROOT

pytest.importorskip("torch", reason="torch is not installed: pip install 'ina[torch]' "
                                    "(make setup installs it)")

from torchranks import Launch, RankPool, creation_cost, run_once

FIGURE1_HOSTS = ["w1", "w2", "w3", "w4"]
FAT_TREE = ROOT / "topologies" / "fat-tree-4.yaml"
FAT_TREE_HOSTS = ["h0_0_0", "h0_1_0", "h1_0_0", "h1_1_0", "h2_0_0", "h2_1_0", "h3_0_0",
                  "h3_1_0"]


def on_hosts(lab: NetLab, hosts: list[str]) -> Launch:
    """Rank r on ``hosts[r]``; gloo on that host's interface."""
    def launch(rank: int, argv: list[str], env: dict[str, str], **popen: Any
               ) -> subprocess.Popen[Any]:
        host = lab.lab.host(hosts[rank])
        env = {**env, "GLOO_SOCKET_IFNAME": host.defaultIntf().name}
        proc: subprocess.Popen[Any] = host.popen(argv, env=env, **popen)
        return proc

    return launch


def env_of(lab: NetLab, **extra: str) -> dict[str, str]:
    """No INA_JOB: the default group's job is planned by the lab, as every group's."""
    assert lab.lab.jobs_socket is not None
    return {"INA_TOPOLOGY": str(lab.topology_path), "INA_NETWORK": "lab",
            "INA_JOB_SERVICE": str(lab.lab.jobs_socket), **extra}


def pool(lab: NetLab, hosts: list[str]) -> RankPool:
    return RankPool(len(hosts), env_of(lab), launch=on_hosts(lab, hosts),
                    master=lab.topology.hosts[hosts[0]].ip)


def switch_jobs(lab: NetLab) -> tuple[set[int], int]:
    """The job ids the switches hold, and how many job entries and groups they hold
    (what `inactl status` shows)."""
    entries, groups = lab.controller_call(lambda ctl: ctl.read_job_state(), write=False)
    ids = {int(v) for es in entries.values() for e in es for k, v in e.match
           if k == "job_id" and isinstance(v, int)}
    return ids, sum(map(len, entries.values())) + sum(map(len, groups.values()))


@pytest.fixture
def figure1(labs: Labs) -> Iterator[NetLab]:
    lab = labs.get(FIGURE1)
    assert switch_jobs(lab)[0] == set(), "a job was left on the switches by another test"
    yield lab


@pytest.fixture
def figure1_ranks(figure1: NetLab) -> Iterator[RankPool]:
    ranks = pool(figure1, FIGURE1_HOSTS)
    try:
        yield ranks
    finally:
        ranks.close()
    deadline = time.monotonic() + 30
    while switch_jobs(figure1)[0] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert switch_jobs(figure1) == (set(), 0), "the program's jobs outlived it"


def test_groups_on_figure1(figure1: NetLab, figure1_ranks: RankPool) -> None:
    """One program, one lab: a subgroup exact with the others idle, two overlapping
    groups used alternately and at once, a group made and destroyed 20 times with
    nothing left on the switches, HSDP and tensor parallelism with fully_shard on 2 x 2
    meshes against gloo."""
    ranks = figure1_ranks
    reports = ranks.run("subgroup", members=[1, 2], calls=3, timeout=300)
    assert [r["member"] for r in reports] == [False, True, True, False]
    for r in reports[1:3]:
        assert r["wrong"] == 0 and r["stats"] == {"allreduce": {"switches": 3}}
        assert r["job"]["workers"] == ["w2", "w3"] and not r["job"]["on_hosts"]

    for r in ranks.run("overlapping", a=[0, 1, 2], b=[1, 2, 3], rounds=3, timeout=300):
        assert r["wrong"] == 0
        assert all(set(where) == {"switches"} for s in r["stats"].values()
                   for where in s.values())

    before = switch_jobs(figure1)
    assert len(before[0]) == 1  # the default group's
    reports = ranks.run("churn", times=20, members=[0, 2], timeout=600)
    assert reports[0]["wrong"] == 0 and reports[2]["wrong"] == 0
    assert len(reports[0]["job_ids"]) >= 2  # each a job of its own, deployed anew
    assert switch_jobs(figure1) == before  # no job, no entry, no group left
    print(creation_cost("BMv2 (Figure 1)", reports, [0, 2]))

    for r in ranks.run("hsdp", shape=[2, 2], steps=4, timeout=900):
        assert r["max_param_diff"] < 1e-4
        assert r["stats"]["allreduce"]["switches"] >= 4
        assert all(set(where) == {"switches"} for where in r["stats"].values())
        print(f"init_device_mesh 2 x 2 on BMv2: {r['mesh_seconds']:.2f}s")

    for r in ranks.run("tensor_parallel", shape=[2, 2], steps=3, timeout=900):
        assert r["max_param_diff"] < 1e-4
        assert all(set(where) == {"switches"} for where in r["stats"].values())


def _report(out: str) -> Any:
    return json.loads(out.strip().splitlines()[-1])


def test_a_rank_killed_while_its_group_is_deployed_leaves_nothing_behind(figure1: NetLab
                                                                         ) -> None:
    results = run_once(4, "die_in_group", env_of(figure1, INA_TIMEOUT="1"), timeout=300,
                       params={"members": [1, 2, 3], "victim": 1},
                       launch=on_hosts(figure1, FIGURE1_HOSTS),
                       master=figure1.topology.hosts["w1"].ip)
    assert results[1][0] == 17
    for rank in (2, 3):  # the victim stopped; the other survivor may have, too, by then
        assert results[rank][0] == 1
        assert re.search(r"rank 0 \(w2\)(, rank \d \(w\d\))* stopped", results[rank][1])
    deadline = time.monotonic() + 30
    while switch_jobs(figure1)[0] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert switch_jobs(figure1) == (set(), 0)


def test_hsdp_on_a_2x4_mesh_of_the_fat_tree_matches_gloo(labs: Labs) -> None:
    lab = labs.get(FAT_TREE)
    ranks = pool(lab, FAT_TREE_HOSTS)
    try:
        for r in ranks.run("hsdp", shape=[2, 4], steps=3, timeout=1800):
            assert r["max_param_diff"] < 1e-4
            stats = r["stats"]
            assert stats["allreduce"]["switches"] >= 3  # across the 2 replicas
            assert stats["reduce_scatter_single"]["switches"] >= 3  # within 4 shards
            assert all(set(where) == {"switches"} for where in stats.values())
            assert sorted(len(j["workers"]) for j in r["jobs"]) == [2, 4]
    finally:
        ranks.close()
    deadline = time.monotonic() + 30
    while switch_jobs(lab)[0] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert switch_jobs(lab) == (set(), 0)
