"""Benchmarks on Mininet + BMv2, each measured side by side in one run.

    inabench allreduce [--case figure1 --case fat-tree] [--rate 4] [--json-out F] [--png F]
    inabench loss [--losses 0 0.01 0.05] [--size 65536]
    inabench deploy

``allreduce``: one AllReduce three ways on the same network: INA (the switches
aggregate), a parameter server on a host outside the job, and a ring among the
workers (both over TCP, through the same switches doing plain IPv4
forwarding), in two regimes: links unlimited (the emulation is CPU-bound: every
switch is a BMv2 process on the machine's cores) and every link limited with
tc (htb) to a rate low enough that BMv2 is not the bottleneck, as links are in
a real cluster. For each: values per second, the ratios INA/PS and INA/ring,
and the bytes each method put on its busiest link per value of the array
(measured on the switch interfaces). Cases: Figure 1 (4 workers, the VAT the
planner chooses) and the k=4 fat-tree (8 workers over 4 pods).

``loss``: the INA AllReduce of Figure 1 with frames dropped (nftables) on every
link, against the same AllReduce without loss, in one run.

``deploy``: deploy time on the k=4 fat-tree, all switches at once vs one by one.

``host``: what every allreduce run also measures first, one worker against a
loopback reflector (no switch), to show the worker library is not what limits the
figures.

``inabench`` (ina.cli.inabench) runs them and prints what they return.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ina.control.controller import Controller
from ina.host.baselines import TCP_WIRE_PER_BYTE
from ina.lab.deploy import deploy
from ina.lab.mininet import Lab, LabOptions
from ina.protocol.constants import ELEMS_PER_PACKET, INA_PAYLOAD_BYTES, Op
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Topology

Link = tuple[str, str]  # (from node, to node)
Procs = dict[str, "subprocess.Popen[bytes]"]
PS_PORT = 7100
RING_PORT = 7200
#: An INA packet on a host link, and inside BIER between switches: bytes per value.
INA_WIRE_PER_VALUE = (14 + 20 + 8 + INA_PAYLOAD_BYTES) / ELEMS_PER_PACKET
ROOT = Path(__file__).resolve().parents[3]
#: The deploy-time benchmark: every host of the k=4 fat-tree in one job.
DEPLOY_TOPOLOGY = ROOT / "topologies" / "fat-tree-4.yaml"
DEPLOY_JOB = ROOT / "jobs" / "fat-tree-4-all.yaml"


@dataclass(frozen=True)
class Case:
    """A network and a job to benchmark on it."""

    name: str
    topology: Path
    job: Path  # without aggregators: the controller plans the VAT
    size: int  # values per worker
    ps_host: str  # the parameter server's host (no worker of the job)
    #: Every link's rate in the link-bound regime: low enough that the BMv2 switches,
    #: sharing the machine's cores, are not the bottleneck of any method (INA's
    #: CPU-bound rate here is several times what its links then allow).
    rate_mbit: float


CASES = {
    "figure1": Case("figure1", ROOT / "topologies" / "figure1.yaml",
                    ROOT / "jobs" / "figure1-planned.yaml", 262144, "w5", 4.0),
    # 20 switches on two cores: INA's CPU-bound rate is about what 4 Mbit/s links
    # allow, so the links must be slower to be the bottleneck.
    "fat-tree": Case("fat-tree", ROOT / "topologies" / "fat-tree-4.yaml",
                     ROOT / "jobs" / "fat-tree-4-bench.yaml", 131072, "h0_0_1", 2.0),
}


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
    """One worker against a loopback reflector (no switch)."""

    packets_per_s: float
    values_per_s: float


def describe_regime(rate_mbit: float | None) -> str:
    """A benchmark's regime in words: links unlimited, or every link's rate."""
    return ("links unlimited (CPU-bound)" if rate_mbit is None
            else f"every link limited to {rate_mbit:g} Mbit/s (htb)")


def describe_vat(job: Job) -> str:
    below = [f"{sw} aggregates {', '.join(n.covers)}" for sw, n in sorted(job.nodes.items())
             if not n.is_root]
    return f"root {job.root}" + (f"; {'; '.join(below)}" if below else "; no node below it")


# --- Measuring inside a lab --------------------------------------------------------


def _intf_bytes(topology: Topology) -> dict[Link, int]:
    """Bytes sent on each link direction, read from the switch-side interfaces
    (/proc/net/dev: /sys still shows the machine's own namespace in the sandbox)."""
    counters: dict[str, tuple[int, int]] = {}
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, fields = line.partition(":")
        values = fields.split()
        counters[name.strip()] = (int(values[0]), int(values[8]))  # rx, tx bytes
    out: dict[Link, int] = {}
    for sw in topology.switches:
        for port, nb in topology.ports(sw).items():
            rx, tx = counters[f"{sw}-eth{port}"]
            out[(sw, nb.node)] = tx  # the switch sends toward the neighbour
            out[(nb.node, sw)] = rx
    return out


def _wait_all(workers: Procs, others: Procs, timeout: float) -> dict[str, Any]:
    """Wait for every process; the workers' last output line is their JSON report."""
    results = {}
    try:
        for name, proc in {**workers, **others}.items():
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                raise RuntimeError(f"{name} failed ({proc.returncode}): {err.decode().strip()}")
            if name in workers:
                results[name] = json.loads(out.decode().strip().splitlines()[-1])
    finally:
        for proc in {**workers, **others}.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def _start_together(workers: Procs, timeout: float = 120.0) -> None:
    """Once every worker says it is set up (``ready``: its imports done, its
    connections up), tell them all to go at once, so that no worker's time includes
    waiting for another process to start."""
    deadline = time.monotonic() + timeout
    for name, proc in workers.items():
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()  # blocks until it is set up
        if line != b"ready":
            err = proc.stderr.read().decode() if proc.stderr is not None else ""
            raise RuntimeError(f"{name} did not get ready (said {line!r}): {err.strip()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} took more than {timeout:g}s to get ready")
    for proc in workers.values():
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()


class Bench:
    """A lab with a job deployed, and the three methods to run on it."""

    def __init__(self, lab: Lab, topology: Topology, topology_path: Path, job: Job,
                 job_path: Path, ps_host: str):
        self.lab, self.topology, self.topology_path = lab, topology, topology_path
        self.job, self.job_path, self.ps_host = job, job_path, ps_host

    def measure(self, name: str, start: Callable[[int], tuple[Procs, Procs]],
                size: int) -> MethodRun:
        before = _intf_bytes(self.topology)
        main, helpers = start(size)
        _start_together(main)
        results = _wait_all(main, helpers, timeout=1800)
        after = _intf_bytes(self.topology)
        link_bytes = {k: after[k] - before.get(k, 0) for k in after}
        busiest = max(link_bytes, key=lambda k: link_bytes[k])
        seconds = max(r["elapsed"] for r in results.values())
        return MethodRun(name, seconds, size / seconds, busiest, link_bytes[busiest] / size,
                         sum(link_bytes.values()) / size,
                         sum(r.get("retransmissions", 0) for r in results.values()))

    def ina(self, size: int, seed: int = 0, extra: tuple[str, ...] = ()) -> tuple[Procs, Procs]:
        return {w: self.lab.host(w).popen(
            [sys.executable, "-m", "ina.cli.inaworker", "-t", str(self.topology_path), "--job",
             str(self.job_path), "--worker", w, "--random", str(size), "--seed", str(seed + i),
             "--timeout", "60", "--wait-go", *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for i, w in enumerate(self.job.workers)}, {}

    def ps(self, size: int) -> tuple[Procs, Procs]:
        py = sys.executable
        server = self.lab.host(self.ps_host).popen(
            [py, "-m", "ina.cli.baselines", "ps-server", "--port", str(PS_PORT),
             "--workers", str(len(self.job.workers))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ip = self.topology.hosts[self.ps_host].ip
        return {w: self.lab.host(w).popen(
            [py, "-m", "ina.cli.baselines", "ps-worker", "--server", ip, "--port", str(PS_PORT),
             "--random", str(size), "--seed", str(i), "--wait-go"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for i, w in enumerate(self.job.workers)}, {"ps-server": server}

    def ring(self, size: int) -> tuple[Procs, Procs]:
        hosts = ",".join(self.topology.hosts[w].ip for w in self.job.workers)
        return {w: self.lab.host(w).popen(
            [sys.executable, "-m", "ina.cli.baselines", "ring", "--rank", str(i), "--hosts", hosts,
             "--port", str(RING_PORT), "--random", str(size), "--seed", str(i), "--wait-go"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for i, w in enumerate(self.job.workers)}, {}


@contextlib.contextmanager
def _bench_on_lab(case: Case, build_dir: Path) -> Iterator[Bench]:
    """Inside the sandbox: the case's lab with its job deployed (planned if its file
    has no VAT), for as long as the block runs."""
    topology = Topology.load(case.topology)
    spec = JobSpec.load(case.job)
    with Lab(topology, LabOptions(build_dir=build_dir)) as lab, \
            tempfile.TemporaryDirectory() as tmp:
        lab.init_switches_sync()
        job_path = Path(tmp) / f"job{spec.job_id}.yaml"
        job = deploy(lab, spec, job_path)
        yield Bench(lab, topology, case.topology, job, job_path, case.ps_host)


def run_allreduce_case(case: Case, build_dir: Path, regimes: tuple[str, ...]) -> CaseResult:
    """Inside the sandbox: the three methods in each regime, on one lab."""
    with _bench_on_lab(case, build_dir) as bench:
        job, lab = bench.job, bench.lab
        result = CaseResult(case.name, bench.topology.name, list(job.workers),
                            describe_vat(job), case.ps_host, case.size, job.slots)
        for regime in regimes:
            rate = case.rate_mbit if regime == "link" else None
            lab.limit_links(rate)
            runs = [bench.measure("INA", bench.ina, case.size),
                    bench.measure("PS", bench.ps, case.size),
                    bench.measure("ring", bench.ring, case.size)]
            result.regimes.append(RegimeResult(regime, rate, runs))
        lab.limit_links(None)
    return result


# --- The host side -----------------------------------------------------------------


def host_rate(size: int = 1 << 20) -> HostRate:
    """One worker's AllReduce against a loopback reflector in another process, which
    answers every packet at once as the root would: the worker library's own rate."""
    from ina.host.arrays import random_array
    from ina.host.config import WorkerConfig
    from ina.host.transport import UdpTransport
    from ina.host.window import RtoEstimator
    from ina.host.worker import Worker

    reflector = subprocess.Popen([sys.executable, "-m", "ina.cli.inabench", "reflect", "127.0.0.2"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert reflector.stdout is not None
        if reflector.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the reflector did not start: {reflector.stderr}")
        config = WorkerConfig(job_id=1, op=Op.SUM, pbm=1, target="127.0.0.2", window=16,
                              root="127.0.0.2")
        with UdpTransport(config.target, bind="127.0.0.1") as transport:
            worker = Worker(config, transport, timeout=10, rto=RtoEstimator(initial=0.05))
            values = random_array(size, 0)
            worker.allreduce(values[:ELEMS_PER_PACKET])  # warm up
            started = time.perf_counter()
            worker.allreduce(values)
            elapsed = time.perf_counter() - started
    finally:
        reflector.terminate()
        reflector.wait()
    packets = -(-size // ELEMS_PER_PACKET)
    return HostRate(packets / elapsed, size / elapsed)


# --- Loss ----------------------------------------------------------------------------


@dataclass
class LossRun:
    loss: float  # per link and direction
    seconds: float  # the median of the rounds
    values_per_s: float
    of_lossless: float
    retransmissions: int  # in the median round
    early_retransmissions: int
    rounds: list[float]  # seconds of each round


def run_loss(build_dir: Path, losses: list[float], size: int, case: Case,
             rounds: int = 3) -> list[LossRun]:
    """Inside the sandbox: the INA AllReduce of ``case`` at each loss rate, ``rounds``
    times, the loss rates taking turns (the median is reported: one stall of the
    machine does not decide a figure)."""
    from ina.host.arrays import digest, random_array
    from ina.model.harness import reduce_arrays

    reports: dict[float, list[dict[str, Any]]] = {loss: [] for loss in losses}
    with _bench_on_lab(case, build_dir) as bench:
        job, lab = bench.job, bench.lab
        expected = digest(reduce_arrays(job.op, [random_array(size, i)
                                                 for i in range(len(job.workers))]))
        for _ in range(rounds):
            for loss in losses:
                lab.impair(loss=loss)
                procs, _ = bench.ina(size)
                _start_together(procs)
                workers = _wait_all(procs, {}, timeout=1800)
                lab.impair()
                if any(r["sha256"] != expected for r in workers.values()):
                    raise RuntimeError(f"a result at loss {loss} is not exact")
                reports[loss].append({
                    "seconds": max(r["elapsed"] for r in workers.values()),
                    "retransmissions": sum(r["retransmissions"] for r in workers.values()),
                    "early": sum(r["early_retransmissions"] for r in workers.values())})
    runs: list[LossRun] = []
    for loss in losses:
        by_time = sorted(reports[loss], key=lambda r: float(r["seconds"]))
        median = by_time[len(by_time) // 2]
        seconds = float(median["seconds"])
        lossless = runs[0].values_per_s if runs else size / seconds
        runs.append(LossRun(loss, seconds, size / seconds, size / seconds / lossless,
                            int(median["retransmissions"]), int(median["early"]),
                            [float(r["seconds"]) for r in reports[loss]]))
    return runs


# --- Figures (JSON) ----------------------------------------------------------------


@dataclass
class AllreduceFigures:
    """What ``inabench allreduce`` measured: every case, the host's own rate, the BMv2
    build."""

    cases: list[CaseResult]
    host: HostRate | None
    bmv2: str

    def figures(self) -> dict[str, Any]:
        """As JSON-ready data (docs/allreduce.json)."""
        return {"bmv2": self.bmv2, "host": None if self.host is None else asdict(self.host),
                "cases": [asdict(r) for r in self.cases]}

    @classmethod
    def from_figures(cls, doc: Any) -> AllreduceFigures:
        """From ``figures()``'s data (KeyError or TypeError if it is not that)."""
        cases = [CaseResult(**{**c, "regimes": [
            RegimeResult(g["regime"], g["rate_mbit"],
                         [MethodRun(**{**m, "busiest_link": tuple(m["busiest_link"])})
                          for m in g["runs"]])
            for g in c["regimes"]]}) for c in doc["cases"]]
        host = None if doc.get("host") is None else HostRate(**doc["host"])
        return cls(cases, host, str(doc["bmv2"]))


def loss_from_figures(doc: Any) -> list[LossRun]:
    """``inabench loss``'s runs from their JSON (docs/loss.json)."""
    return [LossRun(**r) for r in doc]


# --- Reports -----------------------------------------------------------------------


def render_allreduce(results: list[CaseResult], host: HostRate | None, bmv2: str) -> str:
    lines = [f"AllReduce on Mininet + {bmv2}, one run per case and regime; every method on "
             "the same network.", ""]
    if host is not None:
        lines += [f"Host side: one worker against a loopback reflector (no switch): "
                  f"{host.packets_per_s:,.0f} packets/s, {host.values_per_s:,.0f} values/s.",
                  ""]
    for r in results:
        lines.append(f"{r.case} ({r.topology}): {len(r.workers)} workers "
                     f"({', '.join(r.workers)}), {r.size} int32 values each, PS on "
                     f"{r.ps_host}; INA VAT (planned): {r.vat}; {r.slots} slots.")
        for g in r.regimes:
            lines.append(f"  {describe_regime(g.rate_mbit)}:")
            lines.append(f"    {'method':<6} {'seconds':>8} {'values/s':>12}   busiest link, "
                         "bytes per value | all links")
            for m in g.runs:
                link = f"{m.busiest_link[0]}->{m.busiest_link[1]}"
                lines.append(f"    {m.method:<6} {m.seconds:>8.2f} {m.values_per_s:>12,.0f}   "
                             f"{link:<12} {m.busiest_bytes_per_value:6.2f} | "
                             f"{m.all_links_bytes_per_value:6.1f}")
            lines.append(f"    ratios (same run): INA/PS {g.ina_over_ps:.2f}x, "
                         f"INA/ring {g.ina_over_ring:.2f}x")
        lines.append("")
    lines.append(f"Per value on the wire: INA {INA_WIRE_PER_VALUE:.2f} bytes (a packet of "
                 f"{ELEMS_PER_PACKET} values, +{44 / ELEMS_PER_PACKET:.2f} inside BIER), "
                 f"TCP {4 * TCP_WIRE_PER_BYTE:.2f} (data segments, ACKs on top); a worker's "
                 "link carries S each way with INA, 2(N-1)/N x S with the ring, the PS's N x S.")
    return "\n".join(lines)


def render_loss(runs: list[LossRun], case: Case, size: int) -> str:
    lines = [f"INA AllReduce of {size} values per worker on {case.name}, frames dropped on "
             "every link (each direction) by nftables; in one run, the median of "
             f"{len(runs[0].rounds)} AllReduces per loss rate (taking turns), every result "
             "exact.", "",
             f"{'loss per link':>14} {'seconds':>8} {'values/s':>10} {'of lossless':>12} "
             f"{'retransmissions':>16} {'(early)':>8}"]
    for r in runs:
        lines.append(f"{r.loss:>14.0%} {r.seconds:>8.2f} {r.values_per_s:>10,.0f} "
                     f"{r.of_lossless:>11.0%} {r.retransmissions:>16} "
                     f"{r.early_retransmissions:>8}")
    return "\n".join(lines)


#: The methods as the pictures name them.
METHOD_NAMES = {"INA": "INA\n(in-network)", "PS": "parameter\nserver", "ring": "ring"}


def plot_allreduce(results: list[CaseResult], path: Path, bmv2: str) -> None:
    """Per case and regime, a column: values per second (INA's rate over each other
    method's written on its bar), and bytes on the busiest link per value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    methods = ("INA", "PS", "ring")
    colors = {"INA": "#1b5e20", "PS": "#b0413e", "ring": "#2a7ab0"}
    names = [METHOD_NAMES[m] for m in methods]
    panels = [(r, g) for r in results for g in r.regimes]
    fig, axes = plt.subplots(2, len(panels), figsize=(3.3 * len(panels), 6.4), squeeze=False)
    for col, (r, g) in enumerate(panels):
        regime = ("links unlimited (CPU-bound)" if g.rate_mbit is None
                  else f"every link {g.rate_mbit:g} Mbit/s")
        top, bottom = axes[0][col], axes[1][col]
        rates = [g.rate(m) for m in methods]
        bars = top.bar(names, rates, color=[colors[m] for m in methods])
        for bar, m in zip(bars, methods, strict=True):
            label = (f"{bar.get_height():,.0f}" if m == "INA"
                     else f"INA: {g.rate('INA') / g.rate(m):.2f}x")
            top.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                         ha="center", va="bottom", fontsize=8)
        top.set_title(f"{r.topology}: {len(r.workers)} workers x {r.size:,} values\n{regime}",
                      fontsize=9)
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
    fig.text(0.01, 0.005, bmv2, fontsize=6, color="#555555")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --- Deploy time -----------------------------------------------------------------------


def run_deploy_bench(build_dir: Path, topology_path: Path = DEPLOY_TOPOLOGY,
                     job_path: Path = DEPLOY_JOB, repeat: int = 5) -> str:
    """Inside the sandbox: deploy and tear down a job ``repeat`` times with all switches
    written at once, and as many times one switch after another; report both."""
    from ina.control.p4runtime import connect

    topology = Topology.load(topology_path)
    spec = JobSpec.load(job_path)
    times: dict[bool, list[float]] = {True: [], False: []}
    with Lab(topology, LabOptions(build_dir=build_dir)) as lab:
        lab.init_switches_sync()

        async def measure() -> None:
            async with connect(topology, lab.p4info, access=lab.access) as clients:
                for _ in range(repeat):
                    for concurrent in (True, False):
                        ctl = Controller(topology, clients, concurrent=concurrent)
                        started = time.perf_counter()
                        await ctl.deploy(spec)
                        times[concurrent].append(time.perf_counter() - started)
                        await ctl.teardown(spec.job_id)

        asyncio.run(measure())
    at_once, serial = statistics.median(times[True]), statistics.median(times[False])
    switches = len(topology.switches)
    return (f"Deploying {job_path} on {topology.name} ({switches} switches), median of "
            f"{repeat}:\n  all switches at once:   {at_once * 1000:7.1f} ms\n"
            f"  one after another:      {serial * 1000:7.1f} ms\n"
            f"  speed-up: {serial / at_once:.2f}x")
