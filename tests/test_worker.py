"""The worker's protocol logic: chunks, window, results, timeouts."""

import dataclasses

import numpy as np
import pytest

from ina.errors import AllreduceTimeout
from ina.host.call import COALESCE_IN_FLIGHT, COALESCE_LEAST, COALESCE_SHARE
from ina.host.config import WorkerConfig
from ina.host.congestion import PACING_QUANTUM, CongestionWindow
from ina.host.window import ReductionWindow, RtoEstimator
from ina.host.worker import Worker
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, InaPacket
from ina.protocol.constants import ELEMS_PER_PACKET, QUERY, Ecn, Flag, Op
from ina.protocol.constants import ELEMS_PER_PACKET as P

CONFIG = WorkerConfig(job_id=4, op=Op.SUM, pbm=bit_of(2), target="10.0.100.1", window=4,
                      root="10.0.100.6")


def _result(seq: int, values: list[int], flags: Flag = Flag.RESULT, job_id: int = 4,
            ecn: Ecn = Ecn.NONE) -> bytes:
    header = InaHeader(job_id=job_id, seq=seq, pbm=0b11, count=len(values), flags=flags,
                       ecn=ecn)
    return InaPacket(header, tuple(values)).pack()


def _query(packet: bytes) -> bytes:
    """The QUERY a window sends about ``packet``'s chunk before its values again
    (tests/test_query.py): its header, flagged QUERY, alone."""
    header = InaHeader.unpack(packet)
    return dataclasses.replace(header, flags=header.flags | QUERY).pack()


def test_array_is_cut_into_packets_of_elems_per_packet() -> None:
    session = ReductionWindow(CONFIG, np.arange(ELEMS_PER_PACKET + 3), seq_base=10)
    packets = [InaPacket.unpack(p) for p in session.packets_to_send()]
    assert [(p.header.seq, p.header.count) for p in packets] == [(10, ELEMS_PER_PACKET), (11, 3)]
    assert packets[1].meaningful == (P, P + 1, P + 2) and packets[0].header.pbm == bit_of(2)


def test_the_congestion_window_takes_half_the_slots() -> None:
    session = ReductionWindow(CONFIG, np.zeros(5 * ELEMS_PER_PACKET, dtype=np.int32))
    assert len(session.packets_to_send()) == 2  # of 4 slots
    assert session.packets_to_send() == []
    assert session.accept(_result(0, [0] * ELEMS_PER_PACKET))
    assert len(session.packets_to_send()) == 1


def test_chunks_keep_going_past_a_missing_one_within_the_slots() -> None:
    # The other half of the slots: room to send while chunk 0 is recovered (a window
    # that filled its slots stopped for every loss until its recovery).
    session = ReductionWindow(CONFIG, np.zeros(6 * ELEMS_PER_PACKET, dtype=np.int32))
    session.packets_to_send()  # chunks 0 and 1
    for seq in (1, 2):
        session.accept(_result(seq, [0] * ELEMS_PER_PACKET))
        assert [InaHeader.unpack(p).seq for p in session.packets_to_send()] == [seq + 1]
    session.accept(_result(3, [0] * ELEMS_PER_PACKET))
    assert session.packets_to_send() == []  # chunk 4 is 4 slots past chunk 0: it waits


def test_results_fill_the_array_and_duplicates_are_ignored() -> None:
    session = ReductionWindow(CONFIG, np.array([1, 2, 3]))
    session.packets_to_send()
    assert session.accept(_result(0, [9, 8, 7]))
    assert not session.accept(_result(0, [0, 0, 0]))
    assert session.done and session.outcome().values.tolist() == [9, 8, 7]


def test_packets_of_other_jobs_and_non_results_are_ignored() -> None:
    session = ReductionWindow(CONFIG, np.array([1]))
    session.packets_to_send()
    assert not session.accept(_result(0, [5], job_id=5))
    assert not session.accept(_result(0, [5], flags=Flag.NONE))
    assert not session.accept(b"junk")
    assert not session.done


def test_overflow_flag_reaches_the_outcome() -> None:
    session = ReductionWindow(CONFIG, np.array([1]))
    session.packets_to_send()
    session.accept(_result(0, [5], flags=Flag.RESULT | Flag.OVERFLOW))
    assert session.outcome().overflow


def test_values_outside_int32_are_refused() -> None:
    with pytest.raises(ValueError, match="signed 32 bits"):
        ReductionWindow(CONFIG, np.array([2**31]))


class _SilentTransport:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, str | None]] = []

    def send(self, payload: bytes, dst: str | None = None) -> None:
        self.sent.append((payload, dst))

    def recv(self, timeout: float) -> bytes | None:
        return None


