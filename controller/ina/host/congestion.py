"""How fast a worker sends (``CongestionWindow``): its congestion window, grown and
shrunk by the network's congestion marks, by queueing delay and by losses, and the
pacing interval that spreads a window over a round trip.

The switches mark congestion (ECN CE) where a port's queue passes a threshold, and
a VAT node ORs the marks of the contributions it aggregates into the packet it
sends on (ATP's scheme): so a chunk's result carries CE if any contribution to it,
or the result itself, met a congested queue. Every worker of a job gets the same
results, so every worker sees the same marks and the same round trips: their
windows follow the same steps and converge to the same rate (they share every
chunk's fate anyway: a chunk completes at the pace of its slowest contributor).

The response, per worker, in packets (chunks) outstanding:

- **Marks** (DCTCP): ``alpha`` estimates the fraction of marked results (an EWMA
  with gain 1/16, updated once per window of results); a window with a mark is cut
  to ``cwnd * (1 - alpha / 2)``, at most once per round trip. Few marks, a small
  cut; every result marked, a halving.
- **Delay** (Swift's target, as a backstop where nothing marks: a queue in a link
  that is not a switch's, or a switch without marking): the least of the recent
  round trips (RECENT_SAMPLES) above ``target`` (the path's base round trip times
  four, and at least 100 ms more) cuts the window in proportion to the excess, at
  most once per round trip.
  A backstop against standing queues of seconds, not a fine control: the
  emulation's round trips through switches that share two cores jitter by more
  than their base (a tighter target cut the window on most results under loss).
- **Losses**: a loss seen while the recent round trips are above the target is
  congestion (the queue overflowed): the window is halved, once per round trip; a
  loss on a path without queueing is corruption, and shrinking would only slow the
  recovery (the loss benchmark). A retransmission timeout is a loss too, but
  after a second (SILENCE) without any result timeouts halve the window whatever
  the delay.
- **Growth**: one packet per result until the first cut (slow start), then one
  packet per window of results (additive increase), never beyond ``limit``: half
  the job's slots (``congestion_limit``). The protocol's own window is the slots
  (a chunk goes once every result a window of slots before it has come), and the
  other half is room to send new chunks while an older one is recovered, as TCP
  sends new data within its receive window during a SACK recovery: a window that
  filled its slots stopped for each loss until its recovery (a tenth of every
  call on Figure 1 under 1% loss per link).

Round trips are measured by the window (ina.host.window) only from packets sent
once every worker had joined the reduction, so a call's start, which waits for the
slowest worker, is not taken for queueing.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field

from ina.errors import UsageError

LOG = logging.getLogger(__name__)
#: The window never shrinks below this many packets.
MIN_CWND = 1.0
#: DCTCP's gain for the estimate of the fraction of marked results.
DCTCP_G = 1.0 / 16
#: The base round trip is the least measured over the last BASE_BUCKETS periods of
#: BASE_PERIOD seconds: long enough that a standing queue does not become the base.
BASE_PERIOD = 5.0
BASE_BUCKETS = 6
#: The delay target: the base round trip times DELAY_FACTOR, and at least this much
#: more than it (seconds). A backstop against standing queues where nothing marks,
#: not a fine control: round trips through software switches sharing a machine's
#: cores jitter by their base and more, and the marks do the fine control.
DELAY_FACTOR = 4.0
DELAY_SLACK = 0.1
#: The path queues when the least of its last RECENT_SAMPLES round trips is above
#: the target: a queue delays every packet, while a result that waited for another
#: worker's loss recovery is one slow sample among quick ones (at 5% loss per link,
#: a third of the chunks: the smoothed round trip rose above the target with no
#: queue at all, every loss then halved the window, and calls ran at a packet or
#: two per round trip, 5 to 30 times slower).
RECENT_SAMPLES = 8
#: Swift's decrease per round trip over the target: ``beta * excess / rtt``, at most
#: MAX_DECREASE of the window.
DELAY_BETA = 0.8
MAX_DECREASE = 0.5
#: Seconds without any result after which timeouts cut the window whatever the
#: round trips said: the path may carry nothing at all.
SILENCE = 1.0
#: Packets a paced sender may send back to back after being idle.
PACING_BURST = 2
#: The pacer's granularity (seconds): it lets go at once what is due within this
#: much time, at least PACING_BURST packets, as Linux's pacing sends a millisecond's
#: worth in one burst (TSO autosizing). With a pacing interval below the time one
#: turn of a worker's loop takes (a loopback, a short round trip), two packets a
#: turn held the rate far below the window's (12,000 packets/s where the window
#: asked for 100,000). It is also the longest the worker's loop lets results gather
#: (ina.host.call.Caller._pause), so that what falls due while it sleeps is sent
#: when it wakes, not forfeited: with a 1 ms quantum, a pause of up to 3 ms cost
#: DDP on Figure 1 at 4 Mbit/s 14% of its median step and doubled its p99.
PACING_QUANTUM = 0.003


def congestion_limit(slots: int) -> int:
    """The largest congestion window of a job with ``slots`` slots: half of them
    (at least one packet), the rest being room for recovery (see the module's
    docstring)."""
    return max(1, slots // 2)


@dataclass
class CongestionWindow:
    """One worker's congestion window over its calls (see the module's docstring).

    ``limit``: the largest window (``congestion_limit`` of the job's slots).
    ``cwnd``: the window, in packets outstanding; it starts at ``limit`` (a job's
    first call sends its window at once, as without congestion control). The
    counters say what moved it."""

    limit: int
    cwnd: float = 0.0
    ssthresh: float = math.inf
    alpha: float = 1.0
    base_rtt: float | None = None
    results: int = 0
    marked: int = 0
    cuts: dict[str, int] = field(default_factory=lambda: {
        "mark": 0, "delay": 0, "loss": 0, "timeout": 0})
    _mins: deque[list[float]] = field(default_factory=lambda: deque(maxlen=BASE_BUCKETS))
    _recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_SAMPLES))
    _window_results: int = 0
    _window_marked: int = 0
    _cut_at: float = -math.inf

    @classmethod
    def for_slots(cls, slots: int) -> CongestionWindow:
        """The window of a worker of a job with ``slots`` slots."""
        return cls(congestion_limit(slots))

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise UsageError("a congestion window's limit is at least one packet")
        if self.cwnd <= 0:
            self.cwnd = float(self.limit)

    @property
    def allowed(self) -> int:
        """Packets that may be outstanding now."""
        return max(1, min(self.limit, int(self.cwnd)))

    def target(self) -> float | None:
        """The round trip above which the path counts as queueing (None: no sample yet)."""
        if self.base_rtt is None:
            return None
        return max(DELAY_FACTOR * self.base_rtt, self.base_rtt + DELAY_SLACK)

    def queueing_delay(self) -> float | None:
        """The least of the recent round trips (None: no sample yet)."""
        return min(self._recent) if self._recent else None

    def queueing(self) -> bool:
        """Whether the path queues: its recent round trips all above the target."""
        low, target = self.queueing_delay(), self.target()
        return low is not None and target is not None and low > target

    def interval(self, srtt: float | None) -> float:
        """Seconds between two packets: a window per round trip (0: not paced yet)."""
        return 0.0 if srtt is None else srtt / max(self.cwnd, MIN_CWND)

    def next_send(self, send_at: float, now: float, srtt: float | None) -> float:
        """The pacer's time for the send after one at ``now`` (its time was
        ``send_at``): an interval later, the sender allowed back to back what is due
        within PACING_QUANTUM (at least PACING_BURST packets) but no credit for an
        idle spell before ``now`` beyond that."""
        interval = self.interval(srtt)
        burst = max((PACING_BURST - 1) * interval, PACING_QUANTUM - interval)
        return max(send_at, now - burst) + interval

    def on_result(self, now: float, marked: bool, rtt: float | None, srtt: float | None
                  ) -> None:
        """A new result arrived, with CE or not; ``rtt``: its round trip if it is a
        sample (sent once, after every worker had joined); ``srtt``: the smoothed one."""
        self.results += 1
        self._window_results += 1
        if marked:
            self.marked += 1
            self._window_marked += 1
        if rtt is not None:
            self._recent.append(rtt)
            if not self._mins or now - self._mins[-1][0] >= BASE_PERIOD:
                self._mins.append([now, rtt])  # [period's start, least round trip in it]
                self.base_rtt = min(m for _, m in self._mins)  # an old period may be gone
            elif rtt < self._mins[-1][1]:
                self._mins[-1][1] = rtt
                assert self.base_rtt is not None  # a period has a round trip
                self.base_rtt = min(self.base_rtt, rtt)
        round_trip = srtt if srtt is not None else rtt
        if marked and self._may_cut(now, round_trip):
            self._cut(now, 1.0 - self._alpha_now() / 2, "mark")
        elif rtt is not None and self.queueing() and self._may_cut(now, round_trip):
            low, target = min(self._recent), self.target() or 0.0
            self._cut(now, max(1.0 - DELAY_BETA * (low - target) / low, 1.0 - MAX_DECREASE),
                      "delay")
        elif not marked:
            self.cwnd = min(float(self.limit), self.cwnd + (
                1.0 if self.cwnd < self.ssthresh else 1.0 / self.cwnd))
        if self._window_results >= self.cwnd:
            self.alpha = (1 - DCTCP_G) * self.alpha + DCTCP_G * (
                self._window_marked / self._window_results)
            self._window_results = self._window_marked = 0

    def on_loss(self, now: float, srtt: float | None) -> None:
        """A packet was found lost by later results: congestion if the path is
        queueing (``queueing``), else ignored; ``srtt`` spaces the cuts."""
        if self.queueing() and self._may_cut(now, srtt):
            self._cut(now, 0.5, "loss")

    def on_timeout(self, now: float, srtt: float | None, silent: float) -> None:
        """The oldest packet's retransmission timer fired (a packet sent once every
        worker had joined: before that, it waits for the slowest worker to join the
        call, which is no congestion); ``silent``: seconds since the last result.
        Halve the window if the path queues, or once per SILENCE while no result
        has come for SILENCE (the path may carry nothing at all). A timeout on a
        path without queueing is a loss like the others: a result waits for every
        worker's recovery, so under 5% loss per link timeouts come one after the
        other; halving on each kept the window at a packet or two, 5 to 30 times
        slower than lossless."""
        if self.queueing():
            if self._may_cut(now, srtt):
                self._cut(now, 0.5, "timeout")
        elif silent >= SILENCE and self._may_cut(now, SILENCE):
            self._cut(now, 0.5, "timeout")

    def _alpha_now(self) -> float:
        """alpha with the current window's marks counted in (the first marked window
        after a quiet spell cuts by what it sees, not by a stale estimate)."""
        if self._window_results == 0:
            return self.alpha
        return max(self.alpha, (1 - DCTCP_G) * self.alpha
                   + DCTCP_G * self._window_marked / self._window_results)

    def _may_cut(self, now: float, round_trip: float | None) -> bool:
        """At most one cut per round trip: the marks and losses of one window are one
        congestion event."""
        return now - self._cut_at >= (round_trip or 0.0)

    def _cut(self, now: float, factor: float, why: str) -> None:
        self.cwnd = max(MIN_CWND, self.cwnd * factor)
        self.ssthresh = self.cwnd
        self._cut_at = now
        self.cuts[why] += 1
        LOG.debug("congestion window cut to %.2f (%s)", self.cwnd, why)
