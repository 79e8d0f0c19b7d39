"""One AllReduce three ways on the same network (``inabench allreduce``, ``make
bench``), and the host side's own rate (``inabench host``).

``allreduce``: INA (the switches aggregate), a parameter server on a host outside
the job, and a ring among the workers (both over TCP, through the same switches
doing plain IPv4 forwarding), in two regimes: links unlimited (CPU-bound) and
every link limited (link-bound; ina.bench.onlab). For each: values per second, the
ratios INA/PS and INA/ring, and the bytes each method put on its busiest link per
value of the array (measured on the switch interfaces). Cases: Figure 1 (4
workers, the VAT the planner chooses) and the k=4 fat-tree (8 workers over 4 pods).

``host``: what every allreduce run also measures first, one worker against a
loopback reflector (no switch), to show the worker library is not what limits the
figures; and (``inabench host``) the same worker's CPU per packet when its results
come one at a time (PACED_GAP apart), as a CPU-bound switch sends them: each then
costs the worker a wake of its own.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ina.bench.goals import Goal
from ina.bench.goals import render as render_goals
from ina.bench.hostloop import REFLECTOR, reflector
from ina.bench.hostprocess import HostProcess
from ina.bench.onlab import INA_WIRE_PER_VALUE, Bench, Case, bench_on_lab, describe_vat
from ina.bench.output import (
    cases_from_figures,
    describe_regime,
    pyplot,
    regime_title,
    save,
)
from ina.bench.timing import Link, Procs, Traffic, busiest, start_together, wait_all
from ina.errors import LabError
from ina.host.baselines import TCP_WIRE_PER_BYTE
from ina.protocol.constants import ELEMS_PER_PACKET, Op

PS_PORT = 7100
#: ``inabench host``'s paced case: results at least this far apart (s; on Figure 1 in
#: DDP with links unlimited, BMv2's results come 0.4-1.9 ms apart), and its packets.
PACED_GAP = 0.0005
PACED_PACKETS = 2000
#: The host benchmark's window (packets in flight), the worker's and the floor's.
HOST_WINDOW = 16
#: Issue 24's goal for one worker against the reflector (the step toward the million
#: a worker needs in front of a 10 Gbit/s switch).
HOST_GOAL_PPS = 500_000
RING_PORT = 7200


@dataclass
class MethodRun:
    method: str  # INA, PS or ring
    seconds: float
    values_per_s: float
    busiest_link: Link
    busiest_bytes_per_value: float  # on the busiest link direction
    all_links_bytes_per_value: float
    retransmissions: int = 0


@dataclass
class RegimeResult:
    regime: str  # "cpu" or "link"
    rate_mbit: float | None  # every link's rate in the link-bound regime
    runs: list[MethodRun]

    def rate(self, method: str) -> float:
        return next(r.values_per_s for r in self.runs if r.method == method)

    @property
    def ina_over_ps(self) -> float:
        return self.rate("INA") / self.rate("PS")

    @property
    def ina_over_ring(self) -> float:
        return self.rate("INA") / self.rate("ring")


@dataclass
class CaseResult:
    case: str
    topology: str
    workers: list[str]
    vat: str  # how the job aggregates
    ps_host: str
    size: int
    slots: int
    regimes: list[RegimeResult] = field(default_factory=list)


@dataclass
class HostRate:
    """One worker against a loopback reflector (no switch): its rate, and the CPU time
    (user and system) the worker's process spent per packet, which, unlike the rate,
    does not depend on what else runs on the machine's cores (None: not measured)."""

    packets_per_s: float
    values_per_s: float
    cpu_us_per_packet: float | None = None
    #: Of that, the kernel's (system time): the socket calls' own cost, which no
    #: worker code can remove.
    kernel_us_per_packet: float | None = None

    def cpu(self) -> str:
        """The CPU time per packet as the reports add it (nothing if not measured)."""
        if self.cpu_us_per_packet is None:
            return ""
        kernel = ("" if self.kernel_us_per_packet is None
                  else f" ({self.kernel_us_per_packet:.1f} in the kernel)")
        return f", {self.cpu_us_per_packet:.1f} us of the worker's CPU per packet{kernel}"

    def goal(self) -> Goal:
        """Issue 24's goal for the host side alone, and what bounds it: the kernel's
        time per packet caps one worker's rate on a core whatever its own code."""
        measured = f"{self.packets_per_s:,.0f} packets/s"
        if self.kernel_us_per_packet:
            measured += (f"; the kernel alone spent {self.kernel_us_per_packet:.1f} us a "
                         f"packet in the worker's socket calls: at most "
                         f"{1e6 / self.kernel_us_per_packet:,.0f} packets/s on a core, "
                         "whatever the worker's own code")
        return Goal("host side", f"one worker against a loopback reflector >= "
                                 f"{HOST_GOAL_PPS:,} packets/s", measured,
                    self.packets_per_s >= HOST_GOAL_PPS)


