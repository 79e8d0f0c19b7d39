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

from inatest import ModelLab, figure1_job, job_from, open_call, switch_stat

WORKERS = ("w1", "w2", "w3", "w4")
#: What a completion (NODATA) weighs on a host's link: Ethernet, IPv4, UDP, INA header.
COMPLETION_BYTES = 14 + 20 + 8 + INA_HEADER_BYTES
DATA_BYTES = COMPLETION_BYTES + INA_PAYLOAD_BYTES - INA_HEADER_BYTES


def _deploy(lab: ModelLab, **overrides: object) -> tuple[Job, int]:
    """Figure 1's job deployed and a call open: (job, the call's first seq)."""
    job = figure1_job(lab.topology, **overrides)
    asyncio.run(lab.ctl.deploy(job))
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


@pytest.mark.parametrize("source", WORKERS)
def test_one_data_contribution_and_nodata_from_the_others_reach_every_worker(
        model_lab: ModelLab, source: str) -> None:
    """A broadcast's chunk: whoever sends the data (first, last or between), the
    cell completes on every worker's bit and every worker gets the data."""
    job, seq = _deploy(model_lab)
    data = np.arange(-100, 100)
    for w in WORKERS:
        _send(model_lab, job, w, ina_payload(1, seq, job.worker_bit[w], data) if w == source
              else nodata_payload(1, seq, job.worker_bit[w], data.size))
    for w in WORKERS:
        (frame,) = _frames(model_lab.net, w)
        assert len(frame) == DATA_BYTES
        (got,) = [InaPacket.unpack(p) for p in _payloads(frame)]
        assert not got.header.flags & Flag.NODATA and got.meaningful == tuple(data), w
    stats = _job_stats(model_lab)
    assert stats["s6"][JobStat.MULTICAST] == 1 and stats["s6"][JobStat.ABSORBED] == 2
    assert switch_stat(model_lab, "s5", SwitchStat.COMPLETION_SENT) == 0


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
    assert _job_stats(model_lab)["s6"][JobStat.RESENT] == 2


def test_a_nodata_retransmission_gets_the_cells_data_and_vice_versa(
        model_lab: ModelLab) -> None:
    """A resend leaves with the cell's array if it has one, else without, whatever
    the retransmission carried (its lengths follow)."""
    job, seq = _deploy(model_lab)
    for w in WORKERS:  # seq: w1 has data; seq + 1: nobody has
        _send(model_lab, job, w, ina_payload(1, seq, job.worker_bit[w], [5]) if w == "w1"
              else nodata_payload(1, seq, job.worker_bit[w], 1))
        _send(model_lab, job, w, nodata_payload(1, seq + 1, job.worker_bit[w], 1))
    _results(model_lab)
    _send(model_lab, job, "w2", nodata_payload(1, seq, job.worker_bit["w2"], 1))
    _send(model_lab, job, "w2", ina_payload(1, seq + 1, job.worker_bit["w2"], [9]))
    frames = _frames(model_lab.net, "w2")
    assert [len(f) for f in frames] == [DATA_BYTES, COMPLETION_BYTES]
    first, second = (InaPacket.unpack(_payloads(f)[0]) for f in frames)
    assert first.meaningful == (5,) and second.values == ()
    assert _job_stats(model_lab)["s1"][JobStat.RESENT] == 2


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
    too_many = InaHeader(job_id=1, seq=seq, pbm=bit_of(1), count=513, width=16,
                         flags=Flag.NODATA).pack()
    nodata_result = nodata_payload(1, seq, bit_of(1), 1, flags=Flag.RESULT)
    for payload in (bad_width, bad_dest, too_many, nodata_result):
        _send(model_lab, job, "w1", payload)
    assert {stat: switch_stat(model_lab, "s1", stat) for stat in (
        SwitchStat.DROP_BAD_WIDTH, SwitchStat.DROP_BAD_DEST, SwitchStat.DROP_BAD_COUNT,
        SwitchStat.DROP_BAD_PBM)} == {SwitchStat.DROP_BAD_WIDTH: 1,
                                      SwitchStat.DROP_BAD_DEST: 1,
                                      SwitchStat.DROP_BAD_COUNT: 1, SwitchStat.DROP_BAD_PBM: 1}
    # 512 16-bit values are a whole packet.
    _send(model_lab, job, "w1", ina_payload(1, seq + 1, bit_of(1), [1] * 512, width=16))
    assert switch_stat(model_lab, "s1", SwitchStat.DROP_BAD_COUNT) == 1


def test_a_root_spanning_sets_cuts_and_completes_alike() -> None:
    """The root's general path (a bitmap per cell and set) on the leaf-spine whose
    leaves are BIER sets of their own: NODATA contributions, one data source, and
    dest in set 2."""
    from ina.spec.topology import Topology

    from inatest import ROOT

    topology = Topology.load(ROOT / "topologies" / "leaf-spine-2x4-sets.yaml")
    workers = ["h1_1", "h1_2", "h2_1", "h3_2", "h4_1"]
    job = job_from(topology, job_id=3, op="sum", workers=workers, root="spine1",
                   aggregators={"leaf1": ["h1_1", "h1_2"]})
    net, ctl = deployed_network(topology, job)
    lab = ModelLab(topology, {sw: s.store for sw, s in net.switches.items()}, ctl, net)
    seq = open_call(lab, job)
    dest = topology.hosts["h3_2"].bfr_id
    for w in workers:
        payload = (ina_payload(3, seq, job.worker_bit[w], [4, 5], dest=dest) if w == "h2_1"
                   else nodata_payload(3, seq, job.worker_bit[w], 2, dest=dest))
        _send(lab, job, w, payload)
    got = {w: [parse_frame(f) for f in _frames(net, w)] for w in workers}
    assert [f.values[:2].tolist() for f in got["h3_2"] if f.values is not None] == [[4, 5]]
    for w in workers:
        if w != "h3_2":
            (frame,) = got[w]
            assert frame.lanes is None and frame.ina is not None, w
            assert frame.ina.flags == Flag.RESULT | Flag.NODATA
