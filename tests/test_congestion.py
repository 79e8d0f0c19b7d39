"""A worker's congestion window (ina.host.congestion) and how its window
(ina.host.window) uses it: marks, delay and losses move the window, sends are paced
over a round trip; and, on a simulated bottleneck with a switch's shallow buffer
that marks at a threshold, the window keeps the queue short without losing the
link's rate."""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field

import numpy as np
import pytest

from ina.host.config import WorkerConfig
from ina.host.congestion import (
    MIN_CWND,
    PACING_BURST,
    PACING_QUANTUM,
    RECENT_SAMPLES,
    CongestionWindow,
)
from ina.host.window import ReductionWindow, RtoEstimator
from ina.protocol.bitmaps import bit_of
from ina.protocol.constants import ECN_CE, ELEMS_PER_PACKET, Flag, Op

CONFIG = WorkerConfig(job_id=4, op=Op.SUM, pbm=bit_of(2), target="10.0.100.1", window=16,
                      root="10.0.100.6")
RTT = 0.02


def _result_of(payload: bytes, marked: bool = False) -> bytes:
    """The switches' answer to a contribution: the same packet as a result."""
    raw = bytearray(payload)
    raw[1] |= Flag.RESULT
    if marked:
        raw[15] |= ECN_CE
    return bytes(raw)


def _sampled(cc: CongestionWindow, rtt: float = RTT, n: int = 10) -> float:
    """``n`` unmarked results a round trip of ``rtt`` apart; the time after them."""
    now = 0.0
    for _ in range(n):
        now += rtt
        cc.on_result(now, False, rtt, rtt)
    return now


def _queued(cc: CongestionWindow, now: float, rtt: float) -> float:
    """A queue: RECENT_SAMPLES results of round trip ``rtt``, all at ``now``."""
    for _ in range(RECENT_SAMPLES):
        cc.on_result(now, False, rtt, rtt)
    return now


def test_a_window_starts_at_its_limit_and_never_grows_past_it() -> None:
    cc = CongestionWindow(16)
    assert cc.allowed == 16
    _sampled(cc, n=100)
    assert cc.cwnd == 16


def test_a_marked_result_cuts_the_window_by_half_the_marked_fraction() -> None:
    cc = CongestionWindow(16, alpha=0.25)
    now = _sampled(cc)
    cc.on_result(now + RTT, True, RTT, RTT)
    assert cc.cwnd == pytest.approx(16 * (1 - 0.25 / 2))
    assert cc.cuts["mark"] == 1


def test_marks_cut_the_window_once_per_round_trip() -> None:
    cc = CongestionWindow(16)
    now = _sampled(cc)
    for _ in range(5):  # a window's marks, all within one round trip
        cc.on_result(now + 0.001, True, RTT, RTT)
    assert cc.cuts["mark"] == 1
    cc.on_result(now + 0.001 + 1.5 * RTT, True, RTT, RTT)
    assert cc.cuts["mark"] == 2


def test_every_result_marked_halves_the_window_each_round_trip_down_to_one() -> None:
    cc = CongestionWindow(16)
    now = 0.0
    for _ in range(20):
        now += RTT
        cc.on_result(now, True, RTT, RTT)
    assert cc.cwnd == MIN_CWND and cc.allowed == 1


def test_without_marks_a_cut_window_grows_a_packet_per_window_of_results() -> None:
    cc = CongestionWindow(16, cwnd=8, ssthresh=8)
    _sampled(cc, n=8)  # a window of results
    assert cc.cwnd == pytest.approx(9, abs=0.1)


def test_a_round_trip_over_the_target_cuts_in_proportion_to_the_excess() -> None:
    cc = CongestionWindow(16)
    now = _sampled(cc)  # base round trip 20 ms: target 120 ms
    assert cc.target() == pytest.approx(RTT + 0.1)
    _queued(cc, now + 0.24, 0.24)
    # Swift, on the least recent round trip: 1 - 0.8 * (240 - 120) / 240 = 0.6
    assert cc.cwnd == pytest.approx(16 * 0.6) and cc.cuts["delay"] == 1


def test_a_round_trip_within_the_target_does_not_cut() -> None:
    cc = CongestionWindow(16)
    now = _sampled(cc)
    _queued(cc, now + 0.1, 0.1)
    assert cc.cwnd == 16 and sum(cc.cuts.values()) == 0


def test_slow_results_among_quick_ones_are_no_queue() -> None:
    # Under 5% loss per link a third of the results wait for another worker's
    # recovery; the smoothed round trip rose above the target, every loss halved the
    # window, and calls ran 5 to 30 times slower than lossless.
    cc = CongestionWindow(16)
    now = _sampled(cc)
    for i in range(60):
        now += RTT
        rtt = 0.5 if i % 3 else RTT  # two in three slow
        cc.on_result(now, False, rtt, 0.4)
        if i % 5 == 0:
            cc.on_loss(now, srtt=0.4)
    assert not cc.queueing()
    assert cc.cwnd == 16 and sum(cc.cuts.values()) == 0