# --- Measuring inside a lab --------------------------------------------------------


def measure(bench: Bench, name: str, start: Callable[[int], tuple[Procs, Procs]],
            size: int) -> MethodRun:
    """``start``'s processes (the measured ones, and helpers) started together: the
    slowest one's time, and the bytes on the links per value."""
    traffic = Traffic(bench.topology)
    main, helpers = start(size)
    start_together(main)
    results = wait_all(main, helpers, timeout=1800)
    link_bytes = traffic.since()
    top = busiest(link_bytes)
    seconds = max(r["elapsed"] for r in results.values())
    return MethodRun(name, seconds, size / seconds, top, link_bytes[top] / size,
                     sum(link_bytes.values()) / size,
                     sum(r.get("retransmissions", 0) for r in results.values()))


def ps(bench: Bench, ps_host: str, size: int) -> tuple[Procs, Procs]:
    """The parameter server on ``ps_host`` and a PS worker on every worker's host."""
    py, workers = sys.executable, bench.job.workers
    server = HostProcess.on(bench.lab, ps_host, [
        py, "-m", "ina.cli.baselines", "ps-server", "--port", str(PS_PORT),
        "--workers", str(len(workers))])
    ip = bench.topology.hosts[ps_host].ip
    return {w: HostProcess.on(bench.lab, w, [
        py, "-m", "ina.cli.baselines", "ps-worker", "--server", ip, "--port", str(PS_PORT),
        "--random", str(size), "--seed", str(i), "--wait-go"])
        for i, w in enumerate(workers)}, {"ps-server": server}


def ring(bench: Bench, size: int) -> tuple[Procs, Procs]:
    """A ring AllReduce among the workers' hosts."""
    hosts = ",".join(bench.topology.hosts[w].ip for w in bench.job.workers)
    return {w: HostProcess.on(bench.lab, w, [
        sys.executable, "-m", "ina.cli.baselines", "ring", "--rank", str(i), "--hosts", hosts,
        "--port", str(RING_PORT), "--random", str(size), "--seed", str(i), "--wait-go"])
        for i, w in enumerate(bench.job.workers)}, {}


def run_case(case: Case, build_dir: Path, regimes: tuple[str, ...]) -> CaseResult:
    """Inside the sandbox: the three methods in each regime, on one lab."""
    with bench_on_lab(case, build_dir) as bench:
        job = bench.job
        result = CaseResult(case.name, bench.topology.name, list(job.workers),
                            describe_vat(job), case.ps_host, case.size, job.slots)
        for regime, rate in bench.regimes(regimes, case.rate_mbit):
            runs = [measure(bench, "INA", bench.ina, case.size),
                    measure(bench, "PS", lambda size: ps(bench, case.ps_host, size),
                            case.size),
                    measure(bench, "ring", lambda size: ring(bench, size), case.size)]
            result.regimes.append(RegimeResult(regime, rate, runs))
    return result


# --- The host side -----------------------------------------------------------------


