"""The watcher's connection and liveness loops against a scripted stand-in for
finsy's Switch (no gRPC): whatever finsy and grpc throw at them, they keep a
switch's connection and its liveness checks going, so that a switch that answers
again is seen again."""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import finsy as fy
import pyee

from ina.control import p4names as n
from ina.control.access import Access
from ina.control.watch import Watcher, WatchOptions
from ina.spec.topology import Failures, Topology

from inatest import ROOT

TOPO = Topology.load(ROOT / "topologies" / "leaf-spine-2x4.yaml")
FAST = WatchOptions(interval=0.02, detect_after=0.1, hang_after=0.5, reconnect=0.02,
                    connect_timeout=0.2, startup=0.0)


class ScriptedSwitch:
    """What the watcher uses of finsy's Switch. Each connection attempt and each read
    takes the next step of its script ("ok" once the script is used up)."""

    def __init__(self, name: str, address: str, options: fy.SwitchOptions):
        self.name = name
        self.ee = pyee.EventEmitter()
        self.is_up = False
        self.is_primary = True
        self.primary_id = 1
        self.connect_script: list[str] = []
        self.read_script: list[str] = []
        self.connects = 0
        self.reads = 0

    async def __aenter__(self) -> ScriptedSwitch:
        self.connects += 1
        step = self.connect_script.pop(0) if self.connect_script else "ok"
        if step == "cancelled":  # finsy: its pipeline step failed, it cancelled its run
            raise asyncio.CancelledError()
        if step == "hang":  # finsy: no answer to the arbitration, waited for unbounded
            await asyncio.Event().wait()
        if step == "refused":
            raise ConnectionRefusedError("no switch there")
        self.is_up = True
        return self

    async def __aexit__(self, *_: Any) -> None:
        self.is_up = False

    async def read(self, entity: Any) -> AsyncIterator[Any]:
        self.reads += 1
        step = self.read_script.pop(0) if self.read_script else "ok"
        if step == "cancelled":  # grpc: the channel closed under the call
            raise asyncio.CancelledError()
        for one in entity if isinstance(entity, list) else [entity]:
            yield one

    @property
    def p4info(self) -> Any:
        """What the watcher asks of the P4Info: a counter's name from its id."""
        class Counters:
            def __getitem__(self, counter_id: str) -> Any:
                return types.SimpleNamespace(name=counter_id)

        return types.SimpleNamespace(counters=Counters())

    async def write(self, _: Any) -> None:
        step = self.read_script.pop(0) if self.read_script else "ok"
        if step == "cancelled":
            raise asyncio.CancelledError()

    async def read_packets(self, **_: Any) -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield None  # never reached: no probe comes back here


def watcher(options: WatchOptions = FAST) -> Watcher:
    async def on_change(_: Failures) -> None:
        pass

    return Watcher(TOPO, Path("unused.p4info.txtpb"), None, on_change, options,
                   access=Access.insecure(), switch_factory=ScriptedSwitch)  # type: ignore[arg-type]


def scripted(w: Watcher, name: str) -> ScriptedSwitch:
    sw = w._links[name].switch
    assert isinstance(sw, ScriptedSwitch)
    return sw


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def run_for(w: Watcher, loop: Callable[[], Coroutine[Any, Any, None]],
            check: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        task = asyncio.create_task(loop())
        try:
            await check()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())


def test_a_connection_cancelled_under_the_watcher_is_made_again() -> None:
    """finsy cancels its own connection task when its pipeline step fails (a switch
    that just started): the old loop took that for its own end, and never connected
    to the switch again."""
    w = watcher()
    sw = scripted(w, "spine2")
    sw.connect_script = ["cancelled"]
    run_for(w, lambda: w._connection("spine2"),
            lambda: until(lambda: w._links["spine2"].connected))
    assert sw.connects == 2


def test_a_connection_stuck_in_its_handshake_is_given_up_and_made_again() -> None:
    w = watcher()
    sw = scripted(w, "spine2")
    sw.connect_script = ["hang"]
    run_for(w, lambda: w._connection("spine2"),
            lambda: until(lambda: w._links["spine2"].connected))
    assert sw.connects == 2


