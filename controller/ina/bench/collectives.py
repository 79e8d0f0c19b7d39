"""Every collective through the switches against gloo and the ring on hosts, on the
same Mininet network, in one run (``inabench collectives``, ``make bench-collectives``).

Per case (Figure 1 with 4 workers, the k=4 fat-tree with 8) and regime (links
unlimited, CPU-bound; every link limited with tc htb, link-bound: ``inabench
allreduce``'s two), each collective (Broadcast, Reduce, Reduce-scatter, Allgather,
AllReduce) on an array of S float32 values three ways:

- ``INA``: through the switches (ina.host.worker.Worker; reductions through the block
  quantization in 32-bit elements, movements bit for bit);
- ``gloo``: torch.distributed's same collective on the same hosts (TCP between them
  through the switches' IPv4 forwarding), on the same float32 arrays;
- ``hosts``: the ring of hosts the fallback uses when no switch aggregates a job
  (ina.host.onhosts), the same call bodies as through the switches.

Barrier: latency only, the mean of BARRIER_REPEAT in a row. And an AllReduce of a
float16 array with 16-bit elements, with 32-bit elements, and gloo's float16 one.

Each rank is one process per worker's host for the whole case (ina.bench.collective_rank),
so torch's import and gloo's set-up are in no figure; every measurement starts all
ranks at once (ina.bench.timing.start_together) and takes the slowest rank's time.
Bytes come from the switch-side interface counters (ina.bench.timing.Traffic): the
busiest link direction, and each worker's uplink and downlink, per value of S. Every
result is checked at every rank against the exact one: bit for bit for movements,
within the reported bound for the switches' reductions (and within float rounding
for gloo's). The issue's goals (issue 17) are printed next to what was measured.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ina.bench.collective_rank import OWNED, OWNED_COLLECTIVES, Command
from ina.bench.goals import Goal, Goals, less_cpu
from ina.bench.goals import render as render_goals
from ina.bench.hostprocess import HostProcess, stop_all
from ina.bench.onlab import (
    CASES,
    COLLECTIVE_SIZES,
    INA_WIRE_PER_VALUE,
    Bench,
    Case,
    bench_on_lab,
    describe_vat,
)
from ina.bench.output import (
    cases_from_figures,
    describe_regime,
    pyplot,
    regime_title,
    save,
)
from ina.bench.timing import CpuTime, Link, Procs, Traffic, busiest, start_together
from ina.errors import LabError
from ina.protocol.constants import BIER_HEADER_BYTES, ELEMS16_PER_PACKET, ELEMS_PER_PACKET

#: The collectives with an array, in the order they are run and shown.
ARRAY_COLLECTIVES = ("broadcast", "reduce", "reduce_scatter", "allgather", "allreduce")
METHODS = ("INA", "gloo", "hosts")
NAMES = {"broadcast": "Broadcast", "reduce": "Reduce", "reduce_scatter": "Reduce-scatter",
         "allgather": "Allgather", "allreduce": "AllReduce", "barrier": "Barrier"}
#: Barriers in a row per measurement (their mean is the latency).
BARRIER_REPEAT = 10
#: The store's port on rank 0's host (gloo).
MASTER_PORT = 29510
#: Seconds a rank waits without progress before its collective fails.
RANK_TIMEOUT = 120.0
#: Seconds the ranks have to be up (torch imported, gloo's group set up), and to
#: report one measurement.
UP_TIMEOUT = 300.0
MEASURE_TIMEOUT = 1800.0
#: A 32-bit data packet inside BIER, per value (a host link's is INA_WIRE_PER_VALUE).
BIER_WIRE_PER_VALUE = INA_WIRE_PER_VALUE + BIER_HEADER_BYTES / ELEMS_PER_PACKET
#: The same with 16-bit elements.
BIER_WIRE_PER_VALUE16 = BIER_WIRE_PER_VALUE * ELEMS_PER_PACKET / ELEMS16_PER_PACKET


@dataclass
class CollectiveRun:
    """One collective by one method, measured: ``seconds`` is the slowest rank's (a
    Barrier's: per barrier), bytes are per value of S on the interface counters."""

    collective: str
    method: str  # INA, gloo or hosts
    dtype: str  # float32 or float16
    width: int | None  # INA's elements (bits); None: the type's default / not INA
    seconds: float
    values_per_s: float  # S / seconds (0 for a Barrier)
    busiest_link: Link
    busiest_bytes_per_value: float
    all_links_bytes_per_value: float
    uplink_bytes_per_value: dict[str, float]  # per worker: worker -> its edge switch
    downlink_bytes_per_value: dict[str, float]  # its edge switch -> worker
    correct: bool  # at every rank
    max_error: float  # largest difference from the exact result, of every rank
    retransmissions: int = 0
    on_hosts: int = 0  # ranks whose call through the switches ran on hosts instead
    errors: list[str] = field(default_factory=list)
    #: CPU seconds over the measurement: every BMv2 switch's process, every rank's.
    switch_cpu_s: float = 0.0
    rank_cpu_s: float = 0.0
    values: int = 0  # values the measurement moved: S per repetition

    @property
    def label(self) -> str:
        if self.method == "INA" and self.width is not None:
            return f"INA {self.width}-bit"
        if self.method == "gloo" and self.dtype != "float32":
            return f"gloo {self.dtype}"
        return "hosts (ring)" if self.method == "hosts" else self.method

    @property
    def ok(self) -> bool:
        return self.correct and not self.errors and self.on_hosts == 0

    def cpu_us_per_value(self) -> tuple[float, float] | None:
        """(BMv2 switches, ranks) CPU microseconds per value of S (None: not measured)."""
        if not self.values or not (self.switch_cpu_s or self.rank_cpu_s):
            return None
        return (self.switch_cpu_s / self.values * 1e6, self.rank_cpu_s / self.values * 1e6)

    def busiest_line_rate(self, rate_mbit: float) -> float:
        """The busiest link's bytes per second over its line rate."""
        return self.busiest_bytes_per_value * self.values_per_s / (rate_mbit * 1e6 / 8)


