"""The failover benchmark (``inabench failover``): an AllReduce during which a VAT
switch fails, against the same AllReduce without a failure, on one lab.

The controller runs as ``inactl watch`` does: a ``Watcher`` detects the failure
(P4Runtime liveness, link probes) and its change handler repairs the switches
(``ina.control.repair``). The workers report when each of their results arrived
(``inaworker --timeline``, the machine's monotonic clock, which the benchmark
shares), so one run gives, from the moment the switch's process is stopped:

- **detection**: until the watcher's verdict;
- **repair**: until the repair is written (routes, the re-planned job);
- **first new result**: until a worker gets a result after the repair;
- **slowdown**: the AllReduce's time with the failure over its time without.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ina.bench.onlab import ROOT, Bench
from ina.bench.output import pyplot, save, watch_figures
from ina.bench.timing import start_together, wait_all
from ina.control.repair import repair_switches
from ina.control.watch import WatchOptions
from ina.errors import LabError
from ina.host.arrays import digest, random_array
from ina.lab.deploy import deploy
from ina.lab.mininet import Lab, LabOptions
from ina.lab.watching import WatcherThread
from ina.model.harness import reduce_arrays
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Failures, Topology

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class FailoverCase:
    name: str
    topology: Path
    workers: tuple[str, ...]  # a planned job of these
    size: int  # values per worker
    #: When the switch fails, as a fraction of the AllReduce's time without failure.
    fail_at: float = 0.4


CASES = {
    "leaf-spine": FailoverCase("leaf-spine-2x4", ROOT / "topologies" / "leaf-spine-2x4.yaml",
                               ("h1_1", "h1_2", "h2_1", "h3_1", "h4_1"), 1_000_000),
    "fat-tree": FailoverCase("fat-tree-4", ROOT / "topologies" / "fat-tree-4.yaml",
                             ("h0_0_0", "h0_1_1", "h1_0_0", "h2_1_0", "h3_1_1", "h3_0_1"),
                             500_000),
}


@dataclass
class FailoverRun:
    case: str
    workers: int
    size: int
    failed: str  # the switch stopped
    vat_before: list[str]
    vat_after: list[str]
    baseline_s: float  # the AllReduce without failure
    with_failure_s: float
    detection_s: float  # from the failure
    repaired_s: float
    first_new_result_s: float
    repair: str  # what the repair did
    replans: int  # the workers' re-plans, summed
    exact: bool
    #: Per worker: (seconds since the start, results so far): a re-planned call counts
    #: again from 0.
    timelines: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    fail_at_s: float = 0.0  # since the start of the AllReduce

    @property
    def slowdown(self) -> float:
        return self.with_failure_s / self.baseline_s


def _vat_switch_to_fail(job: Job, topology: Topology) -> str:
    """A VAT node whose loss cuts off no worker (not the edge switch of one), below
    the root if there is one."""
    edges = {topology.host_attachment(w)[0] for w in job.workers}
    candidates = sorted((sw for sw in job.nodes if sw not in edges),
                        key=lambda sw: (sw == job.root, sw))
    if not candidates:
        raise LabError(f"job {job.job_id}'s VAT has only edge switches: nothing to fail")
    return candidates[0]


def run_case(case: FailoverCase, build_dir: Path, options: WatchOptions) -> FailoverRun:
    """Inside the sandbox: the case's AllReduce without and with a failure."""
    topology = Topology.load(case.topology)
    spec = JobSpec.from_dict({"job_id": 1, "op": "sum", "workers": list(case.workers)})
    with Lab(topology, LabOptions(build_dir=build_dir)) as lab, \
            tempfile.TemporaryDirectory() as tmp:
        lab.init_switches_sync()
        job_path = Path(tmp) / "job1.yaml"
        job_path.write_text(json.dumps({"job_id": 1, "op": "sum",
                                        "workers": list(case.workers)}))
        job = deploy(lab, spec)
        bench = Bench(lab, topology, case.topology, job, job_path)
        expected = digest(reduce_arrays(job.op, [random_array(case.size, i)
                                                 for i in range(len(job.workers))]))
        baseline = _allreduce(bench, case.size)
        baseline_s = max(r["elapsed"] for r in baseline.values())
        victim = _vat_switch_to_fail(job, topology)

        # (when, what the repair did, the job's VAT nodes after it). Everything that
        # talks P4Runtime runs in the watcher's event loop meanwhile: grpc's asyncio
        # support does not take two loops of one process at once.
        repaired: list[tuple[float, str, tuple[str, ...]]] = []

        async def on_change(failures: Failures) -> None:
            report = await repair_switches(topology, failures, lab.p4info, lab.p4blob,
                                           lab.access)
            repaired.append((time.monotonic(), "; ".join(j.describe() for j in report.jobs),
                             report.jobs[0].switches if report.jobs else ()))

        watcher = WatcherThread(lab, options, on_change)
        try:
            watcher.settled()
            procs, _ = bench.ina(case.size, extra=("--timeline",))
            start_together(procs)
            go = time.monotonic()
            failed_at = _fail_at(lab, victim, go + case.fail_at * baseline_s)
            reports = wait_all(procs, {}, timeout=600)
            watcher.wait_for(lambda: len(repaired) >= 1, 30, "the repair")
            # Restore: the switch comes back, and the watcher repairs again.
            lab.recover_switch(victim)
            watcher.wait_for(lambda: not watcher.failures and len(repaired) >= 2, 60,
                             f"{victim} to be back")
        finally:
            watcher.stop()
    detected = next(t for t, f in watcher.changes if victim in f.switches)
    repaired_at, what, vat_after = repaired[0]
    started = min(r["started"] for r in reports.values())
    timelines = {w: [(round(t - started, 4), n) for t, n in r["timeline"]]
                 for w, r in reports.items()}
    first_new = min(t for r in reports.values() for t, _ in r["timeline"] if t > repaired_at)
    return FailoverRun(
        case.name, len(job.workers), case.size, victim, sorted(job.nodes), sorted(vat_after),
        baseline_s, max(r["elapsed"] for r in reports.values()),
        detected - failed_at, repaired_at - failed_at, first_new - failed_at, what,
        sum(r["replans"] for r in reports.values()),
        all(r["sha256"] == expected for r in reports.values()), timelines,
        failed_at - started)


