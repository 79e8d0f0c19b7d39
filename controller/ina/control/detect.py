"""Failure detection without I/O: which switches and links are down, from what the
controller observed.

The evidence, all timed by the caller's clock:

- **Switch liveness**: the P4Runtime connection (``switch_connected``) and requests
  answered (``switch_answered``). A switch whose connection is lost and not made
  again for ``detect_after`` seconds is down: its process died (its socket is
  gone: a reconnect is refused at once). A switch that keeps its connection but
  answers nothing for ``hang_after`` seconds (a longer time) is down too: it
  hangs. A busy switch answers late, never not at all: the short timeout is not
  applied to its answers, only to its connection, so load does not look like a
  failure.
- **Link probes**: the controller sends a probe out of every switch port that
  leads to another switch (packet-out) and the neighbour passes it up
  (packet-in, ``probe_received``). A link is down when no probe crossed it in one
  direction for ``detect_after`` seconds while both its switches answer and
  carry probes, the receiving switch passed up probes from its other ports
  meanwhile and the sending switch's probes crossed its other links meanwhile (a
  switch too busy to pass probes up, or to send them out, at once is late on all
  of its links, a dead link only on its own; after ``hang_after`` the link is
  down whatever the other links do). "Meanwhile" holds both by when the probes
  were heard and by when they were sent (``probes_sent``): a switch that stalled
  passes up the probes that waited one after another, and the first of them, from
  one port, is no evidence against the ones still queued behind it from another.
  A switch whose own probes cannot be sent (another controller is primary for a
  moment, or the write times out) pauses the verdict on its links.
- **Congestion marks** (``port_marks``): each switch port's count of packets it
  marked as congested (congestion.p4). A probe late on a direction whose sending
  port marked packets lately (since ``detect_after`` before the last probe heard
  there) waited in a congested queue: that is congestion, not the link's loss,
  and the link is down only after ``hang_after`` (a dead link that keeps being
  sent to also keeps marking).
- **Egress counts** (``port_sent``): each switch port's count of packets that
  left it (congestion.p4's port_packets). A port that had let out fewer packets,
  ``detect_after / 4`` ago, than the watcher had sent probes out of it by then
  since the last one heard has an egress that stalls (a switch whose ingress
  queue, which the controller's packets share with the data, is full, or whose
  threads are starved of CPU): its probes wait in the switch, not on the link,
  and the direction is not late, until ``hang_after``. A dead link's egress
  counts every probe sent to it.
- **Ingress counts** (``port_received``): each switch port's count of packets
  that came in by it (ingress.p4's port_received). A port that counted packets
  in the last ``detect_after / 2`` is on a link that delivers: a probe late there
  waits behind a backlog the receiver reads (a flood's, at a switch that cannot
  keep up), and the direction is not late, until ``hang_after``. A dead link
  delivers nothing.
- **The receiver's lag**: a switch whose newest probe passed up, from any port,
  was sent over ``detect_after`` ago lags behind its ingress (a flood fills its
  queue, and its ports' readers take turns in no fixed order: a flood at a leaf
  held one spine's probes 1 s while another's, sent 0.5 s after them, came up):
  silence on one of its ports is no evidence until it keeps up again, or until
  ``hang_after``.

- **The watcher's own hearing**: while it hears no probe on any link for
  ``detect_after``, the watcher is deaf, not the fabric cut (its connections' primary
  role was taken by a writer and the notice of its return got lost, or their streams
  stalled: seen for 4 to 55 s on the k=4 fat-tree's soak): no link is judged on what
  was heard before it hears again. Only where two links share no switch: one link, or a
  star's, may well fail all at once. A connection is ``stuck`` when it carried no
  probe, neither the switch's own nor one it passed up, for ``hang_after / 2`` while
  the watcher sent its probes (once per silence), or could not send them for
  ``hang_after`` (backup): the watcher makes it again, and learns its role afresh.

A switch or link that was down is up again once it has answered (switch) or
carried probes both ways (link) since it went down. Verdicts never change
faster than the evidence: a busy switch whose probes wait in its queues is late
by milliseconds, far below ``detect_after``.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from ina.protocol.constants import ETHERTYPE_PROBE
from ina.spec.topology import Failures, Topology

#: Probe payload after the Ethernet header: magic, sender device id, sender port,
#: sequence number.
_PROBE = struct.Struct("!4sQHI")
_MAGIC = b"INAp"
_BROADCAST = b"\xff" * 6


@dataclass(frozen=True)
class Probe:
    device_id: int  # the sending switch
    port: int  # the port it was sent out of
    seq: int

    SEQ_MASK: ClassVar[int] = 0xFFFFFFFF  # the frame carries 32 bits of seq

    def frame(self, src_mac: bytes) -> bytes:
        return (_BROADCAST + src_mac + ETHERTYPE_PROBE.to_bytes(2, "big")
                + _PROBE.pack(_MAGIC, self.device_id, self.port, self.seq & self.SEQ_MASK))

    @classmethod
    def parse(cls, frame: bytes) -> Probe | None:
        """The probe in a packet-in frame, or None if it is not one of ours."""
        if len(frame) < 14 + _PROBE.size or frame[12:14] != ETHERTYPE_PROBE.to_bytes(2, "big"):
            return None
        magic, device_id, port, seq = _PROBE.unpack_from(frame, 14)
        return cls(device_id, port, seq) if magic == _MAGIC else None


@dataclass(frozen=True)
class LinkEnds:
    """A link between two switches: (switch, port) at each end."""

    a: str
    a_port: int
    b: str
    b_port: int

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset((self.a, self.b))


@dataclass
class _Heard:
    at: float  # last probe heard (or when watching began)
    sent: float = float("-inf")  # when the newest probe heard was sent
    seq: int | None = None  # its number
    egress_base: int | None = None  # its sender's port count read last before it came
    since_down: bool = False  # heard since the link was declared down


#: Send times kept per switch: a probe older than this many of its rounds is heard
#: with no send time (only a stall of minutes would keep one that long).
_SENT_KEPT = 1024
#: Readings of a port's egress count kept (at 10 a second, longer than hang_after).
_EGRESS_KEPT = 64


@dataclass
class Detector:
    topology: Topology
    detect_after: float
    now: float = 0.0  # when watching began
    hang_after: float = 3.0  # a connected switch that answers nothing this long hangs
    down: Failures = field(default_factory=Failures)
    _answered: dict[str, float] = field(default_factory=dict)
    _connected: dict[str, bool] = field(default_factory=dict)
    _lost_at: dict[str, float] = field(default_factory=dict)
    _went_down: dict[str, float] = field(default_factory=dict)
    _can_probe: dict[str, bool] = field(default_factory=dict)
    _probing_since: dict[str, float] = field(default_factory=dict)
    _heard: dict[tuple[str, int], _Heard] = field(default_factory=dict)  # by receiving end
    _links: list[LinkEnds] = field(default_factory=list)
    _by_device: dict[int, str] = field(default_factory=dict)
    _marks: dict[tuple[str, int], int] = field(default_factory=dict)  # last count read
    _marked_at: dict[tuple[str, int], float] = field(default_factory=dict)  # when it grew
    _read_again_at: float = float("-inf")  # no link judged on probes heard before this
    _sent_at: dict[str, dict[int, float]] = field(default_factory=dict)  # by seq
    _egress: dict[tuple[str, int], deque[tuple[float, int]]] = field(
        default_factory=dict)  # (when read, count) of a port's packets out
    _received_counts: dict[tuple[str, int], int] = field(default_factory=dict)  # last read
    _ingress_at: dict[tuple[str, int], float] = field(default_factory=dict)  # when it grew
    _disjoint: bool = False  # two links of the topology share no switch
    _again_at: dict[str, float] = field(default_factory=dict)  # connection made again
    _held_since: dict[str, float] = field(default_factory=dict)  # could not probe since
    _ends: dict[str, list[tuple[str, int]]] = field(
        default_factory=dict)  # the receiving ends (keys of _heard) of a switch's links

    def __post_init__(self) -> None:
        topo = self.topology
        self._by_device = {s.device_id: name for name, s in topo.switches.items()}
        for sw in sorted(topo.switches):
            self._answered[sw] = self.now
            self._connected[sw] = False
            self._lost_at[sw] = self.now
            self._can_probe[sw] = False
            self._probing_since[sw] = self.now
            for port, nb in topo.ports(sw).items():
                if nb.is_host or (nb.node, nb.remote_port) < (sw, port):
                    continue
                assert nb.remote_port is not None
                self._links.append(LinkEnds(sw, port, nb.node, nb.remote_port))
        for link in self._links:
            self._heard[(link.a, link.a_port)] = _Heard(self.now)
            self._heard[(link.b, link.b_port)] = _Heard(self.now)
            for sw in (link.a, link.b):
                self._ends.setdefault(sw, []).extend(
                    [(link.a, link.a_port), (link.b, link.b_port)])
        self._disjoint = any(not a.nodes & b.nodes for a in self._links for b in self._links)

    @property
    def links(self) -> list[LinkEnds]:
        return list(self._links)

    # --- evidence --------------------------------------------------------------------

    def switch_answered(self, switch: str, now: float) -> None:
        self._answered[switch] = now
        self._connected[switch] = True

    def switch_connected(self, switch: str, up: bool, now: float) -> None:
        """The controller's connection to ``switch`` was made (up) or lost."""
        if up:
            self._connected[switch] = True
        elif self._connected[switch]:
            self._connected[switch] = False
            self._lost_at[switch] = now

    def probing(self, switch: str, can: bool, now: float) -> None:
        """Whether the controller can send ``switch``'s probes (it is primary, and the
        switch took the last ones): the verdict on its links pauses while it cannot."""
        if can and not self._can_probe[switch]:
            self._probing_since[switch] = now
        elif not can and self._can_probe[switch]:
            self._held_since[switch] = now
        self._can_probe[switch] = can

    def probes_sent(self, switch: str, seq: int, now: float) -> None:
        """``switch``'s probes numbered ``seq`` go out of every port of it now."""
        sent = self._sent_at.setdefault(switch, {})
        seq &= Probe.SEQ_MASK
        sent[seq] = now
        sent.pop((seq - _SENT_KEPT) & Probe.SEQ_MASK, None)

    def probe_received(self, switch: str, in_port: int, probe: Probe, now: float) -> bool:
        """A probe passed up by ``switch`` from ``in_port``; False if it does not fit
        the topology (a stray, or a miswired lab). One whose sending was not recorded
        (another watcher's, or one before this one's restart, that waited in a
        switch) is heard, with no send time."""
        sender = self._by_device.get(probe.device_id)
        nb = self.topology.ports(switch).get(in_port) if switch in self.topology.switches \
            else None
        if sender is None or nb is None or nb.node != sender or nb.remote_port != probe.port:
            return False
        heard = self._heard[(switch, in_port)]
        heard.at = now
        sent = self._sent_at.get(sender, {}).get(probe.seq)
        if sent is not None and sent >= heard.sent:
            heard.sent, heard.seq = sent, probe.seq
            readings = self._egress.get((sender, probe.port))
            heard.egress_base = readings[-1][1] if readings else None
        heard.since_down = True
        return True

    def reading_again(self, now: float) -> None:
        """The controller read no probe for a while and reads them again from ``now``
        (its loop ran a repair, which opens every switch's connection and writes its
        state): judge no link on probes older than ``now``. Probes that waited to be
        read meanwhile are read one switch after another, and a link whose turn had
        not come looked dead beside the others (make soak's false verdicts at the
        instant a repair returned)."""
        self._read_again_at = now

    def port_marks(self, switch: str, marks: Mapping[int, int], now: float) -> None:
        """``switch``'s ports' counts of packets marked as congested so far (the
        port_marks counter), by port: a count that grew since the last reading
        says the port is congested now."""
        _note_growth(switch, marks, now, self._marks, self._marked_at)

    def port_sent(self, switch: str, counts: Mapping[int, int], now: float) -> None:
        """``switch``'s ports' counts of packets that left them so far (the
        port_packets counter, counted in egress), by port. (A count that went back,
        as after a restart, starts the port's readings again.)"""
        for port, count in counts.items():
            readings = self._egress.setdefault((switch, port), deque(maxlen=_EGRESS_KEPT))
            if readings and count < readings[-1][1]:
                readings.clear()
            readings.append((now, count))

    def port_received(self, switch: str, counts: Mapping[int, int], now: float) -> None:
        """``switch``'s ports' counts of packets that came in by them so far (the
        port_received counter), by port: a count that grew since the last reading
        says the link delivers."""
        _note_growth(switch, counts, now, self._received_counts, self._ingress_at)

    def delivers(self, switch: str, port: int, now: float) -> bool:
        """Whether packets came in by ``switch``'s ``port`` in the last two readings
        (detect_after / 2): the link works, and a probe late on it waits behind them
        (a backlog the switch reads)."""
        return now - self._ingress_at.get((switch, port), float("-inf")) <= self.detect_after / 2

    def _egress_stalled(self, sending_port: tuple[str, int], heard: _Heard, now: float
                       ) -> bool:
        """Whether the sending port's egress had let out fewer packets, by a reading
        at least detect_after / 4 old, than the probes the watcher had sent out of it
        by then since the last one heard (one less, for the reading's lag): the rest
        wait in the switch, not on the link. True while too few were sent to tell;
        False without readings to tell by."""
        readings = self._egress.get(sending_port)
        sent_at = self._sent_at.get(sending_port[0], {})
        if heard.seq is None or heard.egress_base is None or not readings:
            return False
        then = now - self.detect_after / 4  # what left since is on its way
        read_at, left = next(((at, count) for at, count in reversed(readings) if at <= then),
                             (None, None))
        if read_at is None or left is None or left < heard.egress_base:
            return False
        expected = 0  # sent since the probe heard, by that reading
        seq = heard.seq + 1
        while (at := sent_at.get(seq & Probe.SEQ_MASK)) is not None and at <= read_at:
            expected += 1
            seq += 1
        # The count since may hold the probe heard, and miss the last one sent: a
        # stalled port shows at most 1, a moving one at least expected - 1.
        return expected < 3 or left - heard.egress_base < expected - 1

    def congested(self, switch: str, port: int, since: float) -> bool:
        """Whether ``switch`` marked packets out of ``port`` after ``since``."""
        return self._marked_at.get((switch, port), float("-inf")) > since

    # --- verdict -----------------------------------------------------------------------

    def verdict(self, now: float) -> Failures:
        """What is down now; ``down`` keeps it."""
        switches = set()
        for sw, answered in self._answered.items():
            if sw in self.down.switches:
                if answered <= self._went_down.get(sw, float("inf")):
                    switches.add(sw)  # nothing answered since it went down
            elif (not self._connected[sw] and now - self._lost_at[sw] > self.detect_after
                  or now - answered > self.hang_after):
                switches.add(sw)
        passed_up, sent = self._newest()
        self._hear_again(now)
        links = set()
        for link in self._links:
            if link.a in switches or link.b in switches:
                continue  # down with its switch
            ends = [self._heard[(link.a, link.a_port)], self._heard[(link.b, link.b_port)]]
            if link.nodes in self.down.links:
                if not all(h.since_down for h in ends):
                    links.add(link.nodes)
                continue
            # Each end hears its neighbour's probes; judge only while both send them.
            judged_since = max(self._probing_since[link.a], self._probing_since[link.b],
                               self._read_again_at)
            if not (self._can_probe[link.a] and self._can_probe[link.b]):
                continue
            late_ab = self._late(ends[1], judged_since, passed_up[link.b], sent[link.a], now,
                                 (link.a, link.a_port), (link.b, link.b_port))
            late_ba = self._late(ends[0], judged_since, passed_up[link.a], sent[link.b], now,
                                 (link.b, link.b_port), (link.a, link.a_port))
            if late_ab or late_ba:
                links.add(link.nodes)
        for sw in switches - self.down.switches:
            self._went_down[sw] = now
        for nodes in links - self.down.links:
            for end in (e for e in self._links if e.nodes == nodes):
                self._heard[(end.a, end.a_port)].since_down = False
                self._heard[(end.b, end.b_port)].since_down = False
        self.down = Failures(frozenset(switches), frozenset(links))
        return self.down

    def _newest(self) -> tuple[dict[str, _Heard], dict[str, _Heard]]:
        """The newest probe (when heard, when sent) each switch passed up, on any port:
        a switch too busy to pass up probes at once is late on every port, a dead link
        only on its own. And the newest of each switch's probes heard anywhere: a
        switch too busy to send its probes out at once (packet-outs wait in its
        queues, or in our connection to it) is late on every link, a dead link only
        on its own."""
        passed_up: dict[str, _Heard] = {}
        sent: dict[str, _Heard] = {}
        for link in self._links:
            for receiver, port, sender in ((link.a, link.a_port, link.b),
                                           (link.b, link.b_port, link.a)):
                heard = self._heard[(receiver, port)]
                for newest in (passed_up.setdefault(receiver, _Heard(heard.at, heard.sent)),
                               sent.setdefault(sender, _Heard(heard.at, heard.sent))):
                    newest.at = max(newest.at, heard.at)
                    newest.sent = max(newest.sent, heard.sent)
        return passed_up, sent

    def evidence(self, nodes: frozenset[str], now: float) -> str:
        """What the detector knew of the link between ``nodes`` at ``now`` (for the log
        of its verdict), as ages in seconds: since when it is judged, and per
        direction when its last probe was heard and sent, when the receiver's newest
        probe passed up and the sender's newest heard anywhere were sent, when the
        sending port last marked, whether its egress stalled, and when the receiving
        port last counted a packet in."""
        never = float("-inf")

        def age(t: float) -> str:
            return f"{now - t:.2f}" if t > never else "never"

        parts = []
        passed_up, sent = self._newest()
        for link in (e for e in self._links if e.nodes == nodes):
            since = max(self._probing_since[link.a], self._probing_since[link.b],
                        self._read_again_at)
            parts.append(f"judged since {age(since)}")
            for sender, s_port, receiver, r_port in ((link.a, link.a_port, link.b, link.b_port),
                                                     (link.b, link.b_port, link.a, link.a_port)):
                heard = self._heard[(receiver, r_port)]
                parts.append(
                    f"{sender}:{s_port}->{receiver}:{r_port} heard {age(heard.at)} sent "
                    f"{age(heard.sent)}, {receiver}'s newest passed up sent "
                    f"{age(passed_up[receiver].sent)}, {sender}'s newest heard sent "
                    f"{age(sent[sender].sent)}, marked "
                    f"{age(self._marked_at.get((sender, s_port), never))}, egress stalled "
                    f"{self._egress_stalled((sender, s_port), heard, now)}, delivered "
                    f"{age(self._ingress_at.get((receiver, r_port), never))}")
        return "; ".join(parts)

    def stuck(self, switch: str, now: float) -> str | None:
        """Why the watcher's connection to ``switch`` should be made again, if it
        should: BMv2's P4Runtime server lets a writer take the primary role and give
        it back without the watcher always hearing of it (make soak on the k=4
        fat-tree: connections that passed nothing for 55 s after a repair's writer
        had come and gone, and one still backup 17 s after), and a new connection
        learns its role afresh.

        - "silent": the watcher could send ``switch``'s probes for hang_after / 2 and
          heard none of them anywhere, nor any probe that ``switch`` passed up, since
          it last heard one or made the connection again (once per silence: a switch
          whose every link died stays silent, and its links are judged as any
          other's);
        - "backup": it could not send them (another client primary, or the switch
          too busy to take them) for hang_after since it last could or made the
          connection again."""
        again = self._again_at.get(switch, float("-inf"))
        if not self._can_probe.get(switch, False):
            held = max(self._held_since.get(switch, self.now), again)
            return "backup" if now - held > self.hang_after else None
        heard = max((self._heard[end].at for end in self._ends.get(switch, ())),
                    default=float("-inf"))
        if again >= heard:
            return None
        quiet = now - max(heard, self._probing_since[switch])
        return "silent" if quiet > self.hang_after / 2 else None

    def connecting_again(self, switch: str, now: float) -> None:
        """The watcher makes ``switch``'s connection again (it was ``stuck``)."""
        self._again_at[switch] = now

    def _hear_again(self, now: float) -> None:
        """While the watcher hears no probe on any link for detect_after, it is deaf,
        not the fabric cut: judge no link on what was heard before it hears again
        (a writer took its connections' primary role, or gave it back, without them
        hearing of it, so that its probes went nowhere; or their streams stalled:
        ``stuck``). Only where two links share no switch: a single link, or a
        star's, may well all fail at once."""
        if not self._disjoint:
            return
        newest = max(h.at for h in self._heard.values())
        if now - newest > self.detect_after:
            self._read_again_at = now

    def _late(self, heard: _Heard, since: float, passed_up: _Heard, sent: _Heard,
              now: float, sending_port: tuple[str, int], receiving_port: tuple[str, int]
              ) -> bool:
        """No probe on this direction of a link for detect_after, while its receiver
        passed up probes from its other ports and its sender's probes crossed its other
        links, heard detect_after later and sent detect_after later, its receiver
        passed up a probe sent within the last detect_after (it keeps up), and its
        sending port was not congested (or for hang_after, whatever the others do and
        whatever the port marked). Heard later alone is no evidence: a switch that stalled
        passes up its queued probes one port after another. Sent later alone is none
        either: the last probe heard on this port may have waited in a queue."""
        last = max(heard.at, since)
        if now - last <= self.detect_after:
            return False
        if now - last > self.hang_after:
            return True
        if self.congested(*sending_port, last - self.detect_after):
            return False  # it waits in a congested queue
        if self._egress_stalled(sending_port, heard, now):
            return False  # it waits in its sender, whose egress there stalled
        if self.delivers(*receiving_port, now):
            return False  # the link delivers: it waits in its receiver's backlog
        if now - passed_up.sent > self.detect_after:
            return False  # its receiver lags on every port: it waits in its backlog
        last_sent = max(heard.sent, since)
        return all(later.at - last > self.detect_after
                   and later.sent - last_sent > self.detect_after for later in (passed_up, sent))


def _note_growth(switch: str, counts: Mapping[int, int], now: float,
                 last: dict[tuple[str, int], int], grew_at: dict[tuple[str, int], float]
                 ) -> None:
    """Keep each of ``switch``'s ports' count in ``last``, and in ``grew_at`` when it
    last grew. (A first reading, or a count that went back, as after a restart, is
    only a new baseline.)"""
    for port, count in counts.items():
        key = (switch, port)
        before = last.get(key)
        if before is not None and count > before:
            grew_at[key] = now
        last[key] = count