@dataclass
class CollectivesRegime:
    regime: str  # "cpu" (links unlimited) or "link" (every link rate-limited)
    rate_mbit: float | None
    runs: list[CollectiveRun]

    def run(self, collective: str, method: str, dtype: str = "float32",
            width: int | None = None) -> CollectiveRun | None:
        return next((r for r in self.runs if (r.collective, r.method, r.dtype, r.width)
                     == (collective, method, dtype, width)), None)

    def ratio(self, a: CollectiveRun | None, b: CollectiveRun | None) -> float | None:
        """``a``'s speed over ``b``'s (None if either is missing or failed)."""
        if a is None or b is None or not a.ok or not b.ok:
            return None
        return b.seconds / a.seconds


@dataclass
class CollectivesCase:
    case: str
    topology: str
    workers: list[str]
    vat: str
    size: int  # S: values per collective
    slots: int
    regimes: list[CollectivesRegime] = field(default_factory=list)


# --- The plan of one regime ------------------------------------------------------------


def commands(size: int) -> list[Command]:
    """What one regime measures, in order."""
    plan = [Command(m, c, size) for c in ARRAY_COLLECTIVES
            for m in (*METHODS, *((OWNED,) if c in OWNED_COLLECTIVES else ()))]
    plan += [Command(m, "barrier", 1, repeat=BARRIER_REPEAT) for m in METHODS]
    plan += [Command("INA", "allreduce", size, "float16", 16),
             Command("INA", "allreduce", size, "float16", 32),
             Command("gloo", "allreduce", size, "float16")]
    return plan


# --- Measuring on a lab ----------------------------------------------------------------


