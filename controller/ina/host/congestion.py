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

from ina.errors import UsageError
from ina.host import _window

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


_window.configure_congestion(
    RECENT_SAMPLES=RECENT_SAMPLES, BASE_BUCKETS=BASE_BUCKETS, PACING_BURST=PACING_BURST,
    MIN_CWND=MIN_CWND, DCTCP_G=DCTCP_G, BASE_PERIOD=BASE_PERIOD, DELAY_FACTOR=DELAY_FACTOR,
    DELAY_SLACK=DELAY_SLACK, DELAY_BETA=DELAY_BETA, MAX_DECREASE=MAX_DECREASE, SILENCE=SILENCE,
    PACING_QUANTUM=PACING_QUANTUM, log=LOG.log)


class CongestionWindow(_window.Congestion):
    """One worker's congestion window over its calls (see the module's docstring),
    its arithmetic compiled (ina.host._window: the per-packet path).

    ``limit``: the largest window (``congestion_limit`` of the job's slots).
    ``cwnd``: the window, in packets outstanding; it starts at ``limit`` (a job's
    first call sends its window at once, as without congestion control). ``cuts``
    counts, by why, what cut it: "mark", "delay", "loss", "timeout".

    - ``allowed``: packets that may be outstanding now.
    - ``target()``: the round trip above which the path counts as queueing (None:
      no sample yet); ``queueing_delay()``: the least of the recent round trips;
      ``queueing()``: whether they are all above the target.
    - ``interval(srtt)``: seconds between two packets, a window per round trip (0:
      not paced yet). ``next_send(send_at, now, srtt)``: the pacer's time for the
      send after one at ``now``: an interval later, the sender allowed back to back
      what is due within PACING_QUANTUM (at least PACING_BURST packets), but no
      credit for an idle spell before ``now`` beyond that.
    - ``on_result(now, marked, rtt, srtt)``: a new result, with CE or not; ``rtt``
      its round trip if it is a sample (sent once, after every worker had joined).
      A mark cuts by DCTCP's alpha (counting the current window's marks in: the
      first marked window after a quiet spell cuts by what it sees); else a queueing
      path cuts by Swift's excess over the target; else the window grows.
    - ``on_loss(now, srtt)``: a packet found lost by later results: congestion only
      if the path is queueing.
    - ``on_timeout(now, srtt, silent)``: the oldest packet's timer fired (one sent
      once every worker had joined: before that, it waits for the slowest worker to
      join the call, no congestion); ``silent``: seconds since the last result.
      Halves the window if the path queues, or once per SILENCE while no result has
      come for SILENCE (the path may carry nothing at all). A timeout on a path
      without queueing is a loss like the others: a result waits for every
      worker's recovery, so under 5% loss per link timeouts come one after the
      other; halving on each kept the window at a packet or two, 5 to 30 times
      slower than lossless.

    At most one cut per round trip: the marks and losses of one window are one
    congestion event."""

    def __init__(self, limit: int, cwnd: float = 0.0, ssthresh: float = math.inf,
                 alpha: float = 1.0, base_rtt: float | None = None):
        if limit < 1:
            raise UsageError("a congestion window's limit is at least one packet")
        super().__init__(limit, cwnd, ssthresh, alpha, base_rtt)

    @classmethod
    def for_slots(cls, slots: int) -> CongestionWindow:
        """The window of a worker of a job with ``slots`` slots."""
        return cls(congestion_limit(slots))