def _allreduce(bench: Bench, size: int) -> dict[str, Any]:
    procs, _ = bench.ina(size)
    start_together(procs)
    return wait_all(procs, {}, timeout=600)


def _fail_at(lab: Lab, switch: str, at: float) -> float:
    """Stop ``switch``'s process at monotonic time ``at`` (the experiment's schedule:
    a fraction into the AllReduce); when it was stopped."""
    time.sleep(max(0.0, at - time.monotonic()))
    stopped = time.monotonic()
    lab.fail_switch(switch)
    return stopped


#: Points per worker's timeline in the JSON figures (the picture uses them all).
TIMELINE_POINTS = 200


@dataclass
class FailoverFigures:
    """What ``inabench failover`` measured: a run per case, the BMv2 build and the
    watcher's options."""

    runs: list[FailoverRun]
    bmv2: str
    options: WatchOptions

    def figures(self) -> dict[str, Any]:
        """The figures, each worker's timeline thinned to about TIMELINE_POINTS points
        (the first and last of each run of the call kept), and the watcher's options."""
        result = []
        for r in self.runs:
            doc = {**asdict(r), "slowdown": r.slowdown}
            doc["timelines"] = {w: _thin(points) for w, points in r.timelines.items()}
            result.append(doc)
        return {"bmv2": self.bmv2, "watch": watch_figures(self.options), "runs": result}

    @classmethod
    def from_figures(cls, doc: Any) -> FailoverFigures:
        """From ``figures()``'s data (KeyError or TypeError if it is not that); each
        worker's timeline as thinned there. Figures written before they recorded the
        options were measured with the defaults."""
        names = {f.name for f in fields(FailoverRun)}
        runs = []
        for r in doc["runs"]:
            run = FailoverRun(**{k: v for k, v in r.items() if k in names})
            run.timelines = {w: [(float(t), int(n)) for t, n in points]
                             for w, points in run.timelines.items()}
            runs.append(run)
        return cls(runs, str(doc["bmv2"]), WatchOptions(**doc.get("watch", {})))

    def render(self) -> str:
        options = self.options
        lines = [f"failover: a VAT switch's process stopped mid-AllReduce, detected by the "
                 f"watcher (probes every {options.interval:g}s, verdict after "
                 f"{options.detect_after:g}s), repaired by the controller; BMv2 {self.bmv2}"]
        for r in self.runs:
            lines += [
                f"{r.case}: {r.workers} workers x {r.size:,} values; VAT "
                f"{', '.join(r.vat_before)} -> {', '.join(r.vat_after)} ({r.failed} stopped "
                f"at {r.fail_at_s:.2f}s)",
                f"  detection {r.detection_s * 1000:.0f} ms, repaired "
                f"{r.repaired_s * 1000:.0f} ms, first new result "
                f"{r.first_new_result_s * 1000:.0f} ms after the failure",
                f"  AllReduce {r.with_failure_s:.2f}s with the failure, {r.baseline_s:.2f}s "
                f"without: slowdown {r.slowdown:.2f}x; {r.replans} worker re-plans; results "
                + ("exact" if r.exact else "NOT EXACT"),
                f"  repair: {r.repair}",
            ]
        return "\n".join(lines)

    def plot(self, path: Path) -> None:
        """One panel per case: the share of the array each worker has received, over
        time (plot_run)."""
        plt = pyplot()
        fig, axes = plt.subplots(1, len(self.runs), figsize=(6.4 * len(self.runs), 5.0),
                                 squeeze=False)
        for ax, r in zip(axes[0], self.runs, strict=True):
            plot_run(ax, r)
        save(fig, path, self.bmv2, rect=(0, 0.03, 1, 1))