class Ranks:
    """The rank processes (ina.bench.collective_rank) on the job's workers' hosts."""

    def __init__(self, bench: Bench, workdir: Path):
        self.bench = bench
        self.workers = list(bench.job.workers)
        self.procs: Procs = {}
        try:
            for w, env in bench.rank_envs(MASTER_PORT).items():
                self.procs[w] = HostProcess.on(
                    bench.lab, w, [sys.executable, "-m", "ina.bench.collective_rank",
                                   "--worker", w, "--timeout", str(RANK_TIMEOUT)],
                    workdir / f"{w}.log", env=env, ask=b"quit")
            for proc in self.procs.values():
                proc.ready(b"up", UP_TIMEOUT)
        except BaseException:
            self.close()
            raise

    def _report(self, worker: str) -> dict[str, Any]:
        proc = self.procs[worker]
        line = proc.next_line(MEASURE_TIMEOUT)
        if not line:
            what = "ended" if line == b"" else f"did not answer within {MEASURE_TIMEOUT:g}s"
            raise LabError(f"the rank on {worker} {what}: {proc.tail()}")
        report: dict[str, Any] = json.loads(line)
        return report

    def measure(self, command: Command) -> CollectiveRun:
        """``command`` at every rank at once; its figures."""
        topology = self.bench.topology
        for proc in self.procs.values():
            proc.send(asdict(command))
        traffic = Traffic(topology)
        pids: dict[str, Sequence[int]] = {
            "switches": list(self.bench.lab.switch_pids().values()),
            "ranks": [proc.proc.pid for proc in self.procs.values()]}
        counted: list[CpuTime] = []
        start_together(self.procs, on_ready=lambda: counted.append(CpuTime(pids)))
        reports = {w: self._report(w) for w in self.workers}
        link_bytes = traffic.since()
        used = counted[0].since()
        per = command.size * command.repeat
        top = busiest(link_bytes)
        edges = {w: topology.host_attachment(w)[0] for w in self.workers}
        seconds = max(r["seconds"] for r in reports.values()) / command.repeat
        errors = [f"{w}: {r['error']}" for w, r in reports.items() if r["error"]]
        return CollectiveRun(
            command.collective, command.method, command.dtype,
            command.width if command.method == "INA" and command.dtype != "float32" else None,
            seconds, 0.0 if command.collective == "barrier" else command.size / seconds,
            top, link_bytes[top] / per, sum(link_bytes.values()) / per,
            {w: link_bytes[(w, edges[w])] / per for w in self.workers},
            {w: link_bytes[(edges[w], w)] / per for w in self.workers},
            all(r["correct"] for r in reports.values()),
            max((r["max_error"] for r in reports.values() if not r["error"]), default=0.0),
            sum(r["retransmissions"] for r in reports.values()),
            sum(1 for r in reports.values()
                if r["on_hosts"] and command.method in ("INA", OWNED)),
            errors, used["switches"], used["ranks"], per)

    def close(self) -> None:
        stop_all(self.procs.values(), grace=30)


@contextmanager
def ranks_on(bench: Bench) -> Iterator[Ranks]:
    with tempfile.TemporaryDirectory() as tmp:
        ranks = Ranks(bench, Path(tmp))
        try:
            yield ranks
        finally:
            ranks.close()


def measure_on_bench(bench: Bench, case: Case, regimes: tuple[str, ...], size: int,
                     plan: list[Command] | None = None) -> CollectivesCase:
    """On a lab with the job deployed: every command of ``plan`` (default: every
    collective, ``commands(size)``) in each regime, by the same rank processes."""
    job = bench.job
    plan = plan or commands(size)
    result = CollectivesCase(case.name, bench.topology.name, list(job.workers),
                             describe_vat(job), size, job.slots)
    with ranks_on(bench) as ranks:
        for regime, rate in bench.regimes(regimes, case.rate_mbit):
            runs = [ranks.measure(c) for c in plan]
            result.regimes.append(CollectivesRegime(regime, rate, runs))
    return result


def run_case(case: Case, build_dir: Path, regimes: tuple[str, ...], size: int
             ) -> CollectivesCase:
    """Inside the sandbox: the case's lab, its job deployed, every measurement."""
    with bench_on_lab(case, build_dir) as bench:
        return measure_on_bench(bench, case, regimes, size)


# --- Goals -------------------------------------------------------------------------------


Wanted = tuple[str, str, str, int | None]  # method, collective, dtype, INA's width


def goals(case: CollectivesCase) -> list[Goal]:
    """The issue's goals (rate-limited links) against this case's measurements: passed,
    missed, or None where nothing was measured (with why)."""
    link = next((r for r in case.regimes if r.regime == "link"), None)
    if link is None or link.rate_mbit is None:
        return [Goal(case.case, "every goal (rate-limited links)",
                     "the link regime was not run", None)]
    judged = Goals[CollectiveRun](case.case, _why_not)
    _traffic_goals(judged, link, len(case.workers))
    _speed_goals(judged, link, len(case.workers))
    wrong = [f"{r.label} {NAMES[r.collective]} ({regime.regime})" for regime in case.regimes
             for r in regime.runs if r.method in ("INA", OWNED) and not r.ok]
    judged.add("INA exact or within the reported bound at every worker, lossless",
               "every INA result" if not wrong else f"NOT: {', '.join(wrong)}", not wrong)
    judged.add("... under 1% and 5% loss per link, nothing at non-members",
               "not measured by this benchmark (tests/bmv2/test_collectives.py)", None)
    return judged.goals