def test_a_loss_on_a_path_without_queueing_does_not_cut() -> None:
    # Corruption, not congestion: shrinking would only slow the recovery.
    cc = CongestionWindow(16)
    now = _sampled(cc)
    cc.on_loss(now, srtt=RTT)
    assert cc.cwnd == 16


def test_a_loss_while_the_path_queues_halves_the_window() -> None:
    cc = CongestionWindow(16)
    now = _queued(cc, _sampled(cc) + 1, 7 * RTT)
    before = cc.cwnd
    cc.on_loss(now + 1, srtt=7 * RTT)
    assert cc.cwnd == before / 2 and cc.cuts["loss"] == 1


def test_a_timeout_while_the_path_queues_halves_the_window() -> None:
    cc = CongestionWindow(16)
    now = _queued(cc, _sampled(cc) + 1, 7 * RTT)
    before = cc.cwnd
    cc.on_timeout(now + 1, 7 * RTT, silent=0.2)
    assert cc.cwnd == before / 2 and cc.cuts["timeout"] == 1


def test_a_single_timeout_on_a_path_without_queueing_does_not_cut() -> None:
    cc = CongestionWindow(16)
    now = _sampled(cc)
    cc.on_timeout(now + 1, RTT, silent=0.2)
    assert cc.cwnd == 16


def test_timeouts_after_a_second_without_results_halve_the_window_once_a_second() -> None:
    # Nothing comes back at all: the path may carry nothing, whatever the delay said.
    cc = CongestionWindow(16)
    now = _sampled(cc)
    for i in range(60):  # a timeout every 40 ms for 2.4 seconds
        cc.on_timeout(now + 0.04 * i, RTT, silent=0.04 * i)
    assert cc.cwnd == 4 and cc.cuts["timeout"] == 2


def test_timeouts_while_results_still_come_do_not_cut() -> None:
    # A result waits for every worker's recovery: under loss, one worker's timeouts
    # come one after the other while the others recover (5% loss per link: 1,244
    # halvings in one call at one worker, which then ran at a packet per round trip).
    cc = CongestionWindow(16)
    now = _sampled(cc)
    for i in range(50):
        cc.on_timeout(now + 0.04 * i, RTT, silent=0.1)
    assert cc.cwnd == 16 and cc.cuts["timeout"] == 0


# --- the window --------------------------------------------------------------------


def _window(chunks: int, cc: CongestionWindow, joined: bool = True) -> ReductionWindow:
    rto = RtoEstimator(initial=1.0)
    config = dataclasses.replace(CONFIG, window=cc.limit)
    return ReductionWindow(config, np.zeros(chunks * ELEMS_PER_PACKET, dtype=np.int32),
                           rto=rto, cc=cc, joined=joined)


def test_the_congestion_window_bounds_the_packets_outstanding() -> None:
    window = _window(20, CongestionWindow(16, cwnd=5))
    assert len(window.packets_to_send(0.0)) == 5  # not yet paced: no round trip known
    assert window.packets_to_send(0.0) == []


def test_sends_are_paced_a_round_trip_per_window_apart() -> None:
    cc = CongestionWindow(16, cwnd=4)
    window = _window(40, cc)
    first = window.packets_to_send(0.0)
    for p in first:
        assert window.accept(_result_of(p), RTT)  # a 20 ms round trip each
    sent = window.packets_to_send(RTT)
    assert len(sent) == PACING_BURST  # not the whole window at once
    assert window.next_timer() == pytest.approx(RTT + RTT / cc.cwnd)


def test_a_short_round_trip_lets_a_quantum_of_due_packets_go_at_once() -> None:
    # 16 packets a 160 us round trip: 10 us apart, far less than one turn of a
    # worker's loop; the pacer lets go what is due within PACING_QUANTUM, not two.
    rtt = 160e-6
    cc = CongestionWindow(16, cwnd=16)
    window = _window(80, cc)
    for p in window.packets_to_send(0.0):
        assert window.accept(_result_of(p), rtt)
    sent = window.packets_to_send(rtt)
    assert len(sent) == 16  # the whole window: it is due within the quantum
    interval = rtt / cc.cwnd
    assert PACING_QUANTUM / interval > 16 > PACING_BURST


def test_the_pacing_quantum_gives_no_credit_for_an_idle_spell_beyond_itself() -> None:
    cc = CongestionWindow(16, cwnd=16)
    srtt = 160e-6
    interval = srtt / 16
    at = cc.next_send(0.0, 10.0, srtt)  # a send at t=10 s after a long idle spell
    assert at == pytest.approx(10.0 - PACING_QUANTUM + 2 * interval)
    # With a long round trip the quantum is below the burst: PACING_BURST packets.
    slow = cc.next_send(0.0, 10.0, 1.0)
    assert slow == pytest.approx(10.0 - (PACING_BURST - 1) / 16 + 1 / 16)