def test_a_worker_whose_root_does_not_answer_times_out_saying_so() -> None:
    transport = _SilentTransport()
    worker = Worker(CONFIG, transport, timeout=0.05)
    with pytest.raises(AllreduceTimeout, match="no answer from the job's root"):
        worker.allreduce([1, 2, 3])
    header = InaHeader.unpack(transport.sent[0][0])
    assert header.flags == Flag.SYNC and transport.sent[0][1] == CONFIG.root


def test_bad_input_is_refused_before_anything_is_sent() -> None:
    transport = _SilentTransport()
    with pytest.raises(ValueError, match="one-dimensional"):
        Worker(CONFIG, transport).allreduce(np.array([[1, 2]]))
    assert transport.sent == []


def test_a_chunk_without_result_is_sent_again_with_backoff() -> None:
    session = ReductionWindow(CONFIG, np.array([1]), rto=0.25)
    first = session.packets_to_send(now=0.0)
    assert session.packets_to_send(now=0.2) == []
    assert session.packets_to_send(now=0.25) == [_query(first[0])]  # asked about first
    assert session.next_timer() == 0.75  # the second retry waits twice as long
    assert session.packets_to_send(now=0.75) == first  # no answer: the values
    assert (session.queries, session.retransmissions) == (1, 1)


def test_backoff_never_waits_longer_than_the_rto_cap() -> None:
    session = ReductionWindow(CONFIG, np.array([1]), rto=RtoEstimator(initial=0.5, cap=0.6))
    now = 0.0
    for i in range(5):
        session.packets_to_send(now)
        timer = session.next_timer()
        assert timer is not None and timer - now == pytest.approx(min(0.5 * 2**i, 0.6))
        now = timer


def test_the_rto_follows_measured_round_trips_within_its_bounds() -> None:
    rto = RtoEstimator(initial=0.2, floor=0.005, cap=1.0)
    for _ in range(20):
        rto.sample(0.001)
    assert rto.rto == 0.005  # the floor
    for _ in range(40):
        rto.sample(0.3)  # the network got 300 times slower: followed within 40 results
    assert 0.3 <= rto.rto <= 1.0


def test_one_slow_round_trip_does_not_inflate_the_rto() -> None:
    # A result can wait for another worker's loss recovery: an outlier, clipped.
    rto = RtoEstimator(initial=0.2, floor=0.005, cap=1.0)
    for _ in range(20):
        rto.sample(0.04)
    rto.sample(0.9)
    assert rto.rto < 0.15  # unclipped, the RTO would be at its cap, 1 s


def test_timeouts_double_the_rto_until_a_result_arrives() -> None:
    rto = RtoEstimator(initial=0.1, floor=0.005, cap=1.0)
    rto.timed_out(now=0.0)
    assert rto.rto == 0.2
    rto.timed_out(now=0.05)  # within one RTO of the last: the same burst of timeouts
    assert rto.rto == 0.2
    rto.timed_out(now=0.3)
    assert rto.rto == 0.4
    rto.progress()
    assert rto.rto == 0.1


def test_before_a_round_trip_is_measured_a_late_result_raises_the_rtos_guess() -> None:
    # The guess (from the SYNC's round trip through idle queues) was 5 ms where round
    # trips took 300: every chunk was sent again before its result, so Karn's rule
    # measured none, and the worker sent its window again and again for a whole call.
    session = ReductionWindow(CONFIG, np.zeros(3 * ELEMS_PER_PACKET, dtype=np.int32),
                               rto=RtoEstimator(initial=0.005, floor=0.005), joined=True)
    session.packets_to_send(now=0.0)
    assert session.packets_to_send(now=0.005) != []  # timed out: a copy
    session.accept(_result(0, [0] * ELEMS_PER_PACKET), now=0.3)
    assert session.rto.samples == 0 and session.rto.rto == pytest.approx(0.3)


def test_a_late_result_does_not_raise_a_measured_rto() -> None:
    rto = RtoEstimator(initial=0.005, floor=0.005)
    rto.sample(0.01)
    before = rto.rto
    rto.bound(0.5)
    assert rto.rto == before


def test_round_trips_are_measured_from_packets_sent_once() -> None:
    session = ReductionWindow(CONFIG, np.zeros(2 * ELEMS_PER_PACKET, dtype=np.int32), rto=0.2)
    session.packets_to_send(now=0.0)
    session.packets_to_send(now=0.2)  # both sent again: neither gives a sample (Karn)
    session.accept(_result(0, [0] * ELEMS_PER_PACKET), now=0.21)
    assert session.rto.samples == 0