def owner_goals(case: CollectivesCase) -> list[Goal]:
    """Issue 24's goals on this case's rate-limited links for the collectives whose
    chunks have one owner: what their uplinks carry, and Allgather's speed."""
    link = next((r for r in case.regimes if r.regime == "link"), None)
    if link is None or link.rate_mbit is None:
        return [Goal(case.case, "Broadcast's and Allgather's uplinks (rate-limited links)",
                     "the link regime was not run", None)]
    judged = Goals[CollectiveRun](case.case, _why_not)

    def uplinks(r: CollectiveRun, but: str = "") -> list[float]:
        """Each worker's uplink (but ``but``'s), in S's bytes in 32-bit packets."""
        return [v / INA_WIRE_PER_VALUE for w, v in r.uplink_bytes_per_value.items() if w != but]

    most = 1 / len(case.workers) + 0.1
    judged.judge(f"Allgather ({OWNED}): each uplink <= S/N + 10% of S (<= {most:.3f} S)",
                 _found(link, _owned("allgather")),
                 lambda rs: (f"largest {max(uplinks(rs[0])):.3f} S",
                             max(uplinks(rs[0])) <= most))
    root = case.workers[Command.root]  # the default root rank of the benchmark's commands
    judged.judge(f"Broadcast ({OWNED}): every uplink but the root's ({root}) carries headers "
                 "only (<= 10% of S)", _found(link, _owned("broadcast")),
                 lambda rs: (f"largest {max(uplinks(rs[0], root)):.3f} S",
                             max(uplinks(rs[0], root)) <= 0.1))
    # What each worker lacks comes down once (an owner's own data never comes back):
    # a Broadcast's S at every worker but the root, an Allgather's other parts.
    n = len(case.workers)
    for c in OWNED_COLLECTIVES:
        lacks = {w: float(w != root) if c == "broadcast" else (n - 1) / n
                 for w in case.workers}
        judged.judge(f"{NAMES[c]} ({OWNED}): each downlink carries what its worker lacks "
                     "once, and headers ("
                     + ("S, the root's none" if c == "broadcast" else "(N-1)/N of S")
                     + ": -5% to +10% of S)", _found(link, _owned(c)),
                     partial(_lacked, lacks=lacks))
    for m, which in (("INA", _ina), (OWNED, _owned)):
        judged.judge(f"Allgather: {m} >= 1.2x gloo's speed",
                     _found(link, which("allgather"), _gloo("allgather")), _faster(1.2))
    return judged.goals


#: The collectives that reduce values, whose CPU per value issue 24 compares.
REDUCING_COLLECTIVES = ("reduce", "reduce_scatter", "allreduce")


def cpu_goals(case: CollectivesCase) -> list[Goal]:
    """Issue 24's goal on this case's CPU-bound regime (links unlimited): per value
    reduced, INA's CPU (its switches' and ranks') below gloo's."""
    cpu = next((r for r in case.regimes if r.regime == "cpu"), None)
    judged = Goals[CollectiveRun](case.case, _why_not)
    for c in REDUCING_COLLECTIVES:
        goal = f"{NAMES[c]}, links unlimited: CPU per value, INA's total below gloo's"
        ina, gloo = (None, None) if cpu is None else (cpu.run(c, "INA"), cpu.run(c, "gloo"))
        if ina is None or gloo is None:
            judged.add(goal, "the CPU-bound regime was not run", None)
        elif ina.cpu_us_per_value() is None or gloo.cpu_us_per_value() is None:
            judged.add(goal, "no CPU time in these figures (measured before it was counted)",
                       None)
        else:
            judged.judge(goal, [("INA", ina), ("gloo", gloo)], _less_cpu)
    return judged.goals


#: Issue 24's speed goals with links unlimited: INA against gloo, per collective.
UNLIMITED_SPEED = (("reduce", 1.0), ("reduce_scatter", 1.0), ("allreduce", 1.0),
                   ("broadcast", 0.8), ("allgather", 0.8))


def unlimited_speed_goals(case: CollectivesCase) -> list[Goal]:
    """Issue 24's goals on this case's CPU-bound regime (links unlimited): INA at
    least as fast as gloo where it reduces, at least 0.8x where it moves values."""
    cpu = next((r for r in case.regimes if r.regime == "cpu"), None)
    if cpu is None:
        return [Goal(case.case, "INA's speed against gloo's, links unlimited",
                     "the CPU-bound regime was not run", None)]
    judged = Goals[CollectiveRun](case.case, _why_not)
    for c, least in UNLIMITED_SPEED:
        judged.judge(f"{NAMES[c]}, links unlimited: INA >= {least}x gloo's speed",
                     _found(cpu, _ina(c), _gloo(c)), _faster(least))
    return judged.goals


