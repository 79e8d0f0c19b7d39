"""INA under loss (``inabench loss``, ``make bench-loss``): the INA AllReduce of
Figure 1 with frames dropped (nftables) on every link, against the same AllReduce
without loss, in one run; in each regime: links unlimited (the switches' CPU bounds
the rate), and every link at a rate (the links bound it, as on hardware switches).
Issue 22's goal (1% loss per link: at least 95% of the lossless rate) is printed
next to what was measured."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ina.bench.goals import Goal, Goals
from ina.bench.goals import render as render_goals
from ina.bench.onlab import CASES, Bench, Case, bench_on_lab
from ina.bench.output import pyplot, save
from ina.bench.timing import start_together, wait_all
from ina.control.switch import CounterValue
from ina.errors import AllreduceError
from ina.lab.deploy import controller_call
from ina.lab.mininet import Lab
from ina.protocol.constants import JobStat
from ina.spec.job import Job


@dataclass
class LossRun:
    loss: float  # per link and direction
    seconds: float  # the median of the rounds
    values_per_s: float
    of_lossless: float
    retransmissions: int  # in the median round
    early_retransmissions: int
    rounds: list[float]  # seconds of each round
    rate_mbit: float | None = None  # every link's rate (None: unlimited)
    #: In the median round, at the switches: retransmissions that found their sender's
    #: contribution already in an incomplete round (another contribution was lost:
    #: the copy was not needed), and ones that found the round complete (its result
    #: sent again, by BIER to the sender).
    duplicates: int = 0
    resent: int = 0
    #: In the median round, the workers' QUERYs before sending values again, and the
    #: answers HELD (values not sent again).
    queries: int = 0
    held: int = 0
    #: In the median round: the workers' results that carried a congestion mark
    #: (summed), and the bytes that crossed the busiest link in one direction (a
    #: switch's port, sent or received): where the call's time goes when the links
    #: bound it (0: not measured, in figures from before they were).
    marked: int = 0
    busiest: int = 0
    busiest_at: str = ""  # that link: "s1 port 2 sent" (to w1) or "... received"


def _counts(lab: Lab, job: Job) -> tuple[dict[JobStat, int], dict[tuple[str, int, str], int]]:
    """The switches' DROP_DUPLICATE and RESENT counts of ``job``, summed; and the
    bytes each switch port sent and received, by (switch, port, "sent"/"received")."""
    statuses = controller_call(lab, lambda ctl: ctl.status(), write=False)
    stats = {stat: sum(s.job_stats.get(job.job_id, {}).get(stat, CounterValue()).packets
                       for s in statuses.values())
             for stat in (JobStat.DROP_DUPLICATE, JobStat.RESENT)}
    ports = {(sw, port, way): v.bytes for sw, s in statuses.items()
             for way, cells in (("sent", s.port_packets), ("received", s.port_received))
             for port, v in cells.items()}
    return stats, ports


def _busiest(ports: dict[tuple[str, int, str], int]) -> tuple[int, str]:
    """The bytes of the port (and way) that carried the most, and which it is."""
    (sw, port, way), most = max(ports.items(), key=lambda kv: kv[1])
    return most, f"{sw} port {port} {way}"


#: Issue 22's goal: under this loss per link, at least this much of the lossless rate.
GOAL_LOSS, GOAL_OF_LOSSLESS = 0.01, 0.95


def run(build_dir: Path, losses: list[float], size: int, case: Case, rounds: int = 3,
        regimes: tuple[str, ...] = ("cpu",)) -> list[LossRun]:
    """Inside the sandbox: ``measure_on_bench`` on ``case``'s lab with its job
    deployed, in each of ``regimes`` (Bench.regimes: "link" at the case's rate)."""
    with bench_on_lab(case, build_dir) as bench:
        return [r for _ in bench.regimes(regimes, case.rate_mbit)
                for r in measure_on_bench(bench, losses, size, rounds)]


def measure_on_bench(bench: Bench, losses: list[float], size: int, rounds: int = 3
                     ) -> list[LossRun]:
    """The INA AllReduce of ``size`` values of the bench's job at each loss rate,
    ``rounds`` times, the loss rates taking turns (the median is reported: one stall
    of the machine does not decide a figure), on the lab's links as they are.
    RuntimeError if a result is not exact."""
    from ina.host.arrays import digest, random_array
    from ina.model.harness import reduce_arrays

    job, lab = bench.job, bench.lab
    expected = digest(reduce_arrays(job.op, [random_array(size, i)
                                             for i in range(len(job.workers))]))
    reports: dict[float, list[dict[str, Any]]] = {loss: [] for loss in losses}
    for _ in range(rounds):
        for loss in losses:
            reports[loss].append(_round(bench, loss, size, expected))
    queues = lab.topology.queues
    rate_mbit = None if queues is None else queues.rate
    runs: list[LossRun] = []
    for loss in losses:
        by_time = sorted(reports[loss], key=lambda r: float(r["seconds"]))
        median = by_time[len(by_time) // 2]
        seconds = float(median["seconds"])
        lossless = runs[0].values_per_s if runs else size / seconds
        runs.append(LossRun(
            loss=loss, seconds=seconds, values_per_s=size / seconds,
            of_lossless=size / seconds / lossless,
            retransmissions=int(median["retransmissions"]),
            early_retransmissions=int(median["early"]),
            rounds=[float(r["seconds"]) for r in reports[loss]], rate_mbit=rate_mbit,
            duplicates=int(median["duplicates"]), resent=int(median["resent"]),
            queries=int(median["queries"]), held=int(median["held"]),
            marked=int(median["marked"]), busiest=int(median["busiest"][0]),
            busiest_at=str(median["busiest"][1])))
    return runs


def _round(bench: Bench, loss: float, size: int, expected: str) -> dict[str, Any]:
    """One AllReduce at ``loss`` per link: its time, the workers' retransmissions and
    the switches' counts (LossRun's)."""
    job, lab = bench.job, bench.lab
    before, ports_before = _counts(lab, job)
    lab.impair(loss=loss)
    procs, _ = bench.ina(size)
    start_together(procs)
    workers = wait_all(procs, {}, timeout=1800)
    lab.impair()
    after, ports_after = _counts(lab, job)
    if any(r["sha256"] != expected for r in workers.values()):
        raise AllreduceError(f"a result at loss {loss} is not exact")
    return {"seconds": max(r["elapsed"] for r in workers.values()),
            "retransmissions": sum(r["retransmissions"] for r in workers.values()),
            "early": sum(r["early_retransmissions"] for r in workers.values()),
            "queries": sum(r["queries"] for r in workers.values()),
            "held": sum(r["held"] for r in workers.values()),
            "marked": sum(r["marked"] for r in workers.values()),
            "busiest": _busiest({k: v - ports_before.get(k, 0) for k, v in ports_after.items()}),
            "duplicates": after[JobStat.DROP_DUPLICATE] - before[JobStat.DROP_DUPLICATE],
            "resent": after[JobStat.RESENT] - before[JobStat.RESENT]}


def _regime(rate_mbit: float | None) -> str:
    return "links unlimited" if rate_mbit is None else f"links at {rate_mbit:g} Mbit/s"


@dataclass
class LossFigures:
    """What ``inabench loss`` measured on Figure 1: a run per loss rate, in each
    regime (link rate), and the BMv2 build."""

    runs: list[LossRun]
    bmv2: str = ""
    case: Case = CASES["figure1"]

    def regimes(self) -> list[list[LossRun]]:
        """The runs of each link rate, in the order measured (lossless first)."""
        rates = list(dict.fromkeys(r.rate_mbit for r in self.runs))
        return [[r for r in self.runs if r.rate_mbit == rate] for rate in rates]

    def figures(self) -> dict[str, Any]:
        """As JSON-ready data (docs/loss.json); the goals are derived, for readers."""
        return {"bmv2": self.bmv2, "runs": [asdict(r) for r in self.runs],
                "goals": [asdict(g) for g in self.goals()]}

    @classmethod
    def from_figures(cls, doc: Any) -> LossFigures:
        """From ``figures()``'s data (KeyError or TypeError if it is not that)."""
        return cls([LossRun(**r) for r in doc["runs"]], str(doc["bmv2"]))

    def goals(self) -> list[Goal]:
        """Issue 22's goal in each regime: under 1% loss per link, at least 95% of the
        lossless rate (not measured where either loss rate was not run)."""
        goal = f"{GOAL_LOSS:.0%} loss per link: >= {GOAL_OF_LOSSLESS:.0%} of lossless"
        judged: list[Goal] = []
        for runs in self.regimes():
            at = {r.loss: r for r in runs}
            regime = Goals[LossRun](f"{self.case.name}, {_regime(runs[0].rate_mbit)}",
                                    lambda _run: None)
            lossless, lossy = at.get(0.0), at.get(GOAL_LOSS)
            regime.judge(goal, [("no loss", lossless), (f"{GOAL_LOSS:.0%} loss", lossy)],
                         lambda found: (f"{found[1].of_lossless:.0%} ({found[1].seconds:.2f} s "
                                        f"against {found[0].seconds:.2f} s)",
                                        found[1].of_lossless >= GOAL_OF_LOSSLESS))
            judged += regime.goals
        return judged

    def render(self) -> str:
        lines = []
        for runs in self.regimes():
            size = round(runs[0].values_per_s * runs[0].seconds)  # values per worker
            lines += [f"INA AllReduce of {size} values per worker on {self.case.name} "
                      f"({_regime(runs[0].rate_mbit)}), frames dropped on every link (each "
                      f"direction) by nftables; in one run, the median of "
                      f"{len(runs[0].rounds)} AllReduces per loss rate (taking turns), every "
                      "result exact.", "",
                      f"{'loss per link':>14} {'seconds':>8} {'values/s':>10} "
                      f"{'of lossless':>12} {'retransmissions':>16} {'(early)':>8} "
                      f"{'duplicates':>11} {'resent':>7} {'queries':>8} {'held':>6} "
                      f"{'marked':>7} {'busiest link':>13}"]
            for r in runs:
                lines.append(f"{r.loss:>14.0%} {r.seconds:>8.2f} {r.values_per_s:>10,.0f} "
                             f"{r.of_lossless:>11.0%} {r.retransmissions:>16} "
                             f"{r.early_retransmissions:>8} {r.duplicates:>11} {r.resent:>7} "
                             f"{r.queries:>8} {r.held:>6} "
                             + (f"{r.marked:>7} {f'{r.busiest / 1e6:.2f} MB':>13}"
                                if r.busiest else f"{'-':>7} {'-':>13}"))
            at = [f"{r.loss:.0%}: {r.busiest_at}" for r in runs if r.busiest_at]
            if at:
                lines.append(f"The busiest link (a switch's port, what it sent or received): "
                             f"{'; '.join(at)}.")
            lines.append("")
        lines += ["duplicates: retransmissions the switches found already in an incomplete "
                  "round (another worker's contribution was lost); resent: ones that found "
                  "the round complete (the result sent again to their sender); queries: the "
                  "workers' QUERYs before sending values again; held: those answered HELD "
                  "(the values were not sent again); marked: the workers' results that "
                  "carried a congestion mark; busiest link: the bytes that crossed the most "
                  "loaded link in one direction.",
                  f"BMv2: {self.bmv2 or 'not recorded'}.", "",
                  *render_goals("Goal of issue 22, against this run:", self.goals())]
        return "\n".join(lines)

    def plot(self, path: Path) -> None:
        """Per regime, a column: each loss rate's share of the lossless rate (every
        round a dot, the median a bar, the goal a line), and the bytes on the busiest
        link (the median round's)."""
        plt = pyplot()
        regimes = self.regimes()
        fig, axes = plt.subplots(2, len(regimes), figsize=(4.2 * len(regimes), 6.4),
                                 squeeze=False)
        for col, runs in enumerate(regimes):
            top, bottom = axes[0][col], axes[1][col]
            names = [f"{r.loss:.0%}" for r in runs]
            lossless = runs[0].seconds if runs[0].loss == 0 else None
            shares = [r.of_lossless for r in runs]
            top.bar(names, shares, color="#1b5e20", alpha=0.8, label="median round")
            if lossless is not None:
                for x, r in enumerate(runs):
                    top.plot([x] * len(r.rounds), [lossless / s for s in r.rounds], ".",
                             color="black", markersize=4,
                             label="each round" if x == 0 else None)
            top.axhline(GOAL_OF_LOSSLESS, color="#b0413e", linestyle="--",
                        label=f"goal at {GOAL_LOSS:.0%}: {GOAL_OF_LOSSLESS:.0%}")
            for x, share in enumerate(shares):
                top.text(x, share / 2, f"{share:.0%}", ha="center", color="white")
            top.set_title(_regime(runs[0].rate_mbit), fontsize=10)
            top.set_ylabel("rate, of the lossless median")
            top.legend(loc="best", fontsize=7)
            bottom.bar(names, [r.busiest / 1e6 for r in runs], color="#2a7ab0")
            bottom.set_ylabel("busiest link, MB (one direction)")
            bottom.set_xlabel("frames lost per link and direction")
        fig.suptitle(f"INA AllReduce on {self.case.name} under loss on every link")
        save(fig, path, self.bmv2)
