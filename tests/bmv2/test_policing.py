"""A host flooding its job's INA packets is policed at its edge switch (leaf-spine
on Mininet + BMv2): with the watcher running, the flood makes it declare no link
down, another job's calls stay exact, and what the host sent over its rate is
counted as policed. Run with `make test` (``-s`` shows the figures).

The flood is four times the host's rate, not as fast as the host can send (70,000
to 110,000 frames a second here): that starves the six emulated switches of the
machine's two cores, and BMv2 takes the controller's packets into the same
ingress queue as the data, which blocks when full; in two runs of 42 at that
rate or 20,000 frames a second a switch then passed none of the watcher's probes
for over 3 s (hang_after), and the watcher declared its links down
(docs/limits.md)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ina.control import p4names as n
from ina.control.entities import Meter
from ina.control.watch import WatchOptions
from ina.lab.deploy import deploy
from ina.lab.watching import WatcherThread
from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, InaPacket
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import HOST_BURST, HOST_RATE, JobStat, SwitchStat
from ina.protocol.frames import ina_frame
from ina.spec.job import JobSpec

from bmv2.bmv2lab import HERE, Labs, NetLab
from inatest import ROOT

TOPOLOGY = ROOT / "topologies" / "leaf-spine-2x4.yaml"
FLOODER = "h1_1"
FLOOD_SECONDS = 6.0
FLOOD_RATE = 4 * HOST_RATE  # frames a second
#: The flooder's job: its packets pass every check at its edge (a buggy worker's)
#: and each starts a round at spine1, its parent below the root (the costliest).
FLOODED = {"job_id": 21, "op": "sum", "workers": ["h1_1", "h2_1", "h4_2"], "root": "leaf4",
           "aggregators": {"spine1": ["h1_1", "h2_1"]}}
SEQ_OFFSET = 14 + 20 + 8 + 4  # of the INA header's seq in a frame
#: Another job, of hosts on other leaves, whose calls go on meanwhile.
OTHER = {"job_id": 22, "op": "sum", "workers": ["h2_2", "h3_2", "h4_1", "h4_2"]}


@pytest.fixture
def fabric(labs: Labs) -> NetLab:
    return labs.get(TOPOLOGY)


@pytest.fixture
def watching(fabric: NetLab, tmp_path: Path) -> Iterator[WatcherThread]:
    bg = WatcherThread(fabric.lab, WatchOptions(events=tmp_path / "events.jsonl"))
    try:
        bg.settled()
        yield bg
    finally:
        bg.stop()


def _flood(lab: NetLab, host: str, frame: bytes, seconds: float) -> subprocess.Popen[bytes]:
    """The frame at FLOOD_RATE, with the next seq each time."""
    intf = lab.lab.host(host).defaultIntf().name
    proc: subprocess.Popen[bytes] = lab.lab.host(host).popen(
        [sys.executable, str(HERE / "flood.py"), intf, frame.hex(), str(seconds),
         str(SEQ_OFFSET), str(FLOOD_RATE)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc


def _policed(lab: NetLab, switch: str) -> int:
    status = lab.controller_call(lambda ctl: ctl.status())
    value = status[switch].switch_stats.get(SwitchStat.DROP_POLICED)
    return value.packets if value is not None else 0


def _job_events(lab: NetLab, switch: str, job_id: int) -> int:
    """What happened to the job's packets at the switch (each counts one event)."""
    stats = lab.controller_call(lambda ctl: ctl.status())[switch].job_stats.get(job_id, {})
    return sum(v.packets for k, v in stats.items()
               if k not in (JobStat.EMITTED, JobStat.MULTICAST))


def test_a_flooding_host_is_policed_and_harms_no_link_and_no_other_job(
        fabric: NetLab, watching: WatcherThread) -> None:
    topo = fabric.topology
    flooded = deploy(fabric.lab, JobSpec.from_dict(FLOODED), fabric.workdir / "job21.yaml")
    other_path = fabric.workdir / "job22.yaml"
    other = deploy(fabric.lab, JobSpec.from_dict(OTHER), other_path)
    try:
        h = topo.hosts[FLOODER]
        edge, _ = topo.host_attachment(FLOODER)
        parent_ip = flooded.target_of(FLOODER, topo)
        (parent,) = [sw for sw, spec in topo.switches.items() if spec.loopback == parent_ip]
        # Contributions to its parent, one after the other: a worker gone wild.
        frame = ina_frame(h.mac, topo.switches[edge].mac, h.ip, parent_ip,
                          InaPacket(InaHeader(job_id=21, seq=0, pbm=bit_of(h.bfr_id), count=P),
                                    tuple(range(P))).pack())
        # The meter's configuration, read back over P4Runtime as the controller wrote it.
        entries = fabric.controller_call(
            lambda ctl: ctl.clients[edge].read_table(n.JOB_MEMBERS.name))
        assert {e.meter for e in entries if e.match_value("job_id") == 21} == {
            Meter(HOST_RATE, HOST_BURST)}
        policed_before = _policed(fabric, edge)
        passed_before = _job_events(fabric, parent, 21)
        started = time.monotonic()
        flood = _flood(fabric, FLOODER, frame, FLOOD_SECONDS)
        calls = 0
        while flood.poll() is None:
            results, expected = fabric.allreduce(other_path, other, P * 8, seed=calls,
                                                 timeout=10)
            assert all(np.array_equal(results[w], expected) for w in other.workers), calls
            calls += 1
        out, err = flood.communicate(timeout=30)
        assert flood.returncode == 0, err.decode()
        flooding = time.monotonic() - started
        sent = int(out)
        policed = _policed(fabric, edge) - policed_before
        passed = _job_events(fabric, parent, 21) - passed_before
    finally:
        fabric.teardown(21)
        fabric.teardown(22)
    print(f"\n{sent} frames in {flooding:.1f}s from {FLOODER}: {policed} policed at {edge}, "
          f"{passed} let through to {parent}; {calls} calls of the other job, exact; "
          f"verdicts: {watching.events}")
    assert calls >= 2, "too short to say anything"
    assert watching.events == []
    assert policed > 0
    assert passed <= HOST_RATE * flooding + HOST_BURST