def _less_cpu(runs: list[CollectiveRun]) -> tuple[str, bool]:
    (switches, ranks), gloo = (r.cpu_us_per_value() or (0.0, 0.0) for r in runs)
    return less_cpu(switches, ranks, sum(gloo), "us")


def _lacked(rs: list[CollectiveRun], lacks: dict[str, float]) -> tuple[str, bool]:
    """Each worker's downlink (in S's bytes in 32-bit packets) against what it lacks."""
    r = rs[0]
    over = {w: r.downlink_bytes_per_value[w] / INA_WIRE_PER_VALUE - lacks[w] for w in lacks}
    return (f"{min(over.values()):+.3f} to {max(over.values()):+.3f} S over what each lacks",
            min(over.values()) >= -0.05 and max(over.values()) <= 0.10)


def _traffic_goals(judged: Goals[CollectiveRun], link: CollectivesRegime, n: int) -> None:
    """Where each collective puts its bytes: each downlink's share of S, no link
    carrying a Broadcast twice, 16-bit elements' bytes per value."""

    def downlinks(r: CollectiveRun) -> list[float]:
        """Each worker's downlink, in S's bytes in 32-bit packets on a host link."""
        return [v / INA_WIRE_PER_VALUE for v in r.downlink_bytes_per_value.values()]

    most = 1 / n + 0.1
    judged.judge(f"Reduce-scatter: each downlink carries S/N + completions, <= S/N + 10% of "
                 f"S (<= {most:.3f} S)", _found(link, _ina("reduce_scatter")),
                 lambda rs: (f"largest {max(downlinks(rs[0])):.3f} S",
                             max(downlinks(rs[0])) <= most))
    for c in ("broadcast", "allgather"):
        judged.judge(f"{NAMES[c]}: each downlink carries S (0.95 to 1.10 S)",
                     _found(link, _ina(c)),
                     lambda rs: (f"{min(downlinks(rs[0])):.3f} to {max(downlinks(rs[0])):.3f} S",
                                 min(downlinks(rs[0])) >= 0.95
                                 and max(downlinks(rs[0])) <= 1.10))
    judged.judge("Broadcast: no link carries its data twice (busiest <= 1.1x one copy in BIER)",
                 _found(link, _ina("broadcast")),
                 lambda rs: (f"busiest {'->'.join(rs[0].busiest_link)} "
                             f"{rs[0].busiest_bytes_per_value / BIER_WIRE_PER_VALUE:.2f}x one "
                             "copy", rs[0].busiest_bytes_per_value / BIER_WIRE_PER_VALUE <= 1.1))
    judged.judge("16-bit elements (float16 AllReduce): <= 2.3 bytes per value on every link",
                 _found(link, _ina("allreduce", "float16", 16)),
                 lambda rs: (f"busiest {'->'.join(rs[0].busiest_link)} "
                             f"{rs[0].busiest_bytes_per_value:.2f}",
                             rs[0].busiest_bytes_per_value <= 2.3))


def _speed_goals(judged: Goals[CollectiveRun], link: CollectivesRegime, n: int) -> None:
    """How fast: INA against gloo, against its links' line rate, and 16-bit elements
    against 32-bit ones and gloo's float16."""
    for c, least in (("broadcast", 1.5), ("reduce", 1.3), ("reduce_scatter", 0.9),
                     ("allgather", 0.9)):
        judged.judge(f"{NAMES[c]}: INA >= {least}x gloo's speed",
                     _found(link, _ina(c), _gloo(c)), _faster(least))
    rate = link.rate_mbit or 0.0
    for c in ("reduce_scatter", "allgather"):
        judged.judge(f"{NAMES[c]}: INA at >= 90% of its busiest link's line rate",
                     _found(link, _ina(c)),
                     lambda rs: (f"{rs[0].busiest_line_rate(rate):.0%} of {rate:g} Mbit/s on "
                                 f"{'->'.join(rs[0].busiest_link)}",
                                 rs[0].busiest_line_rate(rate) >= 0.9))
    sixteen = _ina("allreduce", "float16", 16)
    judged.judge("float16 AllReduce: 16-bit elements >= 1.8x 32-bit elements",
                 _found(link, sixteen, _ina("allreduce", "float16", 32)), _faster(1.8))
    least = 1.3 if n <= 4 else 1.5
    judged.judge(f"float16 AllReduce: 16-bit elements >= {least}x gloo's (float16: gloo "
                 "takes it)", _found(link, sixteen, _gloo("allreduce", "float16")),
                 _faster(least))


