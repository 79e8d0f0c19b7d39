"""INA and TCP on one bottleneck (``inabench congestion``, ``make bench-congestion``).

Figure 1 with every link at ``rate`` Mbit/s and the topology's queues (the switches
mark above the threshold, the hosts run TCP with ECN): the job's workers (w1..w4)
run a loop of AllReduce calls while a TCP bulk flow (iperf3) runs from w5 to w1
for ``shared`` seconds, then INA runs alone for ``alone`` seconds. The TCP flow
crosses s5 -> s1 and s1 -> w1, which also carry INA's partial results (from s2)
and w1's results: both flows meet at s5's port to s1 first, the bottleneck.

What is measured, every second: each flow's rate on the wire (INA from its calls,
each call's bytes spread over its duration; TCP from iperf3's own intervals, with
the frames' headers added: the sender's, bytes handed to its socket, which over a
run of a few seconds get ahead of the wire by the socket's buffer), the workers'
congestion window, the queue at the bottleneck (the htb byte FIFO, sampled), and
the marks of the bottleneck's port.
Every call's result is checked against the exact sum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ina.bench.goals import Goals, render
from ina.bench.hostprocess import HostProcess
from ina.bench.onlab import CASES, INA_WIRE_PER_VALUE, Bench, bench_on_lab
from ina.bench.output import pyplot, save
from ina.bench.timing import Procs, start_together, wait_all, wait_for_go
from ina.errors import LabError
from ina.protocol.constants import ELEMS_PER_PACKET

if TYPE_CHECKING:
    from ina.host.worker import Worker

#: The TCP flow's ends and the link where it meets INA's traffic first.
TCP_FROM, TCP_TO = "w5", "w1"
BOTTLENECK = ("s5", "s1")
IPERF_PORT = 5201
#: The TCP flow's congestion control: Linux's default (the machine's own default may
#: be another: this one's is BBR, which does not respond to ECN marks at all).
TCP_ALGORITHM = "cubic"
#: iperf3's reporting interval (s): a stop of a second is four empty intervals.
IPERF_INTERVAL = 0.25
#: A TCP segment's frame on the wire per payload byte (1448 bytes of payload with
#: timestamps, 66 of Ethernet, IPv4 and TCP headers).
TCP_WIRE_PER_BYTE = (1448 + 66) / 1448
#: Values per AllReduce call: 32 packets, a fraction of a second at a fair share.
CALL_VALUES = 32 * ELEMS_PER_PACKET
#: How often the bottleneck's queue is sampled (s).
QUEUE_SAMPLE = 0.25
#: The goals: each flow's share of the link while they share it, the longest stop.
FAIR_SHARE = 0.35
ALONE_SHARE = 0.95
LONGEST_STOP = 1.0


@dataclass
class Call:
    start: float  # wall clock (s), as every process on the machine sees it
    end: float
    exact: bool
    cwnd: float  # the worker's congestion window after the call
    marked: int  # results that carried a mark in the call
    #: What cut the worker's window during the call (ina.host.congestion's reasons).
    cuts: dict[str, int] = field(default_factory=dict)


@dataclass
class CongestionRun:
    """One run: the calls of every worker, iperf3's intervals, the queue's samples,
    from the moment both flows started (time 0)."""

    rate_mbit: float
    shared: float  # seconds both flows ran
    alone: float  # seconds INA ran alone after
    values_per_call: int
    calls: dict[str, list[Call]]  # per worker
    tcp: list[tuple[float, float, float]]  # (start, end, payload bytes) per interval
    queue: list[tuple[float, int]]  # (time, bytes queued at the bottleneck)
    marks: dict[str, int]  # packets the bottleneck's port marked, per phase
    packets: dict[str, int]  # packets it sent, per phase
    bmv2: str = ""
    tcp_algorithm: str = ""  # the TCP flow's congestion control ("": not recorded)

    @property
    def one_worker(self) -> list[Call]:
        """One worker's calls: every worker's results cross the bottleneck as one
        stream, and their windows take the same steps."""
        return next(iter(self.calls.values()))

    # --- rates -------------------------------------------------------------------

    def ina_bits(self, a: float, b: float) -> float:
        """INA's bits on the bottleneck's wire between ``a`` and ``b``."""
        per_call = self.values_per_call * INA_WIRE_PER_VALUE * 8
        return sum(per_call * _overlap(c.start, c.end, a, b) / max(c.end - c.start, 1e-9)
                   for c in self.one_worker)

    def tcp_bits(self, a: float, b: float) -> float:
        return sum(n * 8 * TCP_WIRE_PER_BYTE * _overlap(s, e, a, b) / max(e - s, 1e-9)
                   for s, e, n in self.tcp)

    def share(self, flow: str, a: float, b: float) -> float:
        """``flow``'s ("ina", "tcp") average share of the link between ``a`` and ``b``."""
        bits = self.ina_bits(a, b) if flow == "ina" else self.tcp_bits(a, b)
        return bits / ((b - a) * self.rate_mbit * 1e6)

    def seconds(self) -> list[float]:
        return [float(t) for t in range(int(self.shared + self.alone))]

    # --- stops -------------------------------------------------------------------

    def longest_call(self, a: float, b: float) -> float:
        return max((c.end - c.start for calls in self.calls.values() for c in calls
                    if a <= c.start < b), default=float("inf"))

    def longest_tcp_stop(self) -> float:
        """The longest run of iperf3 intervals that moved nothing (s)."""
        longest = run = 0.0
        for s, e, n in self.tcp:
            run = run + (e - s) if n == 0 else 0.0
            longest = max(longest, run)
        return longest

    def exact(self) -> bool:
        return all(c.exact for calls in self.calls.values() for c in calls)

    # --- figures -----------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_figures(cls, doc: Any) -> CongestionRun:
        calls = {w: [Call(**c) for c in cs] for w, cs in doc["calls"].items()}
        return cls(**{**doc, "calls": calls,
                      "tcp": [tuple(t) for t in doc["tcp"]],
                      "queue": [tuple(q) for q in doc["queue"]]})

    def goals(self) -> Goals[CongestionRun]:
        goals: Goals[CongestionRun] = Goals("Figure 1", lambda _run: None)
        end = self.shared
        ina, tcp = self.share("ina", 0, end), self.share("tcp", 0, end)
        goals.add(f"sharing for {self.shared:g} s, each flow >= {FAIR_SHARE:.0%} of the link",
                  f"INA {ina:.0%}, TCP {tcp:.0%}", min(ina, tcp) >= FAIR_SHARE)
        call = self.longest_call(0, end)
        stop = self.longest_tcp_stop()
        goals.add(f"neither stops for over {LONGEST_STOP:g} s",
                  f"INA's longest call {call:.2f} s, TCP's longest stop {stop:.2f} s",
                  call <= LONGEST_STOP and stop <= LONGEST_STOP)
        goals.add("every INA result exact", f"{sum(map(len, self.calls.values()))} calls",
                  self.exact())
        # INA alone: from a second after TCP ended (its queue drained).
        alone = self.share("ina", end + 1, end + self.alone)
        goals.add(f"INA alone >= {ALONE_SHARE:.0%} of the link", f"{alone:.0%}",
                  alone >= ALONE_SHARE)
        return goals

    def render(self) -> str:
        end = self.shared
        calls = self.one_worker
        shared_cwnd = [c.cwnd for c in calls if c.start < end]
        cuts: dict[str, int] = {}
        for c in calls:
            if c.start < end:
                for why, n in c.cuts.items():
                    cuts[why] = cuts.get(why, 0) + n
        queued = [q for t, q in self.queue if t < end]
        lines = [
            f"INA (Figure 1's job, {self.values_per_call} values per call) and a TCP bulk "
            f"flow ({TCP_FROM} -> {TCP_TO}, iperf3, {self.tcp_algorithm or 'TCP unnamed'}, "
            f"ECN on) on links of {self.rate_mbit:g} "
            f"Mbit/s; the bottleneck {BOTTLENECK[0]} -> {BOTTLENECK[1]}. {self.bmv2}",
            f"  shared, {self.shared:g} s: INA {self.share('ina', 0, end):.0%} of the link, "
            f"TCP {self.share('tcp', 0, end):.0%}; INA's window median "
            f"{statistics.median(shared_cwnd) if shared_cwnd else 0:.1f} packets (cut by "
            + ", ".join(f"{why} {n}" for why, n in cuts.items()) + "); queue "
            f"median {statistics.median(queued) if queued else 0:,.0f} bytes, largest "
            f"{max(queued, default=0):,} bytes; the port marked "
            f"{self.marks.get('shared', 0)} of {self.packets.get('shared', 0)} packets",
            f"  INA alone, {self.alone:g} s: "
            f"{self.share('ina', end + 1, end + self.alone):.0%} of the link; the port "
            f"marked {self.marks.get('alone', 0)} of {self.packets.get('alone', 0)} packets",
            "", *render("Goals (issue 22):", self.goals().goals)]
        return "\n".join(lines)

    def plot(self, path: Path) -> None:
        plt = pyplot()
        fig, (rates, window, queue) = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
        t = self.seconds()
        link = self.rate_mbit
        rates.plot(t, [self.share("ina", s, s + 1) * link for s in t], label="INA")
        rates.plot(t, [self.share("tcp", s, s + 1) * link for s in t],
                   label=f"TCP (iperf3, {self.tcp_algorithm or 'unnamed'})")
        rates.axhline(link, color="grey", linestyle=":", label="link")
        rates.axvline(self.shared, color="black", linewidth=0.8)
        rates.set_ylabel("Mbit/s on the wire")
        rates.legend(loc="upper left", fontsize=8)
        rates.set_title(f"INA and TCP on a {link:g} Mbit/s bottleneck, then INA alone")
        calls = self.one_worker
        window.step([c.end for c in calls], [c.cwnd for c in calls], where="post",
                    label="window (packets)")
        window.plot([c.end for c in calls], [c.marked for c in calls], ".",
                    markersize=3, label="marked results per call")
        window.set_ylabel("INA worker")
        window.legend(loc="upper right", fontsize=8)
        queue.plot([q[0] for q in self.queue], [q[1] / 1000 for q in self.queue])
        queue.set_ylabel(f"queue {BOTTLENECK[0]}->{BOTTLENECK[1]} (kB)")
        queue.set_xlabel("seconds")
        save(fig, path, self.bmv2)


