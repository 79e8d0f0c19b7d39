"""DDP and HSDP training through the switches against gloo, on the same Mininet network.

``run_case`` trains examples/train.py (scikit-learn's digits, an MLP, a fixed seed,
each rank its shard) on the job's workers twice per regime: with the ``ina``
backend (gradient buckets aggregated by the switches) and with torch's ``gloo``
(TCP between the hosts through the same switches' IPv4 forwarding), links
unlimited and every link rate-limited as in ``inabench allreduce``. Both runs of
a regime see the same data in the same order from the same initial weights; the
figures are rank 0's: median time per step, steps per second, the share of a
step spent communicating (1 - compute / step, the compute measured on the same
steps without gradient exchange), final loss and test accuracy, and the largest
difference between the two backends' trained parameters. An HSDP case
(``TrainSettings.hsdp``: replicas) trains with fully_shard on a mesh of that many
replicas of the rest as shards instead of DDP, every mesh group a job the lab's job
service deploys (the reduce-scatters within a replica, the all-reduces across them,
the all-gathers, all through the switches).

``bucket_conversion`` measures the host side: a float32 bucket (DDP's 25 MiB by
default) quantized to the wire and back, against the least time its AllReduce can
take on a link of the rate-limited regime.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ina.bench.goals import Goal, Goals, less_cpu
from ina.bench.goals import render as render_goals
from ina.bench.onlab import (
    CASES,
    INA_WIRE_PER_VALUE,
    ROOT,
    Bench,
    Case,
    bench_on_lab,
    describe_vat,
)
from ina.bench.output import describe_regime, pyplot, save
from ina.bench.timing import STALL_MEDIANS, CpuSampler, Tail
from ina.errors import LabError, UsageError
from ina.host.results import REDUCING
from ina.protocol.constants import ELEMS_PER_PACKET

TRAIN_SCRIPT = ROOT / "examples" / "train.py"
BACKENDS = ("ina", "gloo")
#: The store's port on rank 0's host.
MASTER_PORT = 29500
#: DDP's default gradient bucket (bucket_cap_mb = 25).
DDP_BUCKET_BYTES = 25 * 1024 * 1024
RUN_TIMEOUT = 3600.0


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 200
    batch: int = 16
    hidden: int = 128
    seed: int = 0
    hsdp: int = 0  # replicas of an HSDP mesh (fully_shard); 0: DDP


@dataclass
class TrainRun:
    backend: str
    seconds: float
    step_median: float
    steps_per_second: float
    comm_share: float
    final_loss: float
    test_accuracy: float
    loss: list[float]
    clock: list[float]
    collectives: dict[str, dict[str, int]] = field(default_factory=dict)
    #: ina: seconds per all_reduce in each phase of the call (the profile).
    phases: dict[str, float] = field(default_factory=dict)
    #: ina: the least round trip of the default group's job tree (s), if measured.
    round_trip: float | None = None
    #: CPU milliseconds per step from the first step to the last, by kind of process
    #: ("switches": the lab's BMv2 processes; "ranks": the training processes).
    cpu_ms_per_step: dict[str, float] = field(default_factory=dict)

    @property
    def cpu_ms(self) -> float | None:
        """CPU milliseconds per step, switches and ranks together (None: not measured)."""
        return sum(self.cpu_ms_per_step.values()) if self.cpu_ms_per_step else None

    @property
    def tail(self) -> Tail:
        """Its steps' times: median, p90, p99, largest, stalls (from the run's clock)."""
        return Tail.of_clock(self.clock)


@dataclass
class TrainRegime:
    """A regime's runs, in the order they ran: one pair (ina, gloo) or several, the
    backends alternating (ina gloo, gloo ina, ...) so that the machine's drift falls on
    both. Each pair's ratio is its own; the regime's is the median pair's (the lower
    of the two middle ones for an even count): with links unlimited the figures move
    from run to run by more than the gap between the backends."""

    regime: str  # "cpu" (links unlimited) or "link" (rate-limited)
    rate_mbit: float | None
    runs: list[TrainRun]
    max_param_diff: float  # between the two backends' trained parameters, every pair

    def of(self, backend: str) -> list[TrainRun]:
        """``backend``'s runs, in order: the i-th of each backend make pair i."""
        return [r for r in self.runs if r.backend == backend]

    @property
    def pairs(self) -> list[tuple[TrainRun, TrainRun]]:
        """(ina, gloo) of each pair."""
        return list(zip(self.of("ina"), self.of("gloo"), strict=True))

    @property
    def speedups(self) -> list[float]:
        """Each pair's gloo time per step over ina's: above 1, ina is faster."""
        return [gloo.step_median / ina.step_median for ina, gloo in self.pairs]

    @property
    def median_pair(self) -> int:
        """The index of the pair whose speed-up is the median (the lower middle one)."""
        ordered = sorted(range(len(self.pairs)), key=lambda i: self.speedups[i])
        return ordered[(len(ordered) - 1) // 2]

    def run(self, backend: str) -> TrainRun:
        """``backend``'s run of the median pair."""
        return self.pairs[self.median_pair][0 if backend == "ina" else 1]

    @property
    def speedup(self) -> float:
        """The median pair's gloo time per step over ina's."""
        return self.speedups[self.median_pair]

    @property
    def run_speedup(self) -> float:
        """The median pair's gloo whole run over ina's (every step counted, stalls too)."""
        ina, gloo = self.pairs[self.median_pair]
        return gloo.seconds / ina.seconds


@dataclass
class BucketRun:
    """One float32 bucket all-reduced through the switches and through gloo, links
    unlimited: seconds each, and whether the switches' result lies within its
    error bound of gloo's (plus gloo's own rounding)."""

    mib: int
    ina_seconds: float
    gloo_seconds: float
    within_bound_of_gloo: bool
    max_difference: float


@dataclass
class TrainCaseResult:
    case: str
    topology: str
    workers: list[str]
    vat: str
    parameters: int
    settings: TrainSettings
    regimes: list[TrainRegime] = field(default_factory=list)
    bucket: BucketRun | None = None


@dataclass
class BucketConversion:
    values: int
    seconds: float  # float32 -> quantized int32 wire bytes -> float32, one worker
    link_bound_seconds: float  # the least time its AllReduce takes at the link rate
    rate_mbit: float

    @property
    def share(self) -> float:
        return self.seconds / self.link_bound_seconds


def _run_ranks(bench: Bench, argv: Callable[[int], list[str]], what: str) -> CpuSampler:
    """``argv(rank)`` on every worker's host, rank r on the job's r-th worker, with
    the environment ``inalab ranks`` gives (ina.lab.ranks.rank_env); until all end.
    The CPU time of the switches and of the ranks, sampled meanwhile."""
    envs = bench.rank_envs(MASTER_PORT)
    procs = [bench.lab.host(w).popen(argv(rank), env=envs[w], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
             for rank, w in enumerate(envs)]
    deadline = time.monotonic() + RUN_TIMEOUT
    failures = []
    with CpuSampler({"switches": list(bench.lab.switch_pids().values()),
                     "ranks": [proc.pid for proc in procs]}) as cpu:
        for w, proc in zip(envs, procs, strict=True):
            try:
                _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            if proc.returncode != 0:
                failures.append(f"{w}: exit {proc.returncode}: {err.decode().strip()[-2000:]}")
    if failures:
        raise LabError(f"{what} failed:\n" + "\n".join(failures))
    return cpu


def _train(bench: Bench, backend: str, settings: TrainSettings, out: Path) -> TrainRun:
    """One training run on the workers' hosts."""
    report, params = out / f"{backend}.json", out / f"{backend}.pt"

    def argv(rank: int) -> list[str]:
        return [sys.executable, str(TRAIN_SCRIPT), "--backend", backend,
                "--steps", str(settings.steps), "--batch", str(settings.batch),
                "--hidden", str(settings.hidden), "--seed", str(settings.seed),
                "--log-every", "0", "--hsdp", str(settings.hsdp),
                *(["--json", str(report), "--params", str(params)] if rank == 0 else [])]

    cpu = _run_ranks(bench, argv, f"training with {backend}")
    data = json.loads(report.read_text())
    used = cpu.between(data["wall_start"], data["wall_end"])
    return TrainRun(backend, data["seconds"], data["step_median"], data["steps_per_second"],
                    data["comm_share"], data["final_loss"], data["test_accuracy"],
                    data["loss"], data["clock"], data.get("collectives", {}),
                    data.get("phases", {}), data.get("round_trip"),
                    {} if used is None else
                    {kind: 1000 * seconds / settings.steps for kind, seconds in used.items()})


def _bucket(bench: Bench, mib: int, out: Path) -> BucketRun:
    """One float32 bucket of ``mib`` MiB all-reduced through the switches and through
    gloo, on the workers' hosts (``python -m ina.bench.train bucket``)."""
    report = out / "bucket.json"

    def argv(rank: int) -> list[str]:
        return [sys.executable, "-m", "ina.bench.train", "bucket", "--mib", str(mib),
                *(["--json", str(report)] if rank == 0 else [])]

    _run_ranks(bench, argv, "the bucket")
    return BucketRun(**json.loads(report.read_text()))


def _param_diff(out: Path) -> float:
    import torch

    a, b = (torch.load(out / f"{backend}.pt") for backend in BACKENDS)
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def _parameters(settings: TrainSettings) -> int:
    h = settings.hidden
    return 64 * h + h + h * h + h + h * 10 + 10


def run_case(case: Case, build_dir: Path, regimes: tuple[str, ...],
             settings: TrainSettings, bucket_mib: int = 0, pairs: int = 1) -> TrainCaseResult:
    """Inside the sandbox: both backends in each regime, ``pairs`` times alternating
    (TrainRegime), on one lab; and, with ``bucket_mib``, one bucket of that size,
    links unlimited."""
    if pairs < 1:
        raise UsageError(f"pairs must be at least 1, got {pairs}")
    with bench_on_lab(case, build_dir) as bench, tempfile.TemporaryDirectory() as tmp:
        job = bench.job
        result = TrainCaseResult(case.name + ("-hsdp" if settings.hsdp else ""),
                                 bench.topology.name, list(job.workers), describe_vat(job),
                                 _parameters(settings), settings)
        for regime, rate in bench.regimes(regimes, case.rate_mbit):
            out = Path(tmp) / regime
            out.mkdir()
            runs, diff = [], 0.0
            for pair in range(pairs):
                order = BACKENDS if pair % 2 == 0 else BACKENDS[::-1]
                runs += [_train(bench, backend, settings, out) for backend in order]
                diff = max(diff, _param_diff(out))
            result.regimes.append(TrainRegime(regime, rate, runs, diff))
        if bucket_mib:
            result.bucket = _bucket(bench, bucket_mib, Path(tmp))
    return result


def bucket_conversion(rate_mbit: float, workers: int = 4, nbytes: int = DDP_BUCKET_BYTES,
                      window: int = 32) -> BucketConversion:
    """One worker's host-side work for a float32 bucket of ``nbytes``: block
    exponents, quantization, the packets' bytes, the results read back from them and
    dequantized (what a worker does besides waiting), timed; and the least time the
    bucket's AllReduce takes at ``rate_mbit`` (every worker's link carries it once)."""
    import numpy as np

    from ina.host import quantize
    from ina.host.config import WorkerConfig
    from ina.host.window import ReductionWindow
    from ina.protocol.constants import Flag, Op

    size = nbytes // 4
    x = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    config = WorkerConfig(job_id=1, op=Op.SUM, pbm=1, target="127.0.0.1", window=window,
                          workers=workers)
    started = time.perf_counter()
    exponents = quantize.block_exponents(x)
    session = ReductionWindow(config, quantize.quantize(x, exponents, Op.SUM, workers))
    while not session.done:  # a window's packets out, their results in, as a worker does
        for payload in session.packets_to_send():
            result = bytearray(payload)
            result[1] |= Flag.RESULT
            session.accept(bytes(result))
    values = quantize.dequantize(session.outcome().values, exponents, Op.SUM, workers)
    quantize.bound(values, exponents, Op.SUM, workers)
    seconds = time.perf_counter() - started
    link_bound = size * INA_WIRE_PER_VALUE * 8 / (rate_mbit * 1e6)
    return BucketConversion(size, seconds, link_bound, rate_mbit)


# --- Reports ---------------------------------------------------------------------------


@dataclass
class TrainFigures:
    """A run's figures: what ``figures`` writes as JSON and ``from_figures`` reads back,
    so that a report and its picture come from the JSON alone."""

    cases: list[TrainCaseResult]
    conversion: BucketConversion | None
    bmv2: str
    torch: str

    def figures(self) -> dict[str, Any]:
        c = self.conversion
        return {"bmv2": self.bmv2, "torch": self.torch,
                "conversion": None if c is None else {**asdict(c), "share": c.share},
                "cases": [{**asdict(r), "regimes": [
                    {**asdict(g), "speedup": g.speedup, "run_speedup": g.run_speedup,
                     "speedups": g.speedups, "median_pair": g.median_pair,
                     "tails": {run.backend: asdict(run.tail) for run in g.pairs[g.median_pair]}}
                    for g in r.regimes]} for r in self.cases],
                "goals": [asdict(x) for r in self.cases for x in goals(r)]}

    @classmethod
    def from_figures(cls, doc: dict[str, Any]) -> TrainFigures:
        conversion = doc["conversion"]
        cases = []
        for c in doc["cases"]:
            regimes = [TrainRegime(g["regime"], g["rate_mbit"],
                                   [TrainRun(**run) for run in g["runs"]], g["max_param_diff"])
                       for g in c["regimes"]]
            cases.append(TrainCaseResult(c["case"], c["topology"], c["workers"], c["vat"],
                                         c["parameters"], TrainSettings(**c["settings"]),
                                         regimes, c["bucket"] and BucketRun(**c["bucket"])))
        return cls(cases, None if conversion is None else BucketConversion(
            conversion["values"], conversion["seconds"], conversion["link_bound_seconds"],
            conversion["rate_mbit"]), doc["bmv2"], doc["torch"])

    def render(self) -> str:
        kinds = "DDP and HSDP" if any(r.settings.hsdp for r in self.cases) else "DDP"
        pairs = max((len(g.pairs) for r in self.cases for g in r.regimes), default=1)
        runs = ("one run per case, regime and backend" if pairs == 1 else
                f"{pairs} runs per case, regime and backend, alternating (ina gloo, gloo ina, "
                "...), each pair's ratio its own, the median pair's in the goals")
        lines = [f"{kinds} training on Mininet + {self.bmv2}, torch {self.torch}; {runs}, "
                 "rank 0's figures; both backends on the same network, same data, same "
                 "initial weights.", ""]
        for r in self.cases:
            s = r.settings
            how = (f"HSDP (fully_shard on a {s.hsdp} x {len(r.workers) // s.hsdp} mesh: "
                   "replicas x shards, every group of the mesh a job of its own)"
                   if s.hsdp else "DDP")
            lines.append(f"{r.case} ({r.topology}): {how}, {len(r.workers)} workers "
                         f"({', '.join(r.workers)}); MLP 64-{s.hidden}-{s.hidden}-10 "
                         f"({r.parameters:,} parameters, {4 * r.parameters / 1024:.0f} KiB of "
                         f"gradients a step), {s.steps} steps of {s.batch} per rank; INA VAT "
                         f"(planned){' of the default group' if s.hsdp else ''}: {r.vat}"
                         + ("; the mesh's groups planned by the lab's job service when the "
                            "program makes them." if s.hsdp else "."))
            for g in r.regimes:
                lines += _regime_lines(r, g)
            b = r.bucket
            if b is not None:
                lines.append(f"  one {b.mib} MiB float32 bucket (DDP's default size), links "
                             f"unlimited: ina {b.ina_seconds:.1f}s, gloo {b.gloo_seconds:.1f}s; "
                             f"ina's result {'within' if b.within_bound_of_gloo else 'NOT within'}"
                             f" its error bound of gloo's (largest difference "
                             f"{b.max_difference:.1e})")
            lines.append("")
        c = self.conversion
        if c is not None:
            lines.append(f"Host side: a {c.values * 4 / 2**20:.0f} MiB float32 bucket to the "
                         f"wire and back (quantize, packets, dequantize) takes {c.seconds:.2f}s "
                         f"on one worker; its AllReduce takes at least "
                         f"{c.link_bound_seconds:.1f}s at {c.rate_mbit:g} Mbit/s per link: "
                         f"{c.share:.1%} of it.")
        lines += ["", f"(stalls: steps over {STALL_MEDIANS:g} times the run's median step)",
                  *render_goals("Goals of issues 22 and 24, against this run:",
                                (x for r in self.cases for x in goals(r)))]
        return "\n".join(lines)

    def plot(self, path: Path) -> None:
        """Loss against step and against wall-clock seconds, both backends, a column
        per case and regime."""
        plt = pyplot()
        colors = {"ina": "#1b5e20", "gloo": "#b0413e"}
        panels = [(r, g) for r in self.cases for g in r.regimes]
        fig, axes = plt.subplots(2, len(panels), figsize=(3.6 * len(panels), 6.0),
                                 squeeze=False)
        for col, (r, g) in enumerate(panels):
            regime = ("links unlimited" if g.rate_mbit is None
                      else f"links {g.rate_mbit:g} Mbit/s")
            top, bottom = axes[0][col], axes[1][col]
            for run in g.pairs[g.median_pair]:
                smooth = _smooth(run.loss, 10)
                style = {"color": colors[run.backend], "linewidth": 1.2,
                         "linestyle": "-" if run.backend == "ina" else "--"}
                top.plot(range(1, len(smooth) + 1), smooth, **style,
                         label=f"{run.backend}: {run.step_median * 1000:.0f} ms a step, "
                               f"{run.test_accuracy:.1%} test accuracy")
                bottom.plot(run.clock, smooth, **style)
            pairs = "" if len(g.pairs) == 1 else f" (the median of {len(g.pairs)} pairs)"
            top.set_title(f"{r.case}, {len(r.workers)} workers, {regime}\n"
                          f"ina {g.speedup:.2f}x gloo's speed{pairs}", fontsize=9)
            top.set_xlabel("training step")
            bottom.set_xlabel("wall-clock seconds since the first step")
            top.legend(fontsize=7)
            if col == 0:
                top.set_ylabel("training loss\n(mean of the last 10 steps)")
                bottom.set_ylabel("training loss\n(mean of the last 10 steps)")
        save(fig, path, f"{self.bmv2}; torch {self.torch}; where the two lines of a panel "
             "overlap, the backends' losses agree")


def _regime_lines(r: TrainCaseResult, g: TrainRegime) -> list[str]:
    """The report's lines of one regime of a case: every run, the calls' phases, the
    CPU, the links' floor and the ratios."""
    s = r.settings
    lines = [f"  {describe_regime(g.rate_mbit)}:",
             f"    {'backend':<8} {'ms/step':>8} {'p90':>7} {'p99':>7} {'largest':>8} "
             f"{'stalls':>6} {'run s':>7} {'comm':>6} {'loss':>7} {'accuracy':>9}"]
    seen: dict[str, int] = {}
    for run in g.runs:
        t = run.tail
        seen[run.backend] = nth = seen.get(run.backend, 0) + 1
        name = run.backend if len(g.pairs) == 1 else f"{run.backend} {nth}"
        lines.append(f"    {name:<8} {run.step_median * 1000:>8.1f} "
                     f"{t.p90 * 1000:>7.1f} {t.p99 * 1000:>7.1f} "
                     f"{t.largest * 1000:>8.1f} {t.stalls:>6} {run.seconds:>7.1f} "
                     f"{run.comm_share:>6.1%} {run.final_loss:>7.4f} "
                     f"{run.test_accuracy:>9.1%}")
    phases = g.run("ina").phases
    if phases:
        per = "a step's" if s.hsdp else "an all_reduce's"
        lines.append(f"    ina, {per} phases (ms): " + ", ".join(
            f"{name} {seconds * 1000:.1f}" for name, seconds in phases.items())
            + _round_trips(g.run("ina")))
    median = g.pairs[g.median_pair]
    if all(run.cpu_ms_per_step for run in median):
        lines.append(f"    CPU per step, first step to last (ms"
                     f"{'' if len(g.pairs) == 1 else ', the median pair'}): "
                     + "; ".join(f"{run.backend} " + ", ".join(
                         f"{kind} {ms:.1f}" for kind, ms in run.cpu_ms_per_step.items())
                         + f", total {run.cpu_ms:.1f}" for run in median))
    floor = link_floor(r, g)
    if floor is not None:
        lines.append(
            f"    the links' floor for ina's step: {floor * 1000:.1f} ms (every "
            "packet of its all_reduces once each way at the link's rate); its "
            f"median step at {floor / g.run('ina').step_median:.0%} of it; ina "
            f"can be at most {_most_speedup(r, g):.2f}x gloo's median step here")
    acc = g.run("ina").test_accuracy - g.run("gloo").test_accuracy
    if len(g.pairs) > 1:
        lines.append("    ina vs gloo by the median step, pair by pair: "
                     + ", ".join(f"{x:.2f}x" for x in g.speedups)
                     + f"; the median pair is {g.median_pair + 1}")
    which = "same run" if len(g.pairs) == 1 else "the median pair"
    lines.append(f"    ina vs gloo ({which}): {g.speedup:.2f}x gloo's speed by the "
                 f"median step, {g.run_speedup:.2f}x for the whole run; accuracy "
                 f"{acc * 100:+.1f} points; largest parameter difference "
                 f"{g.max_param_diff:.2e}")
    return lines


def link_floor(case: TrainCaseResult, regime: TrainRegime) -> float | None:
    """The least time a DDP step's all_reduces take on links of the regime's rate:
    each worker's link carries every packet of the gradients (and of each call's
    lead) once each way, so no step is shorter than their bytes at that rate (the
    float exponents of a call that did not guess them, DDP's first steps, left
    out). None with links unlimited, or for HSDP (many collectives a step)."""
    if regime.rate_mbit is None or case.settings.hsdp:
        return None
    calls = regime.run("ina").collectives.get("allreduce", {}).get("switches", 0)
    per_step = max(1, round(calls / case.settings.steps))
    packets = math.ceil(case.parameters / ELEMS_PER_PACKET) + per_step  # a lead each
    return packets * ELEMS_PER_PACKET * INA_WIRE_PER_VALUE * 8 / (regime.rate_mbit * 1e6)


def _most_speedup(case: TrainCaseResult, regime: TrainRegime, whole: bool = False) -> float:
    """gloo's median step (``whole``: its whole run) over the links' floor for ina's
    (as many of them): the most ina can be ahead of it on these links."""
    floor = link_floor(case, regime)
    assert floor is not None
    gloo = regime.run("gloo")
    return gloo.seconds / (floor * case.settings.steps) if whole else gloo.step_median / floor


def _against_floor(case: TrainCaseResult, regime: TrainRegime, goal: float,
                   whole: bool = False) -> tuple[str, bool]:
    """A speed-up goal by the median step (``whole``: the whole run), and the most
    the links allow (``_most_speedup``)."""
    speedup = regime.run_speedup if whole else regime.speedup
    most = _most_speedup(case, regime, whole)
    return (f"{speedup:.2f}x; the links allow at most {most:.2f}x"
            + (" (out of reach with this wire format)" if most < goal else ""), speedup >= goal)


def goals(case: TrainCaseResult) -> list[Goal]:
    """Issue 22's goals for this case's regimes: ina against gloo by the whole run and
    the median step, and ina's tail (p99 against its median, stalls)."""
    judged = Goals[TrainRegime](case.case, lambda g: None)
    regimes = {g.regime: g for g in case.regimes}
    link, cpu = regimes.get("link"), regimes.get("cpu")
    if case.case == "fat-tree":
        judged.judge("links limited: the whole run >= 1.6x gloo's speed", [("link", link)],
                     lambda g: (f"{g[0].run_speedup:.2f}x", g[0].run_speedup >= 1.6))
        judged.judge("links limited: the median step >= 1.8x gloo's", [("link", link)],
                     lambda g: _against_floor(case, g[0], 1.8))
        judged.judge("links limited: ina's p99 step <= 1.5x its median", [("link", link)],
                     lambda g: _p99(g[0]))
        for name, regime in (("links limited", link), ("links unlimited", cpu)):
            judged.judge(f"{name}: no ina step over {STALL_MEDIANS:g}x its median",
                         [(name, regime)], lambda g: _stalls(g[0]))
    if case.case == "figure1":
        judged.judge("links limited: the whole run >= 2.0x gloo's speed", [("link", link)],
                     lambda g: _against_floor(case, g[0], 2.0, whole=True))
    if case.case in ("figure1", "fat-tree"):
        for name, regime in (("links limited", link), ("links unlimited", cpu)):
            judged.judge(f"{name}: per all_reduce, all but reducing within one round trip "
                         "of the job tree", [(name, regime)], lambda g: _one_round_trip(g[0]))
        # Issue 24: ahead of gloo with links unlimited too, on fewer CPU cycles.
        if case.case == "figure1":
            judged.judge("links unlimited: the median step >= 1.0x gloo's (issue 24)",
                         [("cpu", cpu)], lambda g: (f"{g[0].speedup:.2f}x", g[0].speedup >= 1.0))
        else:
            judged.judge("links unlimited: the whole run >= 1.0x gloo's speed (issue 24)",
                         [("cpu", cpu)],
                         lambda g: (f"{g[0].run_speedup:.2f}x", g[0].run_speedup >= 1.0))
        judged.judge("links unlimited: ina's CPU per step (switches and ranks) below gloo's "
                     "(issue 24)", [("cpu", cpu)], lambda g: _less_cpu(g[0]))
    return judged.goals


def _less_cpu(regime: TrainRegime) -> tuple[str, bool]:
    ina, gloo = regime.run("ina").cpu_ms_per_step, regime.run("gloo").cpu_ms
    if not ina or gloo is None:
        return "not measured", False
    return less_cpu(ina["switches"], ina["ranks"], gloo, "ms")


def _round_trips(run: TrainRun) -> str:
    """What a call spent outside its reduction, in round trips of its job tree."""
    if run.round_trip is None:
        return ""
    return (f"; all but reducing {_overhead(run) * 1000:.1f} ms, the job tree's round trip "
            f"{run.round_trip * 1000:.1f} ms")


def _overhead(run: TrainRun) -> float:
    """Seconds per call in every phase but the reduction of the values."""
    return sum(s for name, s in run.phases.items() if name != REDUCING)


def _one_round_trip(regime: TrainRegime) -> tuple[str, bool]:
    run = regime.run("ina")
    if run.round_trip is None:
        return "no round trip measured", False
    over = _overhead(run)
    return (f"{over * 1000:.1f} ms, {over / run.round_trip:.1f} round trips of "
            f"{run.round_trip * 1000:.1f} ms", over <= run.round_trip)


def _p99(regime: TrainRegime) -> tuple[str, bool]:
    """ina's p99 step against its median, of its run with the longest tail."""
    t = max((run.tail for run in regime.of("ina")), key=lambda t: t.p99 / t.median)
    return f"p99 {t.p99 * 1000:.0f} ms, {t.p99 / t.median:.2f}x", t.p99 <= 1.5 * t.median


def _stalls(regime: TrainRegime) -> tuple[str, bool]:
    """ina's stalls, every run's."""
    tails = [run.tail for run in regime.of("ina")]
    stalls = sum(t.stalls for t in tails)
    return (f"{stalls} (largest {max(t.largest for t in tails) * 1000:.0f} ms)",
            stalls == 0)


def _smooth(values: list[float], n: int) -> list[float]:
    return [statistics.fmean(values[max(0, i - n + 1): i + 1]) for i in range(len(values))]


DEFAULT_CASES = {name: CASES[name] for name in ("figure1", "fat-tree")}
#: The HSDP case: the fat-tree's 8 workers as 2 replicas of 4 shards.
HSDP_CASE, HSDP_REPLICAS = "fat-tree-hsdp", 2


def run_named_case(name: str, build_dir: Path, regimes: tuple[str, ...],
                   settings: TrainSettings, bucket_mib: int = 0,
                   rate_mbit: float | None = None, pairs: int = 1) -> TrainCaseResult:
    """``run_case`` of a case by name: a DDP case of DEFAULT_CASES, or the HSDP case;
    its links at ``rate_mbit`` in the link-bound regime (None: the case's rate)."""
    if name == HSDP_CASE:
        return run_case(CASES["fat-tree"].adjusted(rate_mbit=rate_mbit), build_dir, regimes,
                        dataclasses.replace(settings, hsdp=HSDP_REPLICAS), bucket_mib, pairs)
    return run_case(DEFAULT_CASES[name].adjusted(rate_mbit=rate_mbit), build_dir, regimes,
                    settings, bucket_mib, pairs)


# --- On a worker's host: python -m ina.bench.train bucket --mib N [--json FILE] -------


def _bucket_rank(mib: int, report: Path | None) -> None:
    """This rank's part of ``_bucket``: the same seeded bucket through both."""
    import torch
    import torch.distributed as dist

    import ina.torch

    dist.init_process_group("ina")
    gloo = dist.new_group(backend="gloo")
    assert isinstance(gloo, dist.ProcessGroup)  # every rank is in it
    rank, world = dist.get_rank(), dist.get_world_size()
    values = torch.randn(mib * 2**18, generator=torch.Generator().manual_seed(rank))
    mine, theirs, magnitudes = values.clone(), values.clone(), values.abs().double()
    dist.barrier()
    started = time.perf_counter()
    dist.all_reduce(mine)
    ina_seconds = time.perf_counter() - started
    dist.barrier(group=gloo)
    started = time.perf_counter()
    dist.all_reduce(theirs, group=gloo)
    gloo_seconds = time.perf_counter() - started
    dist.all_reduce(magnitudes, group=gloo)
    bound = ina.torch.error_bound(mine)
    assert bound is not None
    # gloo adds in float32: half an ulp per addition, of at most the sum of magnitudes.
    gloo_rounding = (world - 1) * torch.finfo(torch.float32).eps / 2 * magnitudes
    diff = (mine.double() - theirs.double()).abs()
    if report is not None:
        report.write_text(json.dumps(asdict(BucketRun(
            mib, ina_seconds, gloo_seconds, bool((diff <= bound + gloo_rounding).all()),
            float(diff.max())))))
    dist.destroy_process_group()


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(prog="python -m ina.bench.train")
    p.add_argument("role", choices=["bucket"])
    p.add_argument("--mib", type=int, default=25)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    _bucket_rank(args.mib, args.json)