def _ina(collective: str, dtype: str = "float32", width: int | None = None) -> Wanted:
    return ("INA", collective, dtype, width)


def _owned(collective: str) -> Wanted:
    return (OWNED, collective, "float32", None)


def _gloo(collective: str, dtype: str = "float32") -> Wanted:
    return ("gloo", collective, dtype, None)


def _found(link: CollectivesRegime, *wanted: Wanted) -> list[tuple[str, CollectiveRun | None]]:
    """The runs a goal is judged on, each named as the report says it was not run."""
    return [(f"{m} {NAMES[c]}", link.run(c, m, d, w)) for m, c, d, w in wanted]


def _why_not(r: CollectiveRun) -> str | None:
    """Why a run does not count for a goal (it failed), or None."""
    return None if r.ok else f"{r.label} {NAMES[r.collective]}: {_failure(r)}"


def _faster(least: float) -> Callable[[list[CollectiveRun]], tuple[str, bool]]:
    """The first run at least ``least`` times as fast as the second."""
    return lambda rs: (f"{rs[1].seconds / rs[0].seconds:.2f}x",
                       rs[1].seconds / rs[0].seconds >= least)


# --- Figures (JSON) ----------------------------------------------------------------------


@dataclass
class CollectivesFigures:
    """What ``inabench collectives`` measured, the BMv2 build and torch's version."""

    cases: list[CollectivesCase]
    bmv2: str
    torch: str

    def figures(self) -> dict[str, Any]:
        """As JSON-ready data (docs/collectives.json); the goals are derived, for readers."""
        return {"bmv2": self.bmv2, "torch": self.torch,
                "cases": [asdict(c) for c in self.cases],
                "goals": [asdict(x) for c in self.cases
                          for x in (*goals(c), *owner_goals(c), *unlimited_speed_goals(c),
                                    *cpu_goals(c))]}

    @classmethod
    def from_figures(cls, doc: Any) -> CollectivesFigures:
        """From ``figures()``'s data (KeyError or TypeError if it is not that)."""
        cases = cases_from_figures(doc["cases"], CollectivesCase, CollectivesRegime,
                                   CollectiveRun)
        return cls(cases, str(doc["bmv2"]), str(doc["torch"]))

    # --- text ---------------------------------------------------------------------------

    def render(self) -> str:
        lines = [f"Collectives on Mininet + {self.bmv2}; gloo of torch {self.torch}. One run: "
                 "every method on the same network and the same arrays, each measurement "
                 "starting every rank at once and taking the slowest rank's time; bytes per "
                 "value of S from the switches' interface counters.", ""]
        for c in self.cases:
            n = len(c.workers)
            lines.append(f"{c.case} ({c.topology}): {n} workers ({', '.join(c.workers)}); "
                         f"S = {c.size:,} float32 values (Allgather: S/{n} from each worker; "
                         f"Reduce-scatter: S/{n} to each); Broadcast from and Reduce to rank "
                         f"0; INA VAT (planned): {c.vat}; {c.slots} slots.")
            for g in c.regimes:
                lines += self._regime(c, g)
            lines.append("")
        lines.append(f"Per value on the wire with INA: {INA_WIRE_PER_VALUE:.2f} bytes on a host "
                     f"link ({ELEMS_PER_PACKET} 32-bit values a packet), "
                     f"{BIER_WIRE_PER_VALUE:.2f} inside BIER; 16-bit elements "
                     f"{INA_WIRE_PER_VALUE / 2:.2f} and {BIER_WIRE_PER_VALUE16:.2f}. INA/x: "
                     "INA's speed over x's in the same run. hosts (ring): the ring on hosts "
                     "the fallback uses, which moves the whole array whatever the collective.")
        lines += ["", *render_goals("Goals of issue 17 (rate-limited links), against this run:",
                                    (x for c in self.cases for x in goals(c)))]
        lines += ["", *render_goals("Goals of issue 24 (one owner's chunks, rate-limited "
                                    "links; speed and CPU per value, links unlimited), "
                                    "against this run:",
                                    (x for c in self.cases
                                     for x in (*owner_goals(c), *unlimited_speed_goals(c),
                                               *cpu_goals(c))))]
        return "\n".join(lines)

    def _regime(self, c: CollectivesCase, g: CollectivesRegime) -> list[str]:
        lines = [f"  {describe_regime(g.rate_mbit)}:",
                 f"    {'collective':<15}{'method':<14}{'seconds':>8}{'values/s':>12}"
                 f"{'INA/x':>7}   {'busiest link':<18}{'B/value':>7}{'up max':>8}"
                 f"{'down max':>9}  check (every rank)"]
        for k in ARRAY_COLLECTIVES:
            for m in (*METHODS, *((OWNED,) if k in OWNED_COLLECTIVES else ())):
                r = g.run(k, m)
                if r is not None:
                    ratio = None if m == "INA" else g.ratio(g.run(k, "INA"), r)
                    lines.append(self._row(NAMES[k], r, ratio))
                else:
                    lines.append(f"    {NAMES[k]:<15}{m:<14}not run")
        lines.append("    each worker's uplink/downlink, bytes per value:")
        for r in g.runs:
            if r.collective != "barrier":
                per = " ".join(f"{w} {r.uplink_bytes_per_value[w]:.2f}/"
                               f"{r.downlink_bytes_per_value[w]:.2f}" for w in c.workers)
                what = NAMES[r.collective] + ("" if r.dtype == "float32" else f" {r.dtype}")
                lines.append(f"      {what:<20}{r.label:<14}{per}")
        sixteen = g.run("allreduce", "INA", "float16", 16)
        lines.append("    AllReduce of a float16 array:")
        for r in g.runs:
            if r.collective == "allreduce" and r.dtype == "float16":
                lines.append(self._row("float16", r,
                                       None if r is sixteen else g.ratio(sixteen, r)))
        thirty_two = g.run("allreduce", "INA", "float16", 32)
        gloo16 = g.run("allreduce", "gloo", "float16")
        lines.append(f"    ratios (same run): 16-bit/32-bit {_ratio(g.ratio(sixteen, thirty_two))}"
                     f", 16-bit/gloo float16 {_ratio(g.ratio(sixteen, gloo16))}")
        lines += self._cpu(g)
        barriers = [r for r in g.runs if r.collective == "barrier"]
        lines.append(f"    Barrier, mean of {BARRIER_REPEAT} in a row: " + ", ".join(
            f"{r.label} {r.seconds * 1000:.1f} ms" + ("" if r.ok else " (FAILED)")
            for r in barriers))
        return lines

    @staticmethod
    def _cpu(g: CollectivesRegime) -> list[str]:
        """CPU microseconds per value of S, by kind of process, INA against gloo."""
        if not any(r.cpu_us_per_value() for r in g.runs):
            return []
        lines = ["    CPU per value of S (us: BMv2 switches + ranks = total):"]
        for k in ARRAY_COLLECTIVES:
            parts = []
            for m in ("INA", "gloo"):
                r = g.run(k, m)
                us = None if r is None else r.cpu_us_per_value()
                parts.append(f"{m} " + ("not measured" if us is None else
                                        f"{us[0]:.2f} + {us[1]:.2f} = {sum(us):.2f}"))
            lines.append(f"      {NAMES[k]:<15}" + "   ".join(parts))
        return lines

    @staticmethod
    def _row(what: str, r: CollectiveRun, x: float | None) -> str:
        link = f"{r.busiest_link[0]}->{r.busiest_link[1]}"
        check = ("exact" if r.max_error == 0 else f"within bound (max error {r.max_error:.1e})"
                 ) if r.ok else _failure(r)
        if r.retransmissions:
            check += f"; {r.retransmissions} retransmissions"
        return (f"    {what:<15}{r.label:<14}{r.seconds:>8.2f}{r.values_per_s:>12,.0f}"
                f"{_ratio(x):>7}   {link:<18}{r.busiest_bytes_per_value:>7.2f}"
                f"{max(r.uplink_bytes_per_value.values()):>8.2f}"
                f"{max(r.downlink_bytes_per_value.values()):>9.2f}  {check}")

    # --- picture --------------------------------------------------------------------------

    def plot(self, path: Path) -> None:
        """Per case and regime, a column: values per second of every collective by each
        method (INA's speed over the others' on their bars), bytes per value on the
        busiest link, and the float16 AllReduce three ways."""
        import numpy as np

        plt = pyplot()

        colors = {"INA": "#1b5e20", "gloo": "#b0413e", "hosts": "#2a7ab0"}
        panels = [(c, g) for c in self.cases for g in c.regimes]
        fig, axes = plt.subplots(3, len(panels), figsize=(5.2 * len(panels), 10.5),
                                 squeeze=False)
        x = np.arange(len(ARRAY_COLLECTIVES))
        bar = 0.27
        for col, (c, g) in enumerate(panels):
            top, middle, bottom = (axes[row][col] for row in range(3))
            for i, m in enumerate(METHODS):
                runs = [g.run(k, m) for k in ARRAY_COLLECTIVES]
                rates = [0.0 if r is None or not r.ok else r.values_per_s for r in runs]
                per = [0.0 if r is None else r.busiest_bytes_per_value for r in runs]
                label = "hosts (ring)" if m == "hosts" else m
                bars = top.bar(x + (i - 1) * bar, rates, bar, color=colors[m], label=label)
                for b, k, r in zip(bars, ARRAY_COLLECTIVES, runs, strict=True):
                    ratio = g.ratio(g.run(k, "INA"), r)
                    text = ("not run" if r is None else "FAILED" if not r.ok else
                            f"{b.get_height() / 1000:,.0f}k" if m == "INA" else _ratio(ratio))
                    top.annotate(text, (b.get_x() + b.get_width() / 2, b.get_height()),
                                 ha="center", va="bottom", fontsize=6, rotation=90)
                middle.bar(x + (i - 1) * bar, per, bar, color=colors[m], label=label)
            top.set_title(f"{c.case}: {len(c.workers)} workers, S = {c.size:,} float32\n"
                          f"{regime_title(g.rate_mbit)}", fontsize=9)
            top.set_ylim(0, top.get_ylim()[1] * 1.3)
            barriers = ", ".join(f"{r.label} {r.seconds * 1000:.1f} ms" for r in g.runs
                                 if r.collective == "barrier")
            top.text(0.01, 0.97, f"Barrier: {barriers}", transform=top.transAxes, fontsize=6,
                     va="top")
            for ax in (top, middle):
                ax.set_xticks(x, [NAMES[k] for k in ARRAY_COLLECTIVES], fontsize=7)
            sixteen = g.run("allreduce", "INA", "float16", 16)
            fp16 = [r for r in g.runs if r.collective == "allreduce" and r.dtype == "float16"]
            bars = bottom.bar([r.label for r in fp16],
                              [r.values_per_s if r.ok else 0.0 for r in fp16],
                              color=[colors[r.method] for r in fp16])
            for b, r in zip(bars, fp16, strict=True):
                text = "FAILED" if not r.ok else (
                    f"{r.values_per_s / 1000:,.0f}k, {r.busiest_bytes_per_value:.2f} B/value"
                    if r is sixteen else f"INA 16-bit: {_ratio(g.ratio(sixteen, r))}")
                bottom.annotate(text, (b.get_x() + b.get_width() / 2, b.get_height()),
                                ha="center", va="bottom", fontsize=7)
            bottom.set_ylim(0, bottom.get_ylim()[1] * 1.2)
            bottom.set_title("AllReduce of a float16 array", fontsize=8)
            if col == 0:
                top.set_ylabel("values per second (higher is better);\n"
                               "on a bar: INA's speed over that method's", fontsize=8)
                middle.set_ylabel("bytes on the busiest link\nper value (lower is better)",
                                  fontsize=8)
                bottom.set_ylabel("values per second", fontsize=8)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=len(METHODS), fontsize=8)
        save(fig, path, f"{self.bmv2}; torch {self.torch}", dpi=110, rect=(0, 0.02, 1, 0.965))


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _failure(r: CollectiveRun) -> str:
    if r.errors:
        return "FAILED: " + r.errors[0][:120]
    if r.on_hosts:
        return f"ran on hosts at {r.on_hosts} ranks (not through the switches)"
    return f"WRONG (max error {r.max_error:.1e})"


def run(case_names: list[str], build_dir: Path, regimes: tuple[str, ...],
        size: int | None, rate_mbit: float | None) -> CollectivesFigures:
    """Inside the sandbox: every case, in one run."""
    import torch

    from ina.lab.mininet import bmv2_build

    cases = [run_case(CASES[name].adjusted(rate_mbit=rate_mbit), build_dir, regimes,
                      size or COLLECTIVE_SIZES[name])
             for name in case_names]
    return CollectivesFigures(cases, bmv2_build(), torch.__version__)
