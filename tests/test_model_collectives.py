"""The data plane of the collectives (INA version 4) on the reference model: 16-bit
elements, NODATA contributions and results, and ``dest`` (completions at BIER
egress); what the switches refuse. Figure 1's job: s1 aggregates w1, w2; s7 w3, w4;
s6 is the root; the result goes s6 -> s7 -> s5 -> s1 (w1, w2) and s2 (w3, w4).
tests/bmv2/test_differential.py checks BMv2 agrees, byte for byte."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ina.model.harness import deployed_network
from ina.model.network import ModelNetwork
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, InaPacket, ina_payload, nodata_payload
from ina.protocol.constants import (
    BIER_HEADER_BYTES,
    ELEMS16_PER_PACKET,
    INA_HEADER_BYTES,
    INA_PAYLOAD_BYTES,
    Flag,
    JobStat,
    Op,
    SwitchStat,
)
from ina.protocol.frames import parse_frame
from ina.spec.job import Job

from inatest import ModelLab, job_from, open_call, switch_stat

WORKERS = ("w1", "w2", "w3", "w4")
#: What a completion (NODATA) weighs on a host's link: Ethernet, IPv4, UDP, INA header.
COMPLETION_BYTES = 14 + 20 + 8 + INA_HEADER_BYTES
DATA_BYTES = COMPLETION_BYTES + INA_PAYLOAD_BYTES - INA_HEADER_BYTES


def _deploy(lab: ModelLab, **overrides: object) -> tuple[Job, int]:
    """Figure 1's job deployed and a call open: (job, the call's first seq)."""
    job = lab.deploy_figure1(**overrides)
    return job, open_call(lab, job)


def _send(lab: ModelLab, job: Job, worker: str, payload: bytes) -> None:
    lab.net.host_send_payload(worker, job.target_of(worker, lab.topology), payload)


def _job_stats(lab: ModelLab, job_id: int = 1) -> dict[str, dict[JobStat, int]]:
    status = asyncio.run(lab.ctl.status())
    return {sw: {k: v.packets for k, v in s.job_stats[job_id].items() if v.packets}
            for sw, s in status.items() if job_id in s.job_stats}


def _frames(net: ModelNetwork, host: str) -> list[bytes]:
    """The frames that reached ``host``, drained."""
    out = list(net.inbox[host])
    net.inbox[host].clear()
    return out


def _results(lab: ModelLab) -> dict[str, list[InaPacket]]:
    return {h: [InaPacket.unpack(p) for p in lab.net.received_payloads(h)]
            for h in lab.topology.hosts}


@pytest.mark.parametrize("op", [Op.SUM, Op.MIN, Op.MAX])
def test_16_bit_elements_are_reduced_exactly_with_the_overflow_flag(
        model_lab: ModelLab, op: Op) -> None:
    job, seq = _deploy(model_lab, op=op.name.lower())
    rng = np.random.default_rng(int(op))
    arrays = {w: rng.integers(-(2**15), 2**15, ELEMS16_PER_PACKET - 3) for w in WORKERS}
    arrays["w1"][:4] = [2**15 - 1, -(2**15), -1, 0]
    arrays["w2"][:4] = [1, -1, -1, 0]  # SUM: the first two wrap
    for w in WORKERS:
        _send(model_lab, job, w, ina_payload(1, seq, job.worker_bit[w], arrays[w], op, width=16))
    stacked = np.stack(list(arrays.values()))
    exact = {Op.SUM: stacked.sum(0), Op.MIN: stacked.min(0), Op.MAX: stacked.max(0)}[op]
    expected = (exact + 2**15) % 2**16 - 2**15
    results = _results(model_lab)
    for w in WORKERS:
        (got,) = results[w]
        assert got.header.width == 16 and got.header.flags & Flag.RESULT
        assert np.array_equal(got.meaningful, expected), w
        assert bool(got.header.flags & Flag.OVERFLOW) == (op == Op.SUM), w
    assert not any(results[h] for h in ("w5", "w6", "w7", "w8"))


def _kind(job: Job, worker: str, seq: int, data: bool, values: tuple[int, ...] = (5,)
          ) -> bytes:
    """``worker``'s contribution to ``seq``: ``values``, or its bit alone (NODATA)."""
    return (ina_payload(1, seq, job.worker_bit[worker], list(values)) if data
            else nodata_payload(1, seq, job.worker_bit[worker], len(values)))


def _nothing_left(lab: ModelLab) -> bool:
    """No frame reached any host, and no switch sent anything on (drained)."""
    return not any(_frames(lab.net, h) for h in lab.topology.hosts)