def test_a_read_cancelled_under_the_watcher_does_not_end_its_liveness_checks() -> None:
    """grpc raises CancelledError in a read in flight when the channel closes (the
    switch stopped): the old loop ended there, and the switch, once back, never
    answered again for the watcher."""
    w = watcher()
    sw = scripted(w, "spine2")
    sw.read_script = ["cancelled"]
    w._links["spine2"].connected = True
    answered: list[float] = []
    w.detector.switch_answered = lambda switch, now: answered.append(now)  # type: ignore[method-assign]
    run_for(w, lambda: w._liveness("spine2"), lambda: until(lambda: len(answered) >= 3))
    assert sw.reads >= 4


def test_a_liveness_read_answered_late_counts() -> None:
    """A busy switch answers after detect_after: the old loop gave the read up at
    detect_after, so a switch slower than that was never heard (down for good once
    hang_after passed)."""
    w = watcher()
    sw = scripted(w, "spine2")
    w._links["spine2"].connected = True

    async def slow_read(entity: Any) -> AsyncIterator[Any]:
        await asyncio.sleep(2 * FAST.detect_after)
        for one in entity:
            yield one

    sw.read = slow_read  # type: ignore[method-assign]
    answered: list[float] = []
    w.detector.switch_answered = lambda switch, now: answered.append(now)  # type: ignore[method-assign]
    run_for(w, lambda: w._liveness("spine2"), lambda: until(lambda: len(answered) >= 2))


def test_the_liveness_read_hands_the_probe_ports_mark_counters_to_the_detector() -> None:
    """With each liveness read, the mark counters of the ports the probes leave by: a
    count that grows says the port is congested (Detector.port_marks)."""
    w = watcher()
    sw = scripted(w, "spine2")
    w._links["spine2"].connected = True
    ports = w._links["spine2"].probe_ports
    counts = iter(range(100))

    async def marking(entity: Any) -> AsyncIterator[Any]:
        count = next(counts)
        for e in entity:
            if e.counter_id == n.PORT_MARKS:
                yield fy.P4CounterEntry(e.counter_id, index=e.index,
                                        data=fy.P4CounterData(packet_count=count))
            else:
                yield e

    sw.read = marking  # type: ignore[method-assign]
    run_for(w, lambda: w._liveness("spine2"),
            lambda: until(lambda: all(w.detector.congested("spine2", p, 0.0) for p in ports)))
    assert ports and sorted(ports) == sorted(
        p for p, nb in TOPO.ports("spine2").items() if not nb.is_host)


def test_a_connection_that_carries_no_probe_is_made_again_and_its_switch_is_not_lost() -> None:
    """make soak on the k=4 fat-tree: after a repair's writer had come and gone, some of
    the watcher's connections passed nothing for 55 s (no probe, no notice of being
    primary again) while it sent probes through them."""
    w = watcher()
    sw = scripted(w, "spine2")
    # The first attempt to make it again fails (make soak: "Internal error from Core").
    sw.connect_script = ["ok", "refused"]
    lost: list[str] = []
    connected = w.detector.switch_connected

    def spy(switch: str, up: bool, now: float) -> None:
        if not up:
            lost.append(switch)
        connected(switch, up, now)

    w.detector.switch_connected = spy  # type: ignore[method-assign]

    async def connection_and_probes() -> None:
        await asyncio.gather(w._connection("spine2"), w._tick())

    async def connected_again() -> None:
        await until(lambda: sw.connects >= 3 and w._links["spine2"].connected)
        assert "spine2" not in lost  # (before the test's end cancels the connection)

    run_for(w, connection_and_probes, connected_again)


def test_a_connection_backup_for_the_hang_time_is_made_again() -> None:
    """The same soak: a connection still backup 17 s after the repair's writer had
    left (the switch's notice lost), the links of its switch judged by nobody."""
    w = watcher()
    sw = scripted(w, "spine2")
    sw.is_primary = False

    async def connection_and_probes() -> None:
        await asyncio.gather(w._connection("spine2"), w._tick())

    run_for(w, connection_and_probes, lambda: until(lambda: sw.connects >= 2))
