"""INA under loss (``inabench loss``, ``make bench-loss``): the INA AllReduce of
Figure 1 with frames dropped (nftables) on every link, against the same AllReduce
without loss, in one run; links unlimited (the switches' CPU bounds the rate), or
at a rate (``--rate``: the links bound it, as on hardware switches)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ina.bench.onlab import CASES, Bench, Case, bench_on_lab
from ina.bench.timing import start_together, wait_all
from ina.control.switch import CounterValue
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


def run(build_dir: Path, losses: list[float], size: int, case: Case,
        rounds: int = 3, rate_mbit: float | None = None) -> list[LossRun]:
    """Inside the sandbox: ``measure_on_bench`` on ``case``'s lab with its job deployed."""
    with bench_on_lab(case, build_dir) as bench:
        return measure_on_bench(bench, losses, size, rounds, rate_mbit)


def measure_on_bench(bench: Bench, losses: list[float], size: int, rounds: int = 3,
                     rate_mbit: float | None = None) -> list[LossRun]:
    """The INA AllReduce of ``size`` values of the bench's job at each loss rate,
    ``rounds`` times, the loss rates taking turns (the median is reported: one stall
    of the machine does not decide a figure), every link at ``rate_mbit`` meanwhile
    (None: as the lab has them), the lab's own links again after. RuntimeError if a
    result is not exact."""
    from ina.host.arrays import digest, random_array
    from ina.model.harness import reduce_arrays

    job, lab = bench.job, bench.lab
    expected = digest(reduce_arrays(job.op, [random_array(size, i)
                                             for i in range(len(job.workers))]))
    reports: dict[float, list[dict[str, Any]]] = {loss: [] for loss in losses}
    queues = lab.topology.queues
    if rate_mbit is not None:
        lab.limit_links(rate_mbit)
    try:
        for _ in range(rounds):
            for loss in losses:
                reports[loss].append(_round(bench, loss, size, expected))
    finally:
        if lab.topology.queues != queues:
            lab.set_queues(queues)
    runs: list[LossRun] = []
    for loss in losses:
        by_time = sorted(reports[loss], key=lambda r: float(r["seconds"]))
        median = by_time[len(by_time) // 2]
        seconds = float(median["seconds"])
        lossless = runs[0].values_per_s if runs else size / seconds
        runs.append(LossRun(loss, seconds, size / seconds, size / seconds / lossless,
                            int(median["retransmissions"]), int(median["early"]),
                            [float(r["seconds"]) for r in reports[loss]], rate_mbit,
                            int(median["duplicates"]), int(median["resent"]),
                            int(median["queries"]), int(median["held"]),
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
        raise RuntimeError(f"a result at loss {loss} is not exact")
    return {"seconds": max(r["elapsed"] for r in workers.values()),
            "retransmissions": sum(r["retransmissions"] for r in workers.values()),
            "early": sum(r["early_retransmissions"] for r in workers.values()),
            "queries": sum(r["queries"] for r in workers.values()),
            "held": sum(r["held"] for r in workers.values()),
            "marked": sum(r["marked"] for r in workers.values()),
            "busiest": _busiest({k: v - ports_before.get(k, 0) for k, v in ports_after.items()}),
            "duplicates": after[JobStat.DROP_DUPLICATE] - before[JobStat.DROP_DUPLICATE],
            "resent": after[JobStat.RESENT] - before[JobStat.RESENT]}


@dataclass
class LossFigures:
    """What ``inabench loss`` measured: a run per loss rate, on Figure 1."""

    runs: list[LossRun]
    case: Case = CASES["figure1"]

    def figures(self) -> list[dict[str, Any]]:
        """As JSON-ready data (docs/loss.json)."""
        return [asdict(r) for r in self.runs]

    @classmethod
    def from_figures(cls, doc: Any) -> LossFigures:
        """From ``figures()``'s data (KeyError or TypeError if it is not that)."""
        return cls([LossRun(**r) for r in doc])

    def render(self) -> str:
        runs = self.runs
        size = round(runs[0].values_per_s * runs[0].seconds)  # values per worker
        links = ("links unlimited" if runs[0].rate_mbit is None
                 else f"links at {runs[0].rate_mbit:g} Mbit/s")
        lines = [f"INA AllReduce of {size} values per worker on {self.case.name} ({links}), "
                 "frames dropped on every link (each direction) by nftables; in one run, the "
                 f"median of {len(runs[0].rounds)} AllReduces per loss rate (taking turns), "
                 "every result exact.", "",
                 f"{'loss per link':>14} {'seconds':>8} {'values/s':>10} {'of lossless':>12} "
                 f"{'retransmissions':>16} {'(early)':>8} {'duplicates':>11} {'resent':>7} "
                 f"{'queries':>8} {'held':>6} {'marked':>7} {'busiest link':>13}"]
        for r in runs:
            lines.append(f"{r.loss:>14.0%} {r.seconds:>8.2f} {r.values_per_s:>10,.0f} "
                         f"{r.of_lossless:>11.0%} {r.retransmissions:>16} "
                         f"{r.early_retransmissions:>8} {r.duplicates:>11} {r.resent:>7} "
                         f"{r.queries:>8} {r.held:>6} "
                         + (f"{r.marked:>7} {f'{r.busiest / 1e6:.2f} MB':>13}" if r.busiest
                            else f"{'-':>7} {'-':>13}"))
        lines += ["", "duplicates: retransmissions the switches found already in an "
                  "incomplete round (another worker's contribution was lost); resent: ones "
                  "that found the round complete (the result sent again to their sender); "
                  "queries: the workers' QUERYs before sending values again; held: those "
                  "answered HELD (the values were not sent again); marked: the workers' "
                  "results that carried a congestion mark; busiest link: the bytes that "
                  "crossed the most loaded link in one direction."]
        at = [f"{r.loss:.0%}: {r.busiest_at}" for r in runs if r.busiest_at]
        if at:
            lines.append(f"The busiest link (a switch's port, what it sent or received): "
                         f"{'; '.join(at)}.")
        return "\n".join(lines)