@pytest.mark.parametrize("first_data", [True, False], ids=["nodata-to-data", "data-to-nodata"])
def test_a_contribution_of_the_other_kind_than_the_rounds_is_refused(
        model_lab: ModelLab, first_data: bool) -> None:
    """A round takes the kind of its first contribution: NODATA to a round of data
    (it would complete the cell and have to grow a 1,024-byte array: BMv2 aborts
    past 512 bytes of growth), or data to a NODATA round, is dropped and counted;
    nothing leaves s1."""
    job, seq = _deploy(model_lab)
    _send(model_lab, job, "w1", _kind(job, "w1", seq, first_data))
    _send(model_lab, job, "w2", _kind(job, "w2", seq, not first_data))
    s1 = _job_stats(model_lab)["s1"]
    assert (s1[JobStat.ABSORBED], s1[JobStat.DROP_KIND_MISMATCH]) == (1, 1)
    assert JobStat.EMITTED not in s1
    assert _nothing_left(model_lab)


@pytest.mark.parametrize("data", [True, False], ids=["data", "nodata"])
def test_a_round_of_one_kind_completes_whoever_comes_first(
        model_lab: ModelLab, data: bool) -> None:
    """Every worker's contribution of one kind, in any order: every worker gets the
    data (a round of data) or a header alone (a NODATA round)."""
    job, seq = _deploy(model_lab)
    for w in reversed(WORKERS):
        _send(model_lab, job, w, _kind(job, w, seq, data))
    for w in WORKERS:
        (frame,) = _frames(model_lab.net, w)
        assert len(frame) == (DATA_BYTES if data else COMPLETION_BYTES), w
        (got,) = [InaPacket.unpack(p) for p in _payloads(frame)]
        assert got.values[:1] == ((20,) if data else ()), w
    assert not _job_stats(model_lab)["s6"].get(JobStat.DROP_KIND_MISMATCH)


def _payloads(frame: bytes) -> list[bytes]:
    parsed = parse_frame(frame)
    return [parsed.pack()[14 + 20 + 8:]]


def test_a_chunk_of_nodata_alone_completes_as_nodata(model_lab: ModelLab) -> None:
    """A barrier: every worker's bit, no data; each worker gets a header alone, its
    IPv4 and UDP lengths those of a header."""
    job, seq = _deploy(model_lab)
    for w in WORKERS:
        _send(model_lab, job, w, nodata_payload(1, seq, job.worker_bit[w], 1))
    for w in WORKERS:
        (frame,) = _frames(model_lab.net, w)
        parsed = parse_frame(frame)
        assert len(frame) == COMPLETION_BYTES and parsed.ina is not None
        assert parsed.ina.flags == Flag.RESULT | Flag.NODATA and parsed.lanes is None
        assert parsed.ipv4 is not None and parsed.ipv4.total_len == 20 + 8 + INA_HEADER_BYTES
        assert parsed.udp is not None and parsed.udp.length == 8 + INA_HEADER_BYTES


def test_data_goes_only_toward_dest_and_completions_elsewhere(model_lab: ModelLab) -> None:
    """A reduce's chunk for w3: w3 gets the data; w1, w2, w4 a completion (NODATA,
    the header alone); the data crosses only the links toward w3."""
    job, seq = _deploy(model_lab)
    arrays = {w: np.full(10, i + 1) for i, w in enumerate(WORKERS)}
    before = dict(model_lab.net.bytes_on_link)
    for w in WORKERS:
        _send(model_lab, job, w, ina_payload(1, seq, job.worker_bit[w], arrays[w], dest=3))
    carried = {link: n - before.get(link, 0) for link, n in model_lab.net.bytes_on_link.items()}
    frames = {w: _frames(model_lab.net, w) for w in model_lab.topology.hosts}
    assert [len(f) for f in frames["w3"]] == [DATA_BYTES]
    (w3,) = [InaPacket.unpack(p) for f in frames["w3"] for p in _payloads(f)]
    assert w3.meaningful == (10,) * 10 and w3.header.dest == 3
    for w in ("w1", "w2", "w4"):
        (frame,) = frames[w]
        got = InaHeader.unpack(_payloads(frame)[0])
        assert len(frame) == COMPLETION_BYTES and got.flags == Flag.RESULT | Flag.NODATA, w
        assert (got.seq, got.count, got.dest) == (seq, 10, 3)
    assert not any(frames[h] for h in ("w5", "w6", "w7", "w8"))
    # Cut where the tree leaves the way to w3: s5 toward s1, s2 toward w4; counted
    # wherever a completion leaves.
    assert {sw: switch_stat(model_lab, sw, SwitchStat.COMPLETION_SENT)
            for sw in ("s1", "s2", "s5", "s6", "s7")} == {"s1": 2, "s2": 1, "s5": 1, "s6": 0,
                                                          "s7": 0}
    bier = BIER_HEADER_BYTES
    assert carried[("s5", "s1")] == COMPLETION_BYTES + bier
    assert carried[("s5", "s2")] == DATA_BYTES + bier
    assert carried[("s1", "w1")] == carried[("s2", "w4")] == COMPLETION_BYTES
    assert carried[("s2", "w3")] == DATA_BYTES