def test_a_missing_result_is_resent_at_once_when_later_results_arrive() -> None:
    config = WorkerConfig(4, Op.SUM, bit_of(2), "10.0.100.1", window=16, root="10.0.100.6")
    session = ReductionWindow(config, np.zeros(8 * ELEMS_PER_PACKET, dtype=np.int32),
                               rto=1.0)
    first = session.packets_to_send(now=0.0)
    for seq in (1, 2):
        session.accept(_result(seq, [0] * ELEMS_PER_PACKET), now=0.01)
    assert session.packets_to_send(now=0.01) == []  # two later results: not yet
    session.accept(_result(3, [0] * ELEMS_PER_PACKET), now=0.01)
    assert session.next_timer() == 0.0
    assert session.packets_to_send(now=0.01) == [_query(first[0])]
    assert session.early_retransmissions == 1


def test_overtaken_chunks_are_not_resent_sooner_than_the_least_rto() -> None:
    # A round waits for its slowest worker, so results overtake each other by a few
    # ms without a loss; with a least RTO of 10 s (the differential tests) nothing
    # may be sent twice.
    config = WorkerConfig(4, Op.SUM, bit_of(2), "10.0.100.1", window=16, root="10.0.100.6")
    session = ReductionWindow(config, np.zeros(8 * ELEMS_PER_PACKET, dtype=np.int32),
                               rto=RtoEstimator(initial=10.0, floor=10.0))
    session.packets_to_send(now=0.0)
    for seq in (1, 2, 3, 4):
        session.accept(_result(seq, [0] * ELEMS_PER_PACKET), now=0.01)
    assert session.packets_to_send(now=0.01) == []
    assert session.early_retransmissions == 0


def test_a_result_of_a_resent_chunk_does_not_count_as_overtaking() -> None:
    # It may answer the first send, sent before the others: ambiguous (Karn).
    session = ReductionWindow(CONFIG, np.zeros(2 * ELEMS_PER_PACKET, dtype=np.int32),
                               rto=0.1)
    session.packets_to_send(now=0.0)
    session.packets_to_send(now=0.1)  # chunk 0 timed out and was sent again
    for _ in range(3):
        session.accept(_result(0, [0] * ELEMS_PER_PACKET), now=0.11)
    assert session.lost == []


def test_at_a_timeout_every_chunk_a_later_result_overtook_is_sent_again() -> None:
    # The differential Allgather's stall: a burst lost most of a window, and recovery
    # sent one chunk per RTO (10 s each).
    config = WorkerConfig(4, Op.SUM, bit_of(2), "10.0.100.1", window=16, root="10.0.100.6")
    session = ReductionWindow(config, np.zeros(8 * ELEMS_PER_PACKET, dtype=np.int32),
                               rto=RtoEstimator(initial=10.0, floor=10.0))
    first = session.packets_to_send(now=0.0)
    for seq in (3, 6):
        session.accept(_result(seq, [0] * ELEMS_PER_PACKET), now=0.01)
    assert session.packets_to_send(now=10.01) == [_query(first[0])]  # the oldest timed out
    # 1, 2, 4 and 5: results overtook them; 7: nothing did, but it was sent an RTO ago.
    assert session.packets_to_send(now=10.01) == [_query(first[c]) for c in (1, 2, 4, 5, 7)]
    assert session.packets_to_send(now=10.01) == []


def test_at_a_timeout_a_chunk_sent_less_than_an_rto_ago_waits() -> None:
    config = WorkerConfig(4, Op.SUM, bit_of(2), "10.0.100.1", window=8, root="10.0.100.6")
    session = ReductionWindow(config, np.zeros(6 * ELEMS_PER_PACKET, dtype=np.int32),
                               rto=RtoEstimator(initial=10.0, floor=10.0))
    first = session.packets_to_send(now=0.0)  # chunks 0..3
    session.accept(_result(1, [0] * ELEMS_PER_PACKET), now=5.0)
    assert len(session.packets_to_send(now=5.0)) == 1  # chunk 4, in 1's room
    assert session.packets_to_send(now=10.01) == [_query(first[0])]  # the oldest timed out
    # 2 and 3 were sent an RTO ago (nothing overtook them: they went after 1); 4 waits.
    assert session.packets_to_send(now=10.01) == [_query(first[c]) for c in (2, 3)]


def test_a_stalled_window_probes_its_oldest_chunk_before_the_rto() -> None:
    # Both chunks sent, chunk 1 answered: nothing more can be sent, so no later
    # result can reveal chunk 0's loss. It is sent again after two round trips.
    session = ReductionWindow(CONFIG, np.zeros(2 * ELEMS_PER_PACKET, dtype=np.int32),
                               rto=RtoEstimator(initial=1.0, floor=0.005), joined=True)
    first = session.packets_to_send(now=0.0)
    session.accept(_result(1, [0] * ELEMS_PER_PACKET), now=0.02)  # a 20 ms round trip
    assert session.next_timer() == pytest.approx(0.06)
    assert session.packets_to_send(now=0.06) == [_query(first[0])]


