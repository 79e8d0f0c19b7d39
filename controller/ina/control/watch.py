"""A long-running watcher: detects failed switches and links by itself.

Per switch, one long-lived P4Runtime connection with a low election id (1 by
default), so that one-shot clients (``inactl`` and the controller's repair, with
finsy's default id) become primary while they run and write as usual. Over it:

- **liveness**: every ``interval`` a cheap read (one counter cell, and the
  congestion mark counters of the ports the probes leave by: a probe late on a
  congested port is congestion, see ``Detector.port_marks``); a switch that
  answered none for ``detect_after`` seconds is down. The read needs the
  program: a switch that came back empty is up once its pipeline is installed
  again, which this connection does (``p4blob``) as soon as it is primary there.
- **link probes**: every ``interval``, while primary, a probe packet-out out of
  every port that leads to another switch; the neighbour passes it up as a
  packet-in, which goes to its primary client: this one, or a one-shot client
  for the moment it is connected (and then probing pauses on that switch's links,
  see ``Detector.probing``).

The evidence goes to ``ina.control.detect.Detector``; each change of its verdict
is logged, written as JSON lines to an events file if asked (for a benchmark's
detection times), and handed to ``on_change(failures)``. Calls of ``on_change``
never overlap, and a verdict that changes again while one runs is handed on as
the latest state once it returns (a repair always works from the newest
verdict, and detection never waits for it).

The connections are this module's own loop around finsy's one-shot
``Switch`` context, not ``Switch.run()``: run() waits up to 10 s after a
connection that failed quickly and its gRPC channel backs off up to 15 s, while a
switch that comes back should be seen within about a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import finsy as fy
from finsy.grpcutil import GRPCStatusCode
from finsy.p4arbitrator import Arbitrator
from finsy.p4client import P4RpcStatus
from finsy.proto import U128, p4r

from ina.control import p4names as n
from ina.control.access import Access
from ina.control.detect import Detector, Probe
from ina.control.p4runtime import tls_credentials
from ina.errors import ConnectionLost, UsageError
from ina.protocol.constants import ETHERTYPE_PROBE
from ina.protocol.frames import mac_bytes
from ina.spec.topology import Failures, SwitchSpec, Topology

LOG = logging.getLogger(__name__)

OnChange = Callable[[Failures], Awaitable[None]]

#: The counter cell read as a liveness check: any cell of a counter the program has.
_LIVENESS_COUNTER = n.INGRESS_SWITCH_STATS


def _not_watch_noise(record: logging.LogRecord) -> bool:
    # A backup client does not get packet-ins; the few that arrive between a role
    # change and our reader are dropped on purpose. simple_switch_grpc hands the
    # primary role back with a smaller election id, which finsy warns about.
    msg = record.getMessage()
    return not ("packet ignored" in msg or "election_id decreased" in msg)


logging.getLogger("finsy").addFilter(_not_watch_noise)


class _OwnElectionId(Arbitrator):
    """finsy's arbitration, except that the watcher keeps its own (low) election id.

    When the primary leaves, simple_switch_grpc tells the next backup "you are
    primary" with that backup's own election id, lower than the last primary's.
    finsy 0.30 takes that for "no primary" and asks to be primary with the *old*
    primary's id: the watcher would then hold id 10 for good, and the next one-shot
    client (id 10 too) would be refused it and stay backup ("Not primary")."""

    async def update(self, switch: fy.Switch, msg: p4r.MasterArbitrationUpdate) -> None:
        status = P4RpcStatus.from_status(msg.status).code
        new_primary = U128.decode(msg.election_id)
        if status == GRPCStatusCode.OK and new_primary == self.election_id:
            self.primary_id = new_primary
            if not self.is_primary:
                self.is_primary = True
                switch._become_primary()  # type: ignore[no-untyped-call]  # noqa: SLF001 (as finsy does)
            return
        await super().update(switch, msg)

    async def _request_primary(self, switch: fy.Switch) -> None:
        self.election_id = self.initial_election_id
        await self._send(switch)


@dataclass(frozen=True)
class WatchOptions:
    interval: float = 0.1  # seconds between probes (and liveness reads)
    detect_after: float = 0.4  # seconds without a connection, or a link without probes
    hang_after: float = 3.0  # seconds a connected switch may answer nothing (busy, not dead)
    election_id: int = 1  # below one-shot clients' (finsy's default: 10)
    reconnect: float = 0.5  # seconds between attempts to reach a switch that is down
    startup: float = 5.0  # seconds every switch has to answer first, after run() starts
    connect_timeout: float = 5.0  # seconds a connection may take (handshake, pipeline)
    retry_after: float = 0.5  # seconds before a failed on_change (repair) is made again
    retry_max: float = 10.0  # the longest wait between attempts (doubling from retry_after)
    events: Path | None = None  # JSON lines, one per verdict change and failed repair

    def __post_init__(self) -> None:
        if not 0 < self.interval < self.detect_after <= self.hang_after:
            raise UsageError(f"need 0 < interval ({self.interval:g}) < detect_after "
                             f"({self.detect_after:g}) <= hang_after ({self.hang_after:g})")
        if self.election_id < 1:
            raise UsageError("the election id must be at least 1")
        if not 0 < self.retry_after <= self.retry_max:
            raise UsageError(f"need 0 < retry_after ({self.retry_after:g}) <= retry_max "
                             f"({self.retry_max:g})")
        if self.connect_timeout <= 0:
            raise UsageError("the connect timeout must be positive")

    def retry_delay(self, failed: int) -> float:
        """Seconds to wait after the ``failed``-th failed attempt in a row."""
        return min(self.retry_max, self.retry_after * 2.0 ** (failed - 1))


def _cancelled_by_us() -> bool:
    """Whether the running task is being cancelled (by its owner or a timeout), as
    opposed to receiving a CancelledError from below: grpc raises CancelledError in
    every call in flight on a channel that closes, and finsy cancels its connection
    task when another of its tasks fails (its pipeline step on a switch that just
    started, say). Taken for our own cancellation, either would end a loop of the
    watcher for good (asyncio.TaskGroup ignores a child that ends cancelled), and
    with it a switch's connection or liveness: down forever."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