def _thin(points: list[tuple[float, int]]) -> list[tuple[float, int]]:
    step = max(1, len(points) // TIMELINE_POINTS)
    return [p for i, p in enumerate(points)
            if i % step == 0 or i == len(points) - 1
            or (i + 1 < len(points) and points[i + 1][1] < p[1])]


def plot_run(ax: Any, r: FailoverRun) -> None:
    """The share of the array each worker has received, over time, on ``ax``. The
    workers' lines coincide (every worker gets every result at once, by BIER), so
    they are drawn in one colour with one legend entry; the stop, the detection and
    the repair are vertical lines named in the legend, with their times."""
    total = max(n for points in r.timelines.values() for _, n in points)
    for i, (_, points) in enumerate(sorted(r.timelines.items())):
        # A re-planned call counts again from 0: one line per run of the call.
        segments: list[list[tuple[float, int]]] = [[]]
        for t, n in points:
            if segments[-1] and n < segments[-1][-1][1]:
                segments.append([])
            segments[-1].append((t, n))
        for j, run in enumerate(segments):
            ax.plot([t for t, _ in run], [100 * n / total for _, n in run], lw=1.2,
                    color="#1b5e20",
                    label=(f"each of the {len(r.timelines)} workers (their lines "
                           "coincide)") if i == j == 0 else None)
    stopped, detected = r.fail_at_s, r.fail_at_s + r.detection_s
    repaired = r.fail_at_s + r.repaired_s
    ax.axvspan(stopped, repaired, color="#b0413e", alpha=0.08, lw=0)
    for x, label, color, style in (
            (stopped, f"{r.failed} stopped, at {stopped:.2f} s", "#b0413e", "--"),
            (detected, f"failure detected, {r.detection_s * 1000:.0f} ms later",
             "#e09f3e", "-."),
            (repaired, f"repair written, {r.repaired_s * 1000:.0f} ms after the stop",
             "#2a7ab0", ":"),
            (r.baseline_s, f"the same AllReduce without a failure ends "
                           f"({r.baseline_s:.2f} s)", "#555555", (0, (1, 3)))):
        ax.axvline(x, color=color, ls=style, lw=1.3, label=label)
    ax.set_title(f"{r.case}: {r.workers} workers x {r.size:,} values; {r.failed} stopped "
                 f"mid-AllReduce\nends at {r.with_failure_s:.2f} s instead of "
                 f"{r.baseline_s:.2f} s: {r.slowdown:.2f}x as long", fontsize=9)
    ax.set_xlabel("seconds since the AllReduce started")
    ax.set_ylabel("results received, % of the array\n(the interrupted call starts "
                  "again at 0)")
    ax.set_ylim(0, 105)
    ax.set_xlim(0, None)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2,
              frameon=False)