def test_a_resend_for_dest_carries_data_and_for_others_a_completion(
        model_lab: ModelLab) -> None:
    job, seq = _deploy(model_lab)
    payloads = {w: ina_payload(1, seq, job.worker_bit[w], [7], dest=3) for w in WORKERS}
    for w in WORKERS:
        _send(model_lab, job, w, payloads[w])
    _results(model_lab)
    _send(model_lab, job, "w1", payloads["w1"])  # w1 missed its completion
    _send(model_lab, job, "w3", payloads["w3"])  # w3 missed its data
    results = _results(model_lab)
    (w1,) = results["w1"]
    assert w1.header.flags & Flag.NODATA and w1.values == ()
    assert [r.meaningful for r in results["w3"]] == [(28,)]
    # w3's from the data s7 kept on its way down; w1's from the root (s1 saw only a
    # completion, which it cannot keep for a round of data).
    stats = _job_stats(model_lab)
    assert (stats["s7"][JobStat.KEPT], stats["s7"][JobStat.RESENT]) == (1, 1)
    assert JobStat.KEPT not in stats["s1"] and stats["s6"][JobStat.RESENT] == 1


@pytest.mark.parametrize("data", [True, False], ids=["nodata-at-data", "data-at-nodata"])
def test_a_retransmission_of_the_other_kind_at_a_complete_cell_is_refused(
        model_lab: ModelLab, data: bool) -> None:
    """Before, a NODATA retransmission at a complete cell of data grew the cell's
    array: refused now, as any contribution of the other kind; nothing is resent."""
    job, seq = _deploy(model_lab)
    for w in WORKERS:
        _send(model_lab, job, w, _kind(job, w, seq, data))
    assert all(_frames(model_lab.net, w) for w in WORKERS)
    _send(model_lab, job, "w2", _kind(job, "w2", seq, not data))
    s1 = _job_stats(model_lab)["s1"]
    assert s1[JobStat.DROP_KIND_MISMATCH] == 1 and JobStat.RESENT not in s1
    assert s1[JobStat.EMITTED] == 1
    assert _nothing_left(model_lab)


def test_a_nodata_retransmission_at_a_complete_nodata_cell_is_resent_as_it_came(
        model_lab: ModelLab) -> None:
    job, seq = _deploy(model_lab)
    for w in WORKERS:
        _send(model_lab, job, w, _kind(job, w, seq, False))
    _frames(model_lab.net, "w2")
    _send(model_lab, job, "w2", _kind(job, "w2", seq, False))
    (frame,) = _frames(model_lab.net, "w2")
    assert len(frame) == COMPLETION_BYTES
    assert _job_stats(model_lab)["s1"][JobStat.RESENT] == 1


def test_a_cell_takes_one_width_and_the_switches_refuse_bad_width_and_dest(
        model_lab: ModelLab) -> None:
    job, seq = _deploy(model_lab)
    _send(model_lab, job, "w1", ina_payload(1, seq, bit_of(1), [1]))
    _send(model_lab, job, "w2", ina_payload(1, seq, bit_of(2), [1], width=16))
    _send(model_lab, job, "w2", nodata_payload(1, seq, bit_of(2), 1, width=16))
    s1 = _job_stats(model_lab)["s1"]
    assert (s1[JobStat.ABSORBED], s1[JobStat.DROP_WIDTH_MISMATCH]) == (1, 2)
    bad_width = InaHeader(job_id=1, seq=seq, pbm=bit_of(1), count=1, width=8,
                          flags=Flag.NODATA).pack()
    bad_dest = InaHeader(job_id=1, seq=seq, pbm=bit_of(1), count=1, dest=4097,
                         flags=Flag.NODATA).pack()
    too_many = InaHeader(job_id=1, seq=seq, pbm=bit_of(1), count=ELEMS16_PER_PACKET + 1, width=16,
                         flags=Flag.NODATA).pack()
    nodata_result = nodata_payload(1, seq, bit_of(1), 1, flags=Flag.RESULT)
    for payload in (bad_width, bad_dest, too_many, nodata_result):
        _send(model_lab, job, "w1", payload)
    assert {stat: switch_stat(model_lab, "s1", stat) for stat in (
        SwitchStat.DROP_BAD_WIDTH, SwitchStat.DROP_BAD_DEST, SwitchStat.DROP_BAD_COUNT,
        SwitchStat.DROP_BAD_PBM)} == {SwitchStat.DROP_BAD_WIDTH: 1,
                                      SwitchStat.DROP_BAD_DEST: 1,
                                      SwitchStat.DROP_BAD_COUNT: 1, SwitchStat.DROP_BAD_PBM: 1}
    # ELEMS16_PER_PACKET 16-bit values are a whole packet.
    _send(model_lab, job, "w1", ina_payload(1, seq + 1, bit_of(1), [1] * ELEMS16_PER_PACKET,
                                            width=16))
    assert switch_stat(model_lab, "s1", SwitchStat.DROP_BAD_COUNT) == 1