@contextlib.asynccontextmanager
async def _calls_below() -> AsyncIterator[None]:
    """Turn a CancelledError that is not ours into ConnectionLost."""
    try:
        yield
    except asyncio.CancelledError:
        if _cancelled_by_us():
            raise
        raise ConnectionLost("cancelled under us: the connection closed") from None


class ActiveClock:
    """A clock that counts a stall of its caller as at most ``max_step`` seconds.

    The watcher's own event loop can stall (a machine whose CPUs the switches and
    the traffic saturate): answers and probes that arrived meanwhile could not be
    read, and must not turn into verdicts. Called often (every interval, and on
    every probe), it is the monotonic clock."""

    def __init__(self, clock: Callable[[], float], max_step: float):
        self._clock = clock
        self.max_step = max_step
        self._real = self._active = clock()

    def __call__(self) -> float:
        real = self._clock()
        self._active += min(max(0.0, real - self._real), self.max_step)
        self._real = real
        return self._active


@dataclass(frozen=True)
class Event:
    """One verdict change: ``kind`` is switch_down, switch_up, link_down or link_up;
    ``what`` the switch, or the link's two nodes in order."""

    kind: str
    what: tuple[str, ...]
    at: float  # wall clock (time.time())
    monotonic: float  # the detector's clock

    def to_json(self) -> str:
        record: dict[str, Any] = {"time": round(self.at, 6), "monotonic": round(self.monotonic, 6),
                                  "event": self.kind}
        if self.kind.startswith("switch"):
            record["switch"] = self.what[0]
        else:
            record["link"] = list(self.what)
        return json.dumps(record)

    def describe(self) -> str:
        what = self.what[0] if self.kind.startswith("switch") else "-".join(self.what)
        kind, state = self.kind.split("_")
        return f"{kind} {what} {state}"


def events_between(old: Failures, new: Failures, at: float, monotonic: float) -> list[Event]:
    """What changed from ``old`` to ``new``: switches first, then links, each sorted,
    downs before ups."""
    events = [Event("switch_down", (s,), at, monotonic)
              for s in sorted(new.switches - old.switches)]
    events += [Event("switch_up", (s,), at, monotonic)
               for s in sorted(old.switches - new.switches)]
    events += [Event("link_down", tuple(sorted(lk)), at, monotonic)
               for lk in sorted(new.links - old.links, key=sorted)]
    events += [Event("link_up", tuple(sorted(lk)), at, monotonic)
               for lk in sorted(old.links - new.links, key=sorted)]
    return events