def host_rate(size: int = 1 << 20, shared: bool = False, gap: float = 0.0) -> HostRate:
    """One worker's AllReduce against a loopback reflector in another process, which
    answers every packet at once as the root would: the worker library's own rate.
    ``shared``: through one job's view of a shared socket, as a torch rank's process
    group sends and receives (ina.host.transport.SharedTransport). ``gap``: the
    reflector answers one packet at a time, at least that many seconds apart (the
    rate is then the reflector's; the CPU per packet is still the worker's). The
    reflector is compiled (ina.bench.hostloop), so that it is not what is measured."""
    from ina.host.arrays import random_array
    from ina.host.config import WorkerConfig
    from ina.host.transport import SharedTransport, UdpTransport
    from ina.host.window import RtoEstimator
    from ina.host.worker import Worker

    with reflector(gap) as address:
        config = WorkerConfig(job_id=1, op=Op.SUM, pbm=1, target=address,
                              window=HOST_WINDOW, root=address)
        with UdpTransport(config.target, bind="127.0.0.1") as transport:
            through = SharedTransport(transport).view(config.job_id) if shared else transport
            worker = Worker(config, through, timeout=10, rto=RtoEstimator(initial=0.05))
            values = random_array(size, 0)
            worker.allreduce(values[:ELEMS_PER_PACKET])  # warm up
            started, times = time.perf_counter(), os.times()
            worker.allreduce(values)
            elapsed, after = time.perf_counter() - started, os.times()
    packets = -(-size // ELEMS_PER_PACKET)
    user, system = after.user - times.user, after.system - times.system
    return HostRate(packets / elapsed, size / elapsed, 1e6 * (user + system) / packets,
                    1e6 * system / packets)


def wake_floor(packets: int = PACED_PACKETS, gap: float = PACED_GAP,
               address: str = REFLECTOR) -> HostRate:
    """What a wake costs whatever the worker does in it: a loop with HOST_WINDOW
    packets in flight that only waits for the reflector's results (one at a time,
    ``gap`` apart), receives them (recvmmsg, copied out as the worker does) and
    answers each with one send (sendmmsg), on the worker's socket calls and
    nothing else: no window, no timers. The worker's CPU per packet above this is
    what its window and call loop add (all a compiled window could save)."""
    from ina.host import mmsg
    from ina.protocol.codec import ina_payload
    from ina.protocol.constants import INA_UDP_PORT

    packet = ina_payload(1, 0, 1, [0] * ELEMS_PER_PACKET)
    with reflector(gap, address), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        batch, to = mmsg.Datagrams(sock), (address, INA_UDP_PORT)
        poll = select.poll()
        poll.register(sock, select.POLLIN)
        started, cpu = time.perf_counter(), time.process_time()
        sent = batch.send([packet] * HOST_WINDOW, to)
        got = 0
        while got < packets:
            if not poll.poll(1000):
                raise LabError(f"the reflector answered {got} of {packets} packets")
            n = batch.receive()
            batch.payloads(n)
            got += n
            more = min(n, packets - sent)
            if more > 0:
                sent += batch.send([packet] * more, to)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return HostRate(packets / elapsed, packets * ELEMS_PER_PACKET / elapsed,
                    1e6 * cpu / packets)


# --- Figures -----------------------------------------------------------------------


#: The methods as the pictures name them.
METHOD_NAMES = {"INA": "INA\n(in-network)", "PS": "parameter\nserver", "ring": "ring"}


@dataclass
class AllreduceFigures:
    """What ``inabench allreduce`` measured: every case, the host's own rate, the BMv2
    build."""

    cases: list[CaseResult]
    host: HostRate | None
    bmv2: str

    def figures(self) -> dict[str, Any]:
        """As JSON-ready data (docs/allreduce.json)."""
        host = None if self.host is None else {  # older runs measured no CPU time
            k: v for k, v in asdict(self.host).items() if v is not None}
        return {"bmv2": self.bmv2, "host": host, "cases": [asdict(r) for r in self.cases]}

    @classmethod
    def from_figures(cls, doc: Any) -> AllreduceFigures:
        """From ``figures()``'s data (KeyError or TypeError if it is not that)."""
        cases = cases_from_figures(doc["cases"], CaseResult, RegimeResult, MethodRun)
        host = None if doc.get("host") is None else HostRate(**doc["host"])
        return cls(cases, host, str(doc["bmv2"]))

    def render(self) -> str:
        lines = [f"AllReduce on Mininet + {self.bmv2}, one run per case and regime; every "
                 "method on the same network.", ""]
        if self.host is not None:
            lines += [f"Host side: one worker against a loopback reflector (no switch): "
                      f"{self.host.packets_per_s:,.0f} packets/s, "
                      f"{self.host.values_per_s:,.0f} values/s{self.host.cpu()}.",
                      *render_goals("Goal of issue 24:", [self.host.goal()]), ""]
        for r in self.cases:
            lines.append(f"{r.case} ({r.topology}): {len(r.workers)} workers "
                         f"({', '.join(r.workers)}), {r.size} int32 values each, PS on "
                         f"{r.ps_host}; INA VAT (planned): {r.vat}; {r.slots} slots.")
            for g in r.regimes:
                lines.append(f"  {describe_regime(g.rate_mbit)}:")
                lines.append(f"    {'method':<6} {'seconds':>8} {'values/s':>12}   busiest "
                             "link, bytes per value | all links")
                for m in g.runs:
                    link = f"{m.busiest_link[0]}->{m.busiest_link[1]}"
                    lines.append(f"    {m.method:<6} {m.seconds:>8.2f} "
                                 f"{m.values_per_s:>12,.0f}   {link:<12} "
                                 f"{m.busiest_bytes_per_value:6.2f} | "
                                 f"{m.all_links_bytes_per_value:6.1f}")
                lines.append(f"    ratios (same run): INA/PS {g.ina_over_ps:.2f}x, "
                             f"INA/ring {g.ina_over_ring:.2f}x")
            lines.append("")
        lines.append(f"Per value on the wire: INA {INA_WIRE_PER_VALUE:.2f} bytes (a packet of "
                     f"{ELEMS_PER_PACKET} values, +{44 / ELEMS_PER_PACKET:.2f} inside BIER), "
                     f"TCP {4 * TCP_WIRE_PER_BYTE:.2f} (data segments, ACKs on top); a "
                     "worker's link carries S each way with INA, 2(N-1)/N x S with the ring, "
                     "the PS's N x S.")
        return "\n".join(lines)

    def plot(self, path: Path) -> None:
        """Per case and regime, a column: values per second (INA's rate over each other
        method's written on its bar), and bytes on the busiest link per value."""
        from matplotlib.ticker import FuncFormatter

        plt = pyplot()
        methods = ("INA", "PS", "ring")
        colors = {"INA": "#1b5e20", "PS": "#b0413e", "ring": "#2a7ab0"}
        names = [METHOD_NAMES[m] for m in methods]
        panels = [(r, g) for r in self.cases for g in r.regimes]
        fig, axes = plt.subplots(2, len(panels), figsize=(3.3 * len(panels), 6.4),
                                 squeeze=False)
        for col, (r, g) in enumerate(panels):
            top, bottom = axes[0][col], axes[1][col]
            rates = [g.rate(m) for m in methods]
            bars = top.bar(names, rates, color=[colors[m] for m in methods])
            for bar, m in zip(bars, methods, strict=True):
                label = (f"{bar.get_height():,.0f}" if m == "INA"
                         else f"INA: {g.rate('INA') / g.rate(m):.2f}x")
                top.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                             ha="center", va="bottom", fontsize=8)
            top.set_title(f"{r.topology}: {len(r.workers)} workers x {r.size:,} values\n"
                          f"{regime_title(g.rate_mbit)}", fontsize=9)
            top.set_ylim(0, max(rates) * 1.2)
            top.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}"))
            per_value = [next(x.busiest_bytes_per_value for x in g.runs if x.method == m)
                         for m in methods]
            bars = bottom.bar(names, per_value, color=[colors[m] for m in methods])
            for bar in bars:
                bottom.annotate(f"{bar.get_height():.1f}",
                                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                ha="center", va="bottom", fontsize=8)
            bottom.set_ylim(0, max(per_value) * 1.2)
            for ax in (top, bottom):
                ax.tick_params(axis="x", labelsize=8)
            if col == 0:
                top.set_ylabel("values per second (higher is better);\n"
                               "on a bar: INA's rate over that method's", fontsize=8)
                bottom.set_ylabel("bytes on the busiest link\nper value (lower is better)",
                                  fontsize=8)
        save(fig, path, self.bmv2)