def _overlap(s: float, e: float, a: float, b: float) -> float:
    return max(0.0, min(e, b) - max(s, a))


# --- Measuring -------------------------------------------------------------------------


@dataclass
class Settings:
    rate_mbit: float = 4.0
    shared: float = 60.0
    alone: float = 20.0
    values_per_call: int = CALL_VALUES
    tcp_algorithm: str = TCP_ALGORITHM


def run(build_dir: Path, settings: Settings) -> CongestionRun:
    """Inside the sandbox: the measurement (module docstring)."""
    from ina.lab.mininet import bmv2_build

    case = CASES["figure1"]
    with bench_on_lab(case, build_dir) as bench:
        bench.lab.limit_links(settings.rate_mbit)
        server = bench.lab.host(TCP_TO).popen(
            ["iperf3", "-s", "-1", "-p", str(IPERF_PORT)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return _measure(bench, settings, bmv2_build())
        finally:
            if server.poll() is None:
                server.terminate()
            server.wait()


def _measure(bench: Bench, settings: Settings, build: str) -> CongestionRun:
    loops = _loops(bench, settings)
    start_together(loops)
    zero = time.time()
    client = bench.lab.host(TCP_FROM).popen(
        ["iperf3", "-c", bench.topology.hosts[TCP_TO].ip, "-p", str(IPERF_PORT), "-J",
         "-t", f"{settings.shared:g}", "-i", f"{IPERF_INTERVAL:g}",
         "-C", settings.tcp_algorithm],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = _QueueSampler(bench, zero)
    sampler.start()
    marks, packets = {}, {}
    try:
        before = _port_counts(bench)
        out, err = client.communicate(timeout=settings.shared + 60)
        middle = _port_counts(bench)
        reports = wait_all(loops, {}, timeout=settings.alone + 120)
        after = _port_counts(bench)
    finally:
        sampler.stop()
    if client.returncode != 0:
        raise LabError(f"iperf3 failed ({client.returncode}): {err.decode().strip()}")
    for phase, (a, b) in {"shared": (before, middle), "alone": (middle, after)}.items():
        packets[phase], marks[phase] = b[0] - a[0], b[1] - a[1]
    return CongestionRun(settings.rate_mbit, settings.shared, settings.alone,
                         settings.values_per_call,
                         {w: [_call(c, zero) for c in r["calls"]] for w, r in reports.items()},
                         _tcp_intervals(json.loads(out)), sampler.samples, marks, packets,
                         build, settings.tcp_algorithm)


def _call(c: dict[str, Any], zero: float) -> Call:
    return Call(c["start"] - zero, c["end"] - zero, c["exact"], c["cwnd"], c["marked"],
                c["cuts"])


def _tcp_intervals(doc: dict[str, Any]) -> list[tuple[float, float, float]]:
    return [(float(i["sum"]["start"]), float(i["sum"]["end"]), float(i["sum"]["bytes"]))
            for i in doc["intervals"]]


def _loops(bench: Bench, settings: Settings) -> Procs:
    """Each worker's loop of calls (``loop`` below, on its host), ready to go."""
    seconds = settings.shared + settings.alone
    return {w: HostProcess.on(bench.lab, w, [
        sys.executable, "-m", "ina.bench.congestion", "--topology", str(bench.topology_path),
        "--job", str(bench.job_path), "--worker", w, "--workers", str(len(bench.job.workers)),
        "--seed", str(i), "--values", str(settings.values_per_call),
        "--seconds", f"{seconds:g}"])
        for i, w in enumerate(bench.job.workers)}


def _port_counts(bench: Bench) -> tuple[int, int]:
    """(packets sent, packets marked) by the bottleneck's port so far."""
    from ina.lab.deploy import controller_call

    lab, (switch, neighbour) = bench.lab, BOTTLENECK
    port = next(e.port for e in lab.topology.link_ends(switch, neighbour) if e.node == switch)
    assert port is not None  # a switch's end of a link has a port
    status = controller_call(lab, lambda ctl: ctl.status(), write=False)[switch]
    return status.port_packets[port].packets, status.port_marks[port].packets


@dataclass
class _QueueSampler:
    """The bottleneck's queue, every QUEUE_SAMPLE seconds, in a thread."""

    bench: Bench
    zero: float
    samples: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(QUEUE_SAMPLE):
            queued, _ = self.bench.lab.backlog(*BOTTLENECK)
            self.samples.append((round(time.time() - self.zero, 3), queued))


# --- On each worker's host -------------------------------------------------------------


def loop(argv: list[str] | None = None) -> int:
    """AllReduce calls of the same array for ``--seconds`` after ``go`` (``calls``);
    the last line on stdout: {"calls": [{start, end, exact, cwnd, marked}, ...]}."""
    from ina.host.arrays import random_array
    from ina.host.config import WorkerConfig
    from ina.host.transport import UdpTransport
    from ina.host.worker import Worker

    p = argparse.ArgumentParser(prog="python -m ina.bench.congestion")
    for name in ("--topology", "--job", "--worker"):
        p.add_argument(name, required=True)
    for name in ("--workers", "--seed", "--values"):
        p.add_argument(name, type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    args = p.parse_args(argv)
    mine = random_array(args.values, args.seed)
    expected = np.sum([random_array(args.values, i).astype(np.int64)
                       for i in range(args.workers)], axis=0)
    config = WorkerConfig.from_files(args.topology, args.job, args.worker)
    with UdpTransport(config.target) as transport:
        worker = Worker(config, transport, timeout=60)
        wait_for_go()
        made = calls(worker, mine, expected, args.workers, args.seconds)
    print(json.dumps({"calls": made}), flush=True)
    return 0


def calls(worker: Worker, mine: npt.NDArray[np.int32], expected: npt.NDArray[np.int64],
          workers: int, seconds: float) -> list[dict[str, Any]]:
    """``worker``'s AllReduce calls of ``mine`` for ``seconds``, each checked against
    ``expected``: its start and end, whether exact, its window and marks.

    The workers stop together: each worker's last value is its vote to go on (1
    before its ``seconds`` are up, else 0), and every worker stops after the first
    call whose votes add up to fewer than ``workers``. A worker that stopped by its
    own clock alone would leave the others waiting in a call it never makes (each
    got ``go`` at its own moment) until their timeout."""
    mine, vote = mine.copy(), mine.size - 1
    made: list[dict[str, Any]] = []
    until = time.monotonic() + seconds
    going = True
    while going:
        marked, start = worker.stats.marked, time.time()
        cuts = dict(worker.cc.cuts) if worker.cc else {}
        mine[vote] = 1 if time.monotonic() < until else 0
        result = worker.allreduce(mine)
        going = bool(result.values[vote] == workers)
        now = worker.cc.cuts if worker.cc else {}
        made.append({"start": start, "end": time.time(),
                     "exact": bool((result.values[:vote] == expected[:vote]).all()
                                   and 0 <= result.values[vote] <= workers),
                     "cwnd": round(worker.cc.cwnd if worker.cc else 0.0, 2),
                     "marked": worker.stats.marked - marked,
                     "cuts": {k: n - cuts.get(k, 0) for k, n in now.items()}})
    return made


if __name__ == "__main__":
    sys.exit(loop())