def test_a_marked_result_makes_the_window_send_fewer() -> None:
    cc = CongestionWindow(16)
    window = _window(40, cc)
    sent = window.packets_to_send(0.0)
    window.accept(_result_of(sent[0], marked=True), RTT)
    assert cc.allowed == 8 and window.marked == 1
    assert window.in_flight + len(window.packets_to_send(RTT)) <= 15


def test_a_calls_first_packets_sent_before_any_result_are_not_round_trip_samples() -> None:
    # They wait for the slowest worker to join the call: that is not queueing.
    cc = CongestionWindow(16)
    window = _window(40, cc, joined=False)
    first = window.packets_to_send(0.0)
    window.accept(_result_of(first[0]), 0.5)  # the others joined late
    assert window.rto.samples == 0 and cc.base_rtt is None
    later = window.packets_to_send(0.5)
    window.accept(_result_of(later[0]), 0.5 + RTT)
    assert window.rto.samples == 1 and cc.base_rtt == pytest.approx(RTT)


# --- a bottleneck ----------------------------------------------------------------------


@dataclass
class Bottleneck:
    """One link of ``rate`` packets/s with a FIFO of ``buffer`` packets that marks
    what arrives to ``mark`` packets or more (a switch's ECN threshold), and
    ``delay`` seconds of the rest of the round trip."""

    rate: float
    buffer: int
    mark: int
    delay: float
    #: From this time on (seconds), the link serves ``slow_rate`` packets/s instead
    #: (another flow took most of it, say).
    slow_at: float = float("inf")
    slow_rate: float = 0.0
    departures: list[float] = field(default_factory=list)
    dropped: int = 0  # after the first round trips (the first window is a burst)
    marked: int = 0
    deepest: int = 0  # likewise
    warmup: float = 0.2

    def enqueue(self, now: float) -> tuple[float, bool] | None:
        """When the packet's result comes back and whether it is marked; None: dropped."""
        self.departures = [t for t in self.departures if t > now]
        depth = len(self.departures)
        if now >= self.warmup:
            self.deepest = max(self.deepest, depth)
        if depth >= self.buffer:
            self.dropped += now >= self.warmup
            return None
        start = max([now, *self.departures[-1:]])
        leaves = start + 1 / (self.rate if start < self.slow_at else self.slow_rate)
        self.departures.append(leaves)
        mark = depth >= self.mark
        self.marked += mark
        return leaves + self.delay, mark


def _through(link: Bottleneck, chunks: int, slots: int = CONFIG.window
             ) -> tuple[ReductionWindow, float]:
    """A reduction of ``chunks`` packets through ``link`` by a job of ``slots``: the
    window, and the seconds."""
    window = _window(chunks, CongestionWindow(slots))
    arrivals: list[tuple[float, int, bytes]] = []
    now, n = 0.0, 0
    while not window.done:
        for payload in window.packets_to_send(now):
            got = link.enqueue(now)
            if got is not None:
                n += 1
                heapq.heappush(arrivals, (got[0], n, _result_of(payload, got[1])))
        timer = window.next_timer()
        upcoming = [t for t in (timer, arrivals[0][0] if arrivals else None) if t is not None]
        now = max(now, min(upcoming))
        while arrivals and arrivals[0][0] <= now:
            window.accept(heapq.heappop(arrivals)[2], now)
    return window, now


def test_on_a_marking_bottleneck_the_window_keeps_the_queue_short_at_full_rate() -> None:
    # 250 packets/s (a 2 Mbit/s link of INA packets), 20 ms of base round trip (5
    # packets in flight fill it), a shallow buffer of 12 that marks from 6: the
    # job's window of 16 would overflow it without congestion control.
    link = Bottleneck(rate=250, buffer=12, mark=6, delay=RTT)
    window, seconds = _through(link, chunks=2000)
    assert link.marked > 0
    assert link.dropped == 0
    assert link.deepest <= 10
    assert 2000 / seconds >= 0.9 * link.rate


def test_without_marks_the_delay_target_keeps_the_queue_from_filling_a_deep_buffer() -> None:
    # A queue in a link that does not mark (a host's qdisc): the round trip rises. A
    # job of 64 slots would keep 59 packets queued (a quarter second) without it;
    # the target (20 ms + 100 ms) allows 25.
    # (After the first two seconds: the first window is sent as a burst, and the
    # base round trip and the window settle.)
    link = Bottleneck(rate=250, buffer=1000, mark=10**6, delay=RTT, warmup=2.0)
    window, seconds = _through(link, chunks=2000, slots=64)
    assert window.cc.cuts["delay"] > 0
    assert link.deepest <= 32 and link.dropped == 0
    assert 2000 / seconds >= 0.9 * link.rate
