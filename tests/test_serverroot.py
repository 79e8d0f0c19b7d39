"""A server as the job's root answers SYNCs as a root switch does (the first SYNC's
proposal, the plan's generation), and real workers reduce through it on the model."""

from __future__ import annotations

import asyncio
import threading
from functools import partial

from ina.host.results import AllreduceResult
from ina.host.serverroot import ServerRoot
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, InaPacket
from ina.protocol.constants import QUERY, Flag, Op, QueryVerdict
from ina.protocol.frames import parse_frame
from ina.spec.topology import Topology

from inatest import FIGURE1 as FIGURE1_PATH
from inatest import (
    ModelLab,
    assert_exact,
    figure1_job,
    in_threads,
    int_arrays,
    make_model_lab,
    model_workers,
)

W1 = "10.0.0.1"


def _sync(seq: int, gen: int = 0, worker: int = 1) -> bytes:
    return InaHeader(job_id=1, seq=seq, pbm=bit_of(worker), count=77, op=Op.SUM,
                     flags=Flag.SYNC, gen=gen).pack()


def _answer(root: ServerRoot, payload: bytes) -> InaHeader:
    (frame,) = root.accept(payload, W1)
    parsed = parse_frame(frame)
    assert parsed.ina is not None
    return parsed.ina


def _root() -> ServerRoot:
    topology = Topology.load(FIGURE1_PATH)
    return ServerRoot(figure1_job(topology, root="w5", slots=8), topology)


def test_the_first_sync_gets_its_proposal_back_and_later_ones_the_same() -> None:
    root = _root()
    first = _answer(root, _sync(1000))
    assert first.seq == 1000 and first.flags == Flag.SYNC | Flag.REPLY and first.count == 77
    assert _answer(root, _sync(0, worker=2)).seq == 1000


def test_a_sync_answer_carries_the_generation_the_edge_stamped() -> None:
    assert _answer(_root(), _sync(0, gen=7)).gen == 7


def test_a_new_generation_is_a_new_epoch_and_the_old_ones_packets_are_refused() -> None:
    root = _root()
    _answer(root, _sync(0, gen=1))
    assert _answer(root, _sync(500, gen=2)).seq == 500  # a first SYNC again
    old = InaPacket(InaHeader(job_id=1, seq=500, pbm=bit_of(1), count=1, op=Op.SUM,
                              gen=1), (5,)).pack()
    assert root.accept(old, W1) == [] and root.stats["old_plan"] == 1
    assert root.accept(_sync(0, gen=1), W1) == []  # a late SYNC of the old plan


def test_workers_reduce_through_a_server_root_on_the_model() -> None:
    lab: ModelLab = make_model_lab(Topology.load(FIGURE1_PATH))
    job = figure1_job(lab.topology, root="w5")
    asyncio.run(lab.ctl.deploy(job))
    root = ServerRoot(job, lab.topology)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with lab.net.lock:
                lab.net.lock.wait_for(lambda: bool(lab.net.inbox["w5"]) or stop.is_set(), 0.1)
                for src_ip, payload in lab.net.received_datagrams("w5"):
                    for frame in root.accept(payload, src_ip):
                        lab.net.send("w5", frame)
                lab.net.lock.notify_all()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        workers = model_workers(lab, job)
        for call in range(2):
            arrays = int_arrays(job, 600 + call, seed=call)
            outcomes = in_threads({w: partial(workers[w].allreduce, arrays[w])
                                   for w in job.workers})
            results = {w: o for w, o in outcomes.items() if isinstance(o, AllreduceResult)}
            assert results.keys() == set(job.workers), outcomes
            assert_exact(job, arrays, {w: r.values for w, r in results.items()})
    finally:
        stop.set()
        server.join(5)
    assert root.stats["synced"] == 4  # the first call's: the second starts where it ended
    assert len({w.continuation for w in workers.values()}) == 1


def _query(seq: int, worker: int = 1) -> bytes:
    return InaHeader(job_id=1, seq=seq, pbm=bit_of(worker), count=1, op=Op.SUM,
                     flags=QUERY).pack()


def test_a_query_is_answered_held_while_the_round_waits_and_send_once_complete() -> None:
    root = _root()  # its children: s1 (w1, w2) and s7 (w3, w4)
    start = _answer(root, _sync(100)).seq
    s1_bits = root.job.nodes["s1"].abm
    partial_of_s1 = InaPacket(InaHeader(job_id=1, seq=start, pbm=s1_bits, count=1), (3,))
    assert root.accept(partial_of_s1.pack(), "10.0.100.1") == []
    held = _answer(root, InaHeader(job_id=1, seq=start, pbm=s1_bits, count=1,
                                   flags=QUERY).pack())
    assert held.flags == QUERY | Flag.REPLY and held.count == QueryVerdict.HELD
    assert _answer(root, _query(start, worker=3)).count == QueryVerdict.SEND  # s7's: missing
    assert root.stats["queried"] == 2 and root.stats["query_held"] == 1