def test_the_probe_waits_at_least_a_typical_round_trip_when_the_least_is_short() -> None:
    # The stalls of make train on the rate-limited fat-tree (up to 29 s a step): the
    # probe waited twice the least recent round trip, down to the 5 ms floor, while
    # queues made round trips of 0.3 to 1.4 s; the windows probed their oldest chunk
    # every few ms, hundreds of copies a call (11,796 duplicates at the root in 150
    # calls), and the copies filled the queues further.
    rto = RtoEstimator(initial=0.2, floor=0.005, cap=1.0)
    for rtt in (0.4, 0.002, *[0.4] * 10):
        rto.sample(rtt)
    probe = rto.probe()
    assert probe is not None and rto.srtt is not None
    assert probe >= rto.srtt > 0.3


def test_where_the_path_queues_the_probe_waits_for_a_typical_round_trip() -> None:
    # A packet that finds a rate-limited path idle crosses it in a burst: on Figure 1
    # at 1 Mbit/s round trips of 5 to 80 ms, and probes at twice the quickest sent
    # 200 to 480 copies of a 301-packet call into the queue.
    rto = RtoEstimator(initial=0.2, floor=0.001, cap=1.0)
    for rtt in (0.005, 0.06, 0.08, 0.005, 0.07, 0.08, 0.06, 0.07):
        rto.sample(rtt)
    probe = rto.probe(queued=True)
    assert probe is not None and probe >= 2 * 0.06


def test_where_the_path_does_not_queue_the_probe_waits_for_the_quickest_round_trip() -> None:
    # The slow round trips of a lossy path are results that waited for another
    # worker's recovery: probes at twice their median stalled a call at 5% loss.
    rto = RtoEstimator(initial=0.2, floor=0.001, cap=1.0)
    for rtt in (0.01, 0.3, 0.4, 0.01, 0.3, 0.5, 0.3, 0.4):
        rto.sample(rtt)
    assert rto.probe(queued=False) == pytest.approx(0.02)


def test_a_marked_result_makes_the_window_probe_later() -> None:
    session = ReductionWindow(CONFIG, np.zeros(4 * ELEMS_PER_PACKET, dtype=np.int32),
                               rto=RtoEstimator(initial=1.0, floor=0.001), joined=True)
    for rtt in (0.01, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05):
        session.rto.sample(rtt)
    session.packets_to_send(now=0.0)
    session.accept(_result(1, [0] * ELEMS_PER_PACKET, ecn=Ecn.CE), now=0.05)
    assert session.probe_at() == pytest.approx(0.05 + 2 * 0.05)  # not 2 * 0.01


def _window_with(outstanding: int, srtt: float) -> tuple[Worker, ReductionWindow]:
    config = WorkerConfig(job_id=4, op=Op.SUM, pbm=bit_of(2), target="10.0.100.1", window=32)
    worker = Worker(config, _SilentTransport(), rto=RtoEstimator(srtt=srtt))
    window = ReductionWindow(config, np.zeros(outstanding * P, dtype=np.int32))
    assert len(window.packets_to_send()) == outstanding
    return worker, window


def test_a_full_window_lets_results_gather_for_a_share_of_the_round_trip() -> None:
    worker, window = _window_with(16, srtt=0.002)
    assert worker._pause(window, left=10.0) == pytest.approx(0.002 / COALESCE_SHARE)


def test_a_window_with_few_packets_out_looks_for_results_at_once() -> None:
    worker, window = _window_with(COALESCE_IN_FLIGHT - 1, srtt=0.002)
    assert worker._pause(window, left=10.0) == 0.0


def test_results_gather_no_longer_than_the_pacers_quantum_nor_the_time_left() -> None:
    worker, window = _window_with(16, srtt=1.0)
    assert worker._pause(window, left=10.0) == PACING_QUANTUM
    assert worker._pause(window, left=0.0005) == 0.0005


def test_what_falls_due_while_results_gather_is_sent_when_the_loop_wakes() -> None:
    # The longest pause is within the pacer's quantum: a worker that slept it sends
    # what its pacer let fall due meanwhile, not two packets (pauses of up to 3 ms
    # with a 1 ms quantum cost DDP at 4 Mbit/s a seventh of its step).
    srtt = 0.016  # a quarter of it is over the cap: the longest pause
    worker, full = _window_with(16, srtt=srtt)
    pause = worker._pause(full, left=10.0)
    cc = CongestionWindow(16)
    window = ReductionWindow(full.plan.config, np.zeros(80 * P, dtype=np.int32), rto=worker.rto,
                             cc=cc, joined=True)
    window.packets_to_send(0.0)
    assert len(window.packets_to_send(pause)) >= round(pause / cc.interval(srtt))


def test_a_pause_shorter_than_a_sleeps_slack_is_not_taken() -> None:
    worker, window = _window_with(16, srtt=COALESCE_LEAST)
    assert worker._pause(window, left=10.0) == 0.0