def _sets_lab() -> tuple[ModelLab, Job, int]:
    """The leaf-spine whose leaves are BIER sets of their own, a job whose root
    spine1 spans sets (the root's general path: a bitmap per cell and set), a call
    open."""
    from ina.spec.topology import Topology

    from inatest import ROOT

    topology = Topology.load(ROOT / "topologies" / "leaf-spine-2x4-sets.yaml")
    job = job_from(topology, job_id=1, op="sum", workers=list(SETS_WORKERS), root="spine1",
                   aggregators={"leaf1": ["h1_1", "h1_2"]})
    net, ctl = deployed_network(topology, job)
    lab = ModelLab(topology, {sw: s.store for sw, s in net.switches.items()}, ctl, net)
    return lab, job, open_call(lab, job)


SETS_WORKERS = ("h1_1", "h1_2", "h2_1", "h3_2", "h4_1")


def test_a_root_spanning_sets_cuts_toward_dest() -> None:
    """dest in set 2: h3_2 gets the sum, every other worker a completion."""
    lab, job, seq = _sets_lab()
    dest = lab.topology.hosts["h3_2"].bfr_id
    for i, w in enumerate(SETS_WORKERS):
        _send(lab, job, w, ina_payload(1, seq, job.worker_bit[w], [i, 1], dest=dest))
    got = {w: [parse_frame(f) for f in _frames(lab.net, w)] for w in SETS_WORKERS}
    assert [f.values[:2].tolist() for f in got["h3_2"] if f.values is not None] == [[10, 5]]
    for w in SETS_WORKERS:
        if w != "h3_2":
            (frame,) = got[w]
            assert frame.lanes is None and frame.ina is not None, w
            assert frame.ina.flags == Flag.RESULT | Flag.NODATA


def test_a_root_spanning_sets_completes_a_nodata_round_as_nodata() -> None:
    lab, job, seq = _sets_lab()
    for w in SETS_WORKERS:
        _send(lab, job, w, nodata_payload(1, seq, job.worker_bit[w], 2))
    for w in SETS_WORKERS:
        (frame,) = [parse_frame(f) for f in _frames(lab.net, w)]
        assert frame.lanes is None and frame.ina is not None, w
        assert frame.ina.flags == Flag.RESULT | Flag.NODATA


@pytest.mark.parametrize("data", [True, False], ids=["nodata-to-data", "data-to-nodata"])
def test_a_root_spanning_sets_refuses_the_other_kind_and_its_retransmission(data: bool) -> None:
    """h2_1 and h3_2 send to spine1 directly, from two sets: h3_2's contribution of
    the other kind is refused; so is, once the round is complete, h2_1's
    retransmission of the other kind."""
    lab, job, seq = _sets_lab()
    _send(lab, job, "h2_1", _kind(job, "h2_1", seq, data, (1, 2)))
    _send(lab, job, "h3_2", _kind(job, "h3_2", seq, not data, (1, 2)))
    assert _job_stats(lab)["spine1"][JobStat.DROP_KIND_MISMATCH] == 1
    for w in SETS_WORKERS:
        if w != "h2_1":
            _send(lab, job, w, _kind(job, w, seq, data, (1, 2)))
    assert all(_frames(lab.net, w) for w in SETS_WORKERS)
    _send(lab, job, "h2_1", _kind(job, "h2_1", seq, not data, (1, 2)))
    spine1 = _job_stats(lab)["spine1"]
    assert spine1[JobStat.DROP_KIND_MISMATCH] == 2 and JobStat.RESENT not in spine1
    assert _nothing_left(lab)