@dataclass
class RepairAttempts:
    """What ``on_change`` (the repair) did so far: calls made, failed, and made again
    after a failure (``retried``, a subset of ``made``)."""

    made: int = 0
    failed: int = 0
    retried: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"made": self.made, "failed": self.failed, "retried": self.retried}


class Notifier:
    """Hands verdicts to ``on_change`` one call at a time, always the newest: a
    verdict posted while a call runs replaces any other one still waiting. A call
    that fails is made again, with the same verdict, after ``retry_delay(n)``
    seconds (n: failures in a row), until one succeeds or a newer verdict arrives
    (which is then handed on at once): a repair that failed is not left failed
    while the fault it was for persists."""

    def __init__(self, on_change: OnChange, retry_delay: Callable[[int], float] | None = None,
                 on_failure: Callable[[Failures, int, float, BaseException], None] | None = None):
        self._on_change = on_change
        self._retry_delay = retry_delay or WatchOptions().retry_delay
        self._on_failure = on_failure
        self._pending: Failures | None = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.attempts = RepairAttempts()

    def post(self, failures: Failures) -> None:
        self._pending = failures
        self._idle.clear()
        self._wake.set()

    @property
    def idle(self) -> bool:
        """Nothing waiting to be handed on, running, or waiting to be made again."""
        return self._idle.is_set()

    async def drained(self) -> None:
        """Wait until every posted verdict has been handed on (successfully, or
        superseded by a newer one)."""
        await self._idle.wait()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            failures, self._pending = self._pending, None
            if failures is not None:
                await self._hand_on(failures)
            if self._pending is None:
                self._idle.set()

    async def _hand_on(self, failures: Failures) -> None:
        failed = 0
        while True:
            self.attempts.made += 1
            if failed:
                self.attempts.retried += 1
            try:
                await self._on_change(failures)
            except asyncio.CancelledError:
                if _cancelled_by_us():
                    raise
                exc: BaseException = ConnectionLost("on_change was cancelled under us")
            except Exception as e:  # noqa: BLE001 (a repair that failed must not stop detection)
                exc = e
            else:
                if failed:
                    LOG.warning("on_change(%s) succeeded at attempt %d", failures.describe(),
                                failed + 1)
                return
            failed += 1
            self.attempts.failed += 1
            delay = self._retry_delay(failed)
            LOG.warning("on_change(%s) failed (attempt %d): %r; again in %gs unless the "
                        "verdict changes", failures.describe(), failed, exc, delay,
                        exc_info=exc if failed == 1 else None)
            if self._on_failure is not None:
                self._on_failure(failures, failed, delay, exc)
            if self._pending is not None:
                return  # a newer verdict: hand that on instead
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            if self._pending is not None:
                return  # the newer verdict (its wake-up is still set)


#: Makes a switch's client: finsy's Switch (tests give a fake).
SwitchFactory = Callable[[str, str, fy.SwitchOptions], fy.Switch]


class _Link:
    """One switch's connection: finsy's Switch, and what the watcher knows of it."""

    def __init__(self, spec: SwitchSpec, options: fy.SwitchOptions,
                 probe_ports: list[int], factory: SwitchFactory):
        self.spec = spec
        self.switch = factory(spec.name, spec.grpc, options)
        self.switch._arbitrator = _OwnElectionId(  # noqa: SLF001 (see _OwnElectionId)
            options.initial_election_id, options.role_name, options.role_config)
        self.probe_ports = probe_ports
        self.mac = mac_bytes(spec.mac)  # the probes' source
        self.connected = False
        self.ready = False  # primary or backup, the pipeline as it will be
        # Set to end the connection and make it again at once (it is stuck); when.
        self.again = asyncio.Event()
        self.again_at = float("-inf")
        # Probes' numbers start anywhere: a watcher started again must not take the
        # last one's probes, still queued in a busy switch, for its own.
        self.seq = random.getrandbits(31)

    @property
    def can_probe(self) -> bool:
        return self.connected and self.ready and self.switch.is_primary


