"""The watcher (ina.control.watch) on the leaf-spine fabric, on Mininet + BMv2: probes
cross every link; a link taken down, a switch whose process stops, are reported
within the detection time and come back; one-shot controllers write meanwhile; a
fabric busy with an AllReduce of every host is not mistaken for a broken one. Run with `make test`
(``-s`` shows the detection times measured).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from ina.control import p4names as n
from ina.control.controller import Controller
from ina.control.repair import repair_switches
from ina.control.watch import OnChange, WatchOptions
from ina.errors import LabError
from ina.lab.deploy import deploy
from ina.lab.mininet import Lab
from ina.lab.watching import WatcherThread
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.spec.job import JobSpec
from ina.spec.topology import Failures

from bmv2.bmv2lab import Labs, NetLab
from inatest import ROOT

TOPOLOGY = ROOT / "topologies" / "leaf-spine-2x4.yaml"
OPTIONS = WatchOptions()  # the defaults: what the detection times below are for
#: Beyond detect_after: the probe interval, the verdict's tick, the test's polling.
MARGIN = 0.4


class Background(WatcherThread):
    """The watcher beside the test; what it waits for fails the test."""

    def __init__(self, lab: NetLab, options: WatchOptions, on_change: OnChange | None = None):
        super().__init__(lab.lab, options, on_change)

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> float:
        try:
            return super().wait_for(condition, timeout, what)
        except LabError as exc:
            pytest.fail(str(exc))

    def holds(self, condition: Callable[[], bool], seconds: float) -> bool:
        """Whether ``condition`` holds all along for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not condition():
                return False
            time.sleep(0.01)
        return condition()


@pytest.fixture
def fabric(labs: Labs) -> NetLab:
    return labs.get(TOPOLOGY)


@pytest.fixture
def watching(fabric: NetLab, tmp_path: Path) -> Iterator[Background]:
    bg = Background(fabric, WatchOptions(events=tmp_path / "events.jsonl"))
    try:
        bg.settled()
        yield bg
    finally:
        bg.stop()


def _link(a: str, b: str) -> Failures:
    return Failures(links=frozenset({frozenset({a, b})}))


def test_probes_cross_every_link_and_a_healthy_fabric_stays_up(
        fabric: NetLab, watching: Background) -> None:
    assert len(watching.watcher.detector.links) == 8
    assert watching.holds(lambda: not watching.events, 3.0), watching.events
    assert watching.changes == []


def test_a_link_that_goes_down_is_reported_and_comes_back(
        fabric: NetLab, watching: Background, tmp_path: Path) -> None:
    fabric.lab.set_link("leaf2", "spine1", up=False)
    try:
        took = watching.wait_for(lambda: watching.failures == _link("leaf2", "spine1"),
                                 OPTIONS.detect_after + 3, "the link to be reported down")
        print(f"\nlink down detected after {took * 1000:.0f} ms "
              f"(detect_after {OPTIONS.detect_after * 1000:.0f} ms)")
        assert took < OPTIONS.detect_after + MARGIN
    finally:
        fabric.lab.set_link("leaf2", "spine1", up=True)
    took = watching.wait_for(lambda: not watching.failures, 5, "the link to come back")
    print(f"link up detected after {took * 1000:.0f} ms")
    watching.wait_for(lambda: watching.changes[-1:] == [(watching.changes[-1][0], Failures())]
                      if watching.changes else False, 5, "on_change to see it")
    assert [f for _, f in watching.changes] == [_link("leaf2", "spine1"), Failures()]
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert ['"link_down"' in lines[0], '"link_up"' in lines[1]] == [True, True], lines


def test_a_stopped_switch_is_reported_and_comes_back_with_its_pipeline(
        fabric: NetLab, watching: Background) -> None:
    fabric.lab.fail_switch("spine2")
    try:
        took = watching.wait_for(
            lambda: watching.failures == Failures(switches=frozenset({"spine2"})),
            OPTIONS.detect_after + 3, "the switch to be reported down")
        print(f"\nswitch down detected after {took * 1000:.0f} ms")
        assert took < OPTIONS.detect_after + MARGIN
        assert watching.holds(lambda: watching.failures.links == frozenset(), 1.0)
        fabric.lab.recover_switch("spine2")
        took = watching.wait_for(lambda: not watching.failures, 15,
                                 "the switch to be reported up")
        print(f"switch up detected {took * 1000:.0f} ms after its gRPC port opened")
        # The watcher installed the program again: the switch answers reads of its
        # tables (empty: its state is the repair's business).
        entries = fabric.controller_call(
            lambda ctl: ctl.clients["spine2"].read_table(n.IPV4_ROUTES.name))
        assert entries == []
        # Until the base state declares its ports, it drops what they bring, probes too:
        # the repair writes it (the watcher here only watches).
        fabric.lab.init_switches_sync()
        watching.settled()  # its links carry probes again
    finally:
        fabric.lab.init_switches_sync()  # the base state back, for the tests that follow


