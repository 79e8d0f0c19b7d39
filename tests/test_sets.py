"""BIER sets (RFC 8279 set identifiers): jobs and fabrics with hosts in several
BitStrings, on the reference model.

The fabric is topologies/leaf-spine-2x4-sets.yaml: each leaf's hosts in a set
of their own (BFR-ids 1-2, 257-258, 513-514, 769-770), so a job over every leaf
has a root spanning four sets and one aggregator per set below it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from ina.control import p4names as n
from ina.control.vat_planner import plan_job
from ina.errors import JobError
from ina.model.harness import allreduce_on_model
from ina.model.network import Impairment
from ina.protocol.bitmaps import set_of, split_sets
from ina.protocol.codec import InaHeader, InaPacket
from ina.protocol.constants import BIER_SETS, ETHERTYPE_BIER, Flag, JobStat, SwitchStat
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.frames import Bier, bier_frame, ina_frame, parse_frame
from ina.spec.job import DEFAULT_SLOTS, Job, JobSpec
from ina.spec.topology import Topology

from inatest import (
    ROOT,
    ModelLab,
    assert_exact,
    int_arrays,
    job_from,
    make_model_lab,
    open_call,
    session_results,
    switch_stat,
)

WORKERS = ["h1_1", "h1_2", "h2_1", "h3_2", "h4_1", "h4_2"]


@pytest.fixture
def topology() -> Topology:
    return Topology.load(ROOT / "topologies" / "leaf-spine-2x4-sets.yaml")


@pytest.fixture
def lab(topology: Topology) -> ModelLab:
    return make_model_lab(topology)


def _planned(topology: Topology, workers: Sequence[str] = WORKERS, root: str | None = None,
             slots: int = DEFAULT_SLOTS) -> Job:
    return plan_job(topology, 5, workers, root=root, slots=slots).job


def _run(lab: ModelLab, job: Job, size: int) -> None:
    asyncio.run(lab.ctl.deploy(job))
    arrays = int_arrays(job, size, seed=5)
    sessions = allreduce_on_model(lab.net, job, arrays)
    assert_exact(job, arrays, session_results(sessions))


def test_the_root_spans_every_set_and_each_aggregator_one(topology: Topology) -> None:
    job = _planned(topology)
    root_sets = sorted(split_sets(job.nodes[job.root].abm))
    assert root_sets == [0, 1, 2, 3]
    below = [node for name, node in job.nodes.items() if name != job.root]
    assert below and all(len(split_sets(node.abm)) == 1 for node in below)


def test_a_job_over_four_sets_is_exact_at_every_worker(lab: ModelLab) -> None:
    _run(lab, _planned(lab.topology), P * 12 + 5)


def test_hosts_outside_the_job_receive_nothing_in_any_set(lab: ModelLab) -> None:
    _run(lab, _planned(lab.topology), 100)
    others = [h for h in lab.topology.hosts if h not in WORKERS]
    assert {h: len(lab.net.inbox[h]) for h in others} == {h: 0 for h in others}


def test_each_worker_gets_its_result_in_its_own_set(lab: ModelLab) -> None:
    job = _planned(lab.topology)
    asyncio.run(lab.ctl.deploy(job))
    open_call(lab, job)
    for w in job.workers:  # one chunk each, kept in the inboxes
        h = lab.topology.hosts[w]
        edge, _ = lab.topology.host_attachment(w)
        payload = InaPacket(InaHeader(5, 0, 1 << (h.bfr_id - 1) % 256, 1, si=set_of(h.bfr_id)),
                            (1,)).pack()
        lab.net.send(w, ina_frame(h.mac, lab.topology.switches[edge].mac, h.ip,
                                  job.target_of(w, lab.topology), payload))
    for w in job.workers:
        (raw,) = list(lab.net.inbox[w])
        ina = parse_frame(raw).ina
        assert ina is not None and ina.flags & Flag.RESULT
        assert ina.si == set_of(lab.topology.hosts[w].bfr_id), w


def test_the_root_sends_one_result_per_set_in_one_pass(lab: ModelLab) -> None:
    job = _planned(lab.topology)
    _run(lab, job, P * 3)
    stats = asyncio.run(lab.ctl.status())[job.root].job_stats[5]
    rounds = 1 + 3  # the call's descriptor, then the array
    assert stats[JobStat.MULTICAST].packets == rounds  # one pass per round
    # ... and one BIER copy per round to each of the four leaves (one per set).
    assert switch_stat(lab, job.root, SwitchStat.BIER_COPY_SENT) == rounds * 4


def test_no_copy_is_made_for_a_set_or_port_without_the_jobs_workers(lab: ModelLab) -> None:
    job = _planned(lab.topology, workers=["h1_1", "h2_1", "h2_2"])  # two sets of four
    _run(lab, job, P * 3)
    pruned = {sw: switch_stat(lab, sw, SwitchStat.BIER_COPY_PRUNED) for sw in lab.topology.switches}
    assert pruned == {sw: 0 for sw in lab.topology.switches}


def test_a_job_over_sets_is_exact_over_impaired_links(lab: ModelLab) -> None:
    job = _planned(lab.topology, slots=8)
    lab.net.impairment = Impairment(seed=11, loss=0.03, duplicate=0.03, reorder=0.05)
    _run(lab, job, P * 40)


def test_a_server_root_sends_one_bier_packet_per_set(lab: ModelLab,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from ina.host.serverroot import ServerRoot

    workers = [w for w in WORKERS if w != "h4_2"]
    job = _planned(lab.topology, workers=workers, root="h4_2")
    asyncio.run(lab.ctl.deploy(job))
    arrays = int_arrays(job, P * 4, seed=5)
    root = ServerRoot(job, lab.topology)
    sent: list[Bier] = []
    accept = root.accept

    def accept_and_record(payload: bytes, src_ip: str | None = None) -> list[bytes]:
        frames = accept(payload, src_ip)
        sent.extend(Bier.unpack(f[14:]) for f in frames
                    if int.from_bytes(f[12:14], "big") == ETHERTYPE_BIER)  # not SYNC answers
        return frames

    monkeypatch.setattr(root, "accept", accept_and_record)
    sessions = allreduce_on_model(lab.net, job, arrays, servers={"h4_2": root})
    assert_exact(job, arrays, session_results(sessions))
    assert root.stats["multicast"] == 1 + 4  # the call's descriptor and four chunks ...
    assert sorted(b.si for b in sent) == sorted([0, 1, 2, 3] * 5)  # ... each to four sets


def test_an_aggregator_spanning_two_sets_is_refused(topology: Topology) -> None:
    with pytest.raises(JobError, match=r"aggregator spine1 covers workers in BIER sets \[0, 1\]"):
        job_from(topology, job_id=5, op="sum", workers=["h1_1", "h2_1", "h4_1"], root="leaf4",
                 aggregators={"spine1": ["h1_1", "h2_1"]})


def test_the_planner_aggregates_below_the_root_only_within_a_set(topology: Topology) -> None:
    # Rooted at leaf1, the spine on the way would merge three sets: not a node.
    job = _planned(topology, root="leaf1")
    assert all(len(split_sets(node.abm)) == 1
               for name, node in job.nodes.items() if name != job.root)
    assert not any(name.startswith("spine") for name in job.nodes)


def test_a_host_claiming_another_set_is_dropped_as_forged(lab: ModelLab) -> None:
    job = _planned(lab.topology)
    asyncio.run(lab.ctl.deploy(job))
    h = lab.topology.hosts["h2_1"]  # BFR-id 257: set 1, bit 1
    payload = InaPacket(InaHeader(5, 0, 1, 1, si=0), (7,)).pack()  # h1_1's bit
    lab.net.send("h2_1", ina_frame(h.mac, lab.topology.switches["leaf2"].mac, h.ip,
                                   job.target_of("h2_1", lab.topology), payload))
    assert switch_stat(lab, "leaf2", SwitchStat.DROP_FORGED_PBM) == 1


def test_a_set_beyond_the_program_is_a_bad_pbm(lab: ModelLab) -> None:
    h = lab.topology.hosts["h1_1"]
    payload = InaPacket(InaHeader(5, 0, 1, 1, si=BIER_SETS), (7,)).pack()
    lab.net.send("h1_1", ina_frame(h.mac, lab.topology.switches["leaf1"].mac, h.ip,
                                   lab.topology.switches["spine1"].loopback, payload))
    assert switch_stat(lab, "leaf1", SwitchStat.DROP_BAD_PBM) == 1


def test_bier_with_a_bift_id_beyond_the_sets_is_malformed(lab: ModelLab) -> None:
    spine = lab.topology.switches["spine1"]
    leaf = lab.topology.switches["leaf1"]
    payload = InaPacket(InaHeader(5, 0, 1, 1, flags=Flag.RESULT), (7,)).pack()
    frame = bier_frame(spine.mac, leaf.mac, spine.loopback, Bier.for_set(BIER_SETS, 1), payload)
    port = next(p for p, nb in lab.topology.ports("leaf1").items() if nb.node == "spine1")
    lab.net.inject("leaf1", port, frame)
    assert switch_stat(lab, "leaf1", SwitchStat.DROP_BIER_MALFORMED) == 1
    assert not lab.net.inbox["h1_1"]


def test_bier_ports_give_disjoint_fbms_covering_each_set(topology: Topology) -> None:
    from ina.control.entities import TableEntry
    from ina.control.switch_state import base_plan

    everyone = split_sets(sum(h.bit for h in topology.hosts.values()))
    for sw in topology.switches:
        union: dict[int, int] = {}
        for e in base_plan(topology, sw):
            if isinstance(e, TableEntry) and e.table == n.BIER_PORTS.name:
                si = e.match_value("si")
                assert isinstance(si, int)
                assert union.get(si, 0) & e.param("fbm") == 0, (sw, si)
                union[si] = union.get(si, 0) | e.param("fbm")
        assert union == everyone, sw


def test_result_sets_are_written_on_the_root_switch_only(topology: Topology) -> None:
    from ina.control.allocation import allocate
    from ina.control.switch_state import job_plan

    job = _planned(topology)
    plan = job_plan(job, topology, allocate(job, topology, {}), epoch=3)
    holders = sorted(sw for sw, es in plan.items() if any(e.table == n.RESULT_SETS.name
                                                          for e in es))
    assert holders == [job.root]


def test_a_spec_file_over_sets_round_trips(topology: Topology) -> None:
    job = _planned(topology)
    again = job_from(topology, **job.to_spec())
    assert again.nodes == job.nodes
    assert JobSpec.from_dict(job.to_spec()).aggregators is not None


def test_a_job_over_the_k16_fat_tree_uses_four_sets_and_is_exact() -> None:
    from ina.model.harness import deployed_network
    from ina.spec.topogen import fat_tree

    topology = Topology.from_dict(fat_tree(16))  # 1024 hosts: BFR-ids 1..1024, sets 0..3
    workers = [f"h{pod}_{pod % 8}_{pod % 8}" for pod in range(16)]
    job = plan_job(topology, 7, workers).job
    assert sorted(split_sets(job.abm)) == [0, 1, 2, 3]
    net, _ = deployed_network(topology, job)
    arrays = int_arrays(job, P * 2 + 1, seed=5)
    sessions = allreduce_on_model(net, job, arrays)
    assert_exact(job, arrays, session_results(sessions))
    assert sum(len(inbox) for h, inbox in net.inbox.items() if h not in workers) == 0