@dataclass
class Watcher:
    """Watch every switch and link between switches of ``topology`` until cancelled
    (``run``); verdict changes go to ``on_change``. ``access``: how to reach the
    switches (its lock is for writers: the watcher's own connections never write
    entries; ``on_change`` writes through one-shot connections)."""

    topology: Topology
    p4info: Path
    p4blob: Path | None
    on_change: OnChange
    options: WatchOptions = field(default_factory=WatchOptions)
    access: Access = field(kw_only=True)
    clock: Callable[[], float] = time.monotonic
    #: Every verdict change so far (also logged, and written to options.events).
    events: list[Event] = field(default_factory=list)
    switch_factory: SwitchFactory = field(default=fy.Switch, kw_only=True)

    def __post_init__(self) -> None:
        self._now = ActiveClock(self.clock, 2 * self.options.interval)
        self.detector = Detector(self.topology, self.options.detect_after, now=self._now(),
                                 hang_after=self.options.hang_after)
        self._links: dict[str, _Link] = {}
        for name, spec in sorted(self.topology.switches.items()):
            ports = sorted(p for p, nb in self.topology.ports(name).items() if not nb.is_host)
            tls = self.access.tls
            opts = fy.SwitchOptions(p4info=self.p4info, p4blob=self.p4blob,
                                    device_id=spec.device_id,
                                    initial_election_id=self.options.election_id,
                                    channel_credentials=None if tls is None
                                    else tls_credentials(tls, name))
            self._links[name] = _Link(spec, opts, ports, self.switch_factory)
        #: Probes heard, by receiving (switch, port): what a test or a status shows.
        self.heard: dict[tuple[str, int], int] = {}
        self._notifier = Notifier(self._repair, self.options.retry_delay,
                                  self._repair_failed)
        self._events_file: IO[str] | None = None

    @property
    def repairs(self) -> RepairAttempts:
        """``on_change`` calls so far: made, failed, made again after a failure."""
        return self._notifier.attempts

    @property
    def repairing(self) -> bool:
        """Whether an ``on_change`` call is running, waiting, or waiting to be made
        again after it failed."""
        return not self._notifier.idle

    @property
    def failures(self) -> Failures:
        """The current verdict."""
        return self.detector.down

    def primary(self, switch: str) -> bool:
        """Whether this watcher is the primary client of ``switch`` now."""
        return self._links[switch].can_probe

    async def run(self) -> None:
        # Connecting takes a moment: no verdict before every switch had time to answer
        # (a switch that is down from the start is reported after startup + detect_after).
        self.detector = Detector(self.topology, self.options.detect_after,
                                 now=self._now() + self.options.startup,
                                 hang_after=self.options.hang_after)
        if self.options.events is not None:
            self.options.events.parent.mkdir(parents=True, exist_ok=True)
            self._events_file = self.options.events.open("a", buffering=1)
        LOG.info("watching %d switches and %d links: probes every %gs, verdict after %gs",
                 len(self._links), len(self.detector.links), self.options.interval,
                 self.options.detect_after)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._notifier.run(), name="watch:notify")
                for name in self._links:
                    tg.create_task(self._connection(name), name=f"watch:{name}")
                    tg.create_task(self._liveness(name), name=f"watch:{name}:liveness")
                tg.create_task(self._tick(), name="watch:tick")
        finally:
            if self._events_file is not None:
                self._events_file.close()
                self._events_file = None

    # --- connections ---------------------------------------------------------------------

    async def _connection(self, name: str) -> None:
        """Keep a connection to the switch, again and again."""
        link = self._links[name]
        sw = link.switch
        was_up = True
        while True:
            lost = False
            try:
                async with _calls_below():
                    await self._connected(link)
                was_up = True
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 (finsy raises many kinds on connect)
                if was_up:
                    LOG.info("%s: no P4Runtime connection (%s); trying every %gs", name,
                             exc.__class__.__name__, self.options.reconnect)
                was_up = False
            finally:
                lost = link.connected
                link.connected = link.ready = False
                self.detector.probing(name, False, self._now())
                if link.again.is_set():  # ended by us: the switch is not lost (yet)
                    link.again.clear()
                elif self.clock() - link.again_at > self.options.hang_after:
                    self.detector.switch_connected(name, False, self._now())
                # else an attempt to make it again failed (BMv2's server answered a
                # handshake "Internal error from Core" in the soak): tried again; a
                # switch that died meanwhile is down once it answers nothing for
                # hang_after.
            if sw.is_up:  # finsy's exit closes the channel: never here (an assert would
                LOG.error("%s: still up after its connection ended", name)  # stop all)
            if not lost:
                # A connection that just ended is tried again at once: a live switch
                # takes it back within detect_after, a dead one refuses it.
                await asyncio.sleep(self.options.reconnect)

    async def _connected(self, link: _Link) -> None:
        """One connection, from handshake to its end."""
        sw = link.switch
        name = link.spec.name
        down = asyncio.get_running_loop().create_future()

        def on_down(*_: Any) -> None:
            if not down.done():
                down.set_result(None)

        def on_ready(*_: Any) -> None:
            link.ready = True

        def on_role(*_: Any) -> None:
            # Until the pipeline step that follows a role change is done.
            link.ready = False

        sw.ee.on(fy.SwitchEvent.CHANNEL_DOWN, on_down)
        sw.ee.on(fy.SwitchEvent.CHANNEL_READY, on_ready)
        sw.ee.on(fy.SwitchEvent.BECOME_PRIMARY, on_role)
        sw.ee.on(fy.SwitchEvent.BECOME_BACKUP, on_role)
        try:
            async with contextlib.AsyncExitStack() as stack:
                # Connected, arbitrated, pipeline installed if primary: ready. finsy waits
                # for the arbitration's answer and the pipeline step without a bound.
                async with asyncio.timeout(self.options.connect_timeout):
                    await stack.enter_async_context(sw)
                link.connected = link.ready = True
                self.detector.switch_connected(name, True, self._now())
                LOG.info("%s: connected (%s)", name,
                         "primary" if sw.is_primary else f"backup of {sw.primary_id}")
                reader = asyncio.create_task(self._read_probes(link),
                                             name=f"watch:{name}:packets")
                again = asyncio.create_task(link.again.wait())
                try:
                    if sw.is_up:
                        await asyncio.wait((down, again), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    again.cancel()
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reader
                if not link.again.is_set():
                    LOG.info("%s: P4Runtime connection lost", name)
        finally:
            sw.ee.remove_listener(fy.SwitchEvent.CHANNEL_DOWN, on_down)
            sw.ee.remove_listener(fy.SwitchEvent.CHANNEL_READY, on_ready)
            sw.ee.remove_listener(fy.SwitchEvent.BECOME_PRIMARY, on_role)
            sw.ee.remove_listener(fy.SwitchEvent.BECOME_BACKUP, on_role)

    async def _read_probes(self, link: _Link) -> None:
        name = link.spec.name
        async for packet in link.switch.read_packets(queue_size=1024,
                                                     eth_types={ETHERTYPE_PROBE}):
            probe = Probe.parse(packet.payload)
            in_port = packet.metadata.get("ingress_port")
            if probe is None or not isinstance(in_port, int):
                continue
            if self.detector.probe_received(name, in_port, probe, self._now()):
                self.heard[(name, in_port)] = self.heard.get((name, in_port), 0) + 1
            else:
                LOG.debug("%s: stray probe on port %d: %s", name, in_port, probe)

    async def _liveness(self, name: str) -> None:
        """A cheap read every interval. A busy switch answers late: the read waits up to
        hang_after (a shorter bound would turn load into a hang that never clears,
        each answer arriving after its read was given up)."""
        link = self._links[name]
        cells = [fy.P4CounterEntry(_LIVENESS_COUNTER, index=0)]
        cells += [fy.P4CounterEntry(counter, index=port)
                  for counter in n.PORT_COUNTERS for port in link.probe_ports]
        while True:
            started = self.clock()
            if link.connected:
                try:
                    counts: dict[str, dict[int, int]] = {c: {} for c in n.PORT_COUNTERS}
                    async with _calls_below(), asyncio.timeout(self.options.hang_after):
                        async for c in link.switch.read(cells):  # type: ignore[attr-defined]
                            # (finsy names a counter by its P4Info alias)
                            counter = link.switch.p4info.counters[c.counter_id].name
                            if counter in counts and c.index is not None:
                                counts[counter][c.index] = c.packet_count
                    now = self._now()
                    self.detector.switch_answered(name, now)
                    self.detector.port_marks(name, counts[n.PORT_MARKS], now)
                    self.detector.port_sent(name, counts[n.PORT_PACKETS], now)
                    self.detector.port_received(name, counts[n.PORT_RECEIVED], now)
                except (TimeoutError, fy.P4ClientError, AssertionError, ConnectionLost) as exc:
                    # AssertionError, ConnectionLost: the connection ended under the read.
                    LOG.debug("%s: liveness read failed: %r", name, exc)
            await asyncio.sleep(max(0.0, started + self.options.interval - self.clock()))

    # --- probes and verdicts -------------------------------------------------------------

    async def _tick(self) -> None:
        while True:
            started = self.clock()
            await asyncio.gather(*(self._probe(link) for link in self._links.values()))
            self._judge()
            self._connect_stuck_again()
            await asyncio.sleep(max(0.0, started + self.options.interval - self.clock()))

    async def _probe(self, link: _Link) -> None:
        name = link.spec.name
        can = link.can_probe
        self.detector.probing(name, can, self._now())
        if not can:
            return
        link.seq += 1
        self.detector.probes_sent(name, link.seq, self._now())
        packets = [fy.P4PacketOut(Probe(link.spec.device_id, port, link.seq).frame(link.mac),
                                  egress_port=port, pad=0)
                   for port in link.probe_ports]
        try:
            async with _calls_below(), asyncio.timeout(self.options.detect_after):
                await link.switch.write(packets)
        except (TimeoutError, fy.P4ClientError, AssertionError, ConnectionLost) as exc:
            # Not taken at once (a switch too busy to answer): its links are judged
            # again from the next probes it takes.
            LOG.debug("%s: probes not sent: %r", name, exc)
            self.detector.probing(name, False, self._now())

    def _connect_stuck_again(self) -> None:
        """Make again every connection that carried no probe while the watcher could
        send its switch's probes, or that could not send them for long
        (Detector.stuck): the switch may have taken a writer for its primary and
        given the role back without the watcher hearing of it. Seen on the k=4
        fat-tree's soak: connections that passed nothing for 55 s after a repair's
        writer had come and gone, the watcher blind meanwhile (first real failures
        missed, then every link of theirs reported down), and one backup for good."""
        now = self._now()
        for name, link in self._links.items():
            if not link.connected or link.again.is_set():
                continue
            why = self.detector.stuck(name, now)
            if why is not None:
                # Backup for long is also what another primary controller leaves it.
                LOG.log(logging.WARNING if why == "silent" else logging.INFO,
                        "%s: its connection is %s: connecting again", name,
                        "silent" if why == "silent" else "backup for long")
                self.detector.connecting_again(name, now)
                link.again_at = self.clock()
                link.again.set()

    def _judge(self) -> None:
        old = self.detector.down
        now = self._now()
        new = self.detector.verdict(now)
        if new == old:
            return
        for nodes in new.links - old.links:
            LOG.info("link %s late: %s", "-".join(sorted(nodes)),
                     self.detector.evidence(nodes, now))
        for event in events_between(old, new, time.time(), self.clock()):
            self.events.append(event)
            LOG.warning("detected: %s", event.describe())
            if self._events_file is not None:
                self._events_file.write(event.to_json() + "\n")
        self._notifier.post(new)

    async def _repair(self, failures: Failures) -> None:
        """``on_change``, after which probes are read again: links are judged only on
        the probes read since (Detector.reading_again)."""
        try:
            await self.on_change(failures)
        finally:
            self.detector.reading_again(self._now())

    def _repair_failed(self, failures: Failures, attempt: int, delay: float,
                       exc: BaseException) -> None:
        if self._events_file is not None:
            self._events_file.write(json.dumps({
                "time": round(time.time(), 6), "monotonic": round(self.clock(), 6),
                "event": "repair_failed", "down": failures.describe(), "attempt": attempt,
                "retry_in": delay, "error": repr(exc)}) + "\n")


async def watch(topology: Topology, p4info: Path, p4blob: Path | None, on_change: OnChange,
                options: WatchOptions | None = None, *, access: Access) -> None:
    """Watch until cancelled."""
    await Watcher(topology, p4info, p4blob, on_change, options or WatchOptions(),
                  access=access).run()