def test_one_shot_controllers_write_while_it_watches(
        fabric: NetLab, watching: Background) -> None:
    async def reset_counters(ctl: Controller) -> None:
        for client in ctl.clients.values():
            await client.reset_counter(n.INGRESS_SWITCH_STATS, [0])
        await asyncio.sleep(1.0)  # held long enough for the neighbours' probes to arrive

    for _ in range(2):
        fabric.controller_call(reset_counters)
    watching.settled()  # primary again everywhere, and probing
    assert watching.events == []
    fabric.lab.set_link("leaf4", "spine2", up=False)
    try:
        watching.wait_for(lambda: watching.failures == _link("leaf4", "spine2"),
                          OPTIONS.detect_after + 3, "the link to be reported down")
    finally:
        fabric.lab.set_link("leaf4", "spine2", up=True)
    watching.wait_for(lambda: not watching.failures, 5, "the link to come back")


def test_a_busy_fabric_is_not_mistaken_for_a_broken_one(
        fabric: NetLab, watching: Background) -> None:
    """The benchmark's load: an AllReduce of every host of the fabric, planned
    (leaves and a spine aggregate), for several seconds."""
    hosts = sorted(fabric.topology.hosts)
    path = fabric.workdir / "job7.yaml"
    job = deploy(fabric.lab, JobSpec.from_dict({"job_id": 7, "op": "sum", "workers": hosts}),
                 path)
    try:
        started = time.monotonic()
        results, expected = fabric.allreduce(path, job, P * 4000, seed=70, timeout=60)
        busy = time.monotonic() - started
    finally:
        fabric.teardown(7)
    assert all(np.array_equal(results[w], expected) for w in hosts)
    print(f"\n{busy:.1f}s of AllReduce over 8 workers: {len(watching.events)} verdicts")
    assert busy > 3.0, "too short to say anything"
    assert watching.events == []


def _hang_then_die(lab: Lab, name: str) -> None:
    """The switch stops answering (SIGSTOP) long enough for a liveness read to be in
    flight, then dies under it (SIGKILL): the read is cancelled when its channel
    closes, as under load, where reads take long."""
    proc = lab.net[name].proc
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(3 * OPTIONS.interval)  # the stimulus: a switch hung this long
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    lab.fail_switch(name)


def test_a_restarted_switch_is_reported_up_and_repaired(fabric: NetLab) -> None:
    """As the soak does: a switch stopped and started again (empty, same gRPC address),
    again and again, while the watcher repairs on every change as ``inactl watch``
    does: each time it is reported up within a few probe periods and given its base
    state again. Before the fix, a switch that died with a read in flight was never
    reported up again."""
    lab = fabric.lab
    repaired: list[Failures] = []

    async def on_change(failures: Failures) -> None:
        await repair_switches(lab.topology, failures, lab.p4info, lab.p4blob, lab.access)
        repaired.append(failures)

    bg = Background(fabric, WatchOptions(), on_change)
    try:
        bg.settled()
        for hang_first in (False, True, True, True):
            if hang_first:
                _hang_then_die(lab, "spine2")
            else:
                lab.fail_switch("spine2")
            bg.wait_for(lambda: "spine2" in bg.failures.switches and bool(repaired)
                        and "spine2" in repaired[-1].switches, OPTIONS.detect_after + 5,
                        "the switch to be reported down and repaired around")
            lab.recover_switch("spine2")
            took = bg.wait_for(lambda: not bg.failures, 5, "the switch to be reported up")
            print(f"\nrestarted switch reported up {took * 1000:.0f} ms after its gRPC port "
                  "opened")
            bg.wait_for(lambda: bool(repaired) and repaired[-1] == Failures()
                        and not bg.watcher.repairing, 15, "the repair after it")
            routes = fabric.controller_call(
                lambda ctl: ctl.clients["spine2"].read_table(n.IPV4_ROUTES.name))
            assert routes, "the repair gave the switch its base state again"
            bg.settled()
    finally:
        bg.stop()
        if lab.failures:
            lab.recover_switch("spine2")
        lab.init_switches_sync()
