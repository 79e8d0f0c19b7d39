"""What a chaos soak measured (``inabench soak``, ina.bench.soak): a run per case
(``SoakRun``, what it left behind ``Leftovers``), its goals, its text, and the
figures of a whole soak through JSON and back (``SoakFigures``)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ina.bench.chaos import FAULT_KINDS
from ina.bench.chaos_frames import MEMBER_KINDS, OUTSIDER_KINDS
from ina.bench.goals import Goal, Goals
from ina.bench.goals import render as render_goals
from ina.bench.output import watch_figures
from ina.control.watch import WatchOptions

# --- The figures ----------------------------------------------------------------------


@dataclass
class Leftovers:
    """What the soak left behind once its job was torn down (goal: nothing)."""

    processes: list[str] = field(default_factory=list)  # still running, by command
    job_entries: int = 0  # table entries of the soak's job, on any switch
    job_groups: int = 0  # multicast groups of no deployed job
    job_indices: int = 0  # job indices still taken by the soak's job
    slots: int = 0  # aggregation slots still taken by the soak's job
    files: list[str] = field(default_factory=list)  # new in the run and temporary directories
    problems: list[str] = field(default_factory=list)  # what could not be checked, and why

    def nothing(self) -> bool:
        return not (self.processes or self.job_entries or self.job_groups or self.job_indices
                    or self.slots or self.files or self.problems)

    def describe(self) -> str:
        if self.nothing():
            return "nothing"
        parts = []
        if self.processes:
            parts.append(f"{len(self.processes)} processes ({'; '.join(self.processes)})")
        for n, what in ((self.job_entries, "table entries"), (self.job_groups,
                                                              "multicast groups"),
                        (self.job_indices, "job indices"), (self.slots, "slots")):
            if n:
                parts.append(f"{n} {what}")
        if self.files:
            parts.append(f"{len(self.files)} files ({', '.join(self.files[:5])}"
                         + (", ..." if len(self.files) > 5 else "") + ")")
        parts += [f"not checked: {p}" for p in self.problems]
        return "; ".join(parts)


@dataclass
class SoakRun:
    """One soak's figures."""

    case: str
    topology: str
    job_id: int
    workers: list[str]
    member: str  # the misbehaving member
    outsider: str
    seed: int
    minutes: float  # the soak's bound
    max_calls: int
    worker_timeout: float  # a worker gives up after this long without progress
    hung_after: float  # a call not ended by then hung
    max_attempts: int  # per call
    seconds: float = 0.0  # how long the loop ran
    calls: int = 0  # calls run (training steps)
    attempts: int = 0  # runs of a call, retries included
    exact: int = 0  # calls whose every worker got the exact result
    wrong: list[str] = field(default_factory=list)  # each wrong result, said
    hung: list[str] = field(default_factory=list)  # each hung run of a call, said
    retried: int = 0  # calls that needed a retry
    given_up: int = 0  # calls that failed every attempt
    restarted: int = 0  # worker processes restarted (after a hung call)
    redeployed: int = 0  # the job torn down and deployed again (after a given-up call)
    errors: dict[str, int] = field(default_factory=dict)  # failed attempts, by error
    first_errors: list[str] = field(default_factory=list)  # the first of each kind
    failures: dict[str, int] = field(default_factory=dict)  # injected, by kind
    recoveries: int = 0
    undetected: list[str] = field(default_factory=list)  # failures the watcher missed
    false_verdicts: list[str] = field(default_factory=list)  # reported down, never failed
    #: Reported down long after the soak had brought them back.
    stale_verdicts: list[str] = field(default_factory=list)
    repairs: dict[str, int] = field(default_factory=dict)  # by job action; "failed"
    member_sent: dict[str, int] = field(default_factory=dict)  # misbehaviours, by kind
    outsider_sent: dict[str, int] = field(default_factory=dict)
    frames_sent: int = 0  # by the member and the outsider
    replans: int = 0  # the workers' re-plans, summed
    on_hosts: int = 0  # call runs reduced on hosts (no switch could take the job)
    step_seconds: list[float] = field(default_factory=list)  # median, 95th pct, max
    final_call: str = ""  # one more call once everything was back
    #: What the watcher reported down once everything was back (and a minute passed).
    end_verdict: str = ""
    drops: dict[str, int] = field(default_factory=dict)  # packets the switches dropped
    left: Leftovers = field(default_factory=Leftovers)
    events: list[str] = field(default_factory=list)  # what happened, timed

    def step_stats(self, seconds: Sequence[float]) -> None:
        if seconds:
            ordered = sorted(seconds)
            self.step_seconds = [round(statistics.median(ordered), 4),
                                 round(ordered[int(0.95 * (len(ordered) - 1))], 4),
                                 round(ordered[-1], 4)]

    def figures(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_figures(cls, doc: Any) -> SoakRun:
        names = {f.name for f in fields(cls)}
        run = cls(**{k: v for k, v in doc.items() if k in names and k != "left"})
        run.left = Leftovers(**doc.get("left", {}))
        return run


def _counts(counts: dict[str, int], order: Sequence[str] = ()) -> str:
    keys = [k for k in order if k in counts] + sorted(k for k in counts if k not in order)
    return ", ".join(f"{k} {counts[k]}" for k in keys) or "none"


def soak_goals(r: SoakRun) -> list[Goal]:
    """A soak's goals: no wrong result, no hung call, nothing left behind, and (issue
    22) no false verdict of the watcher: a switch or link reported down that never
    failed."""
    goals = Goals[SoakRun](r.case, lambda _run: None)
    goals.add("no wrong result", f"{len(r.wrong)} wrong", not r.wrong)
    goals.add("no hung call", f"{len(r.hung)} hung", not r.hung)
    goals.add("nothing left behind", r.left.describe(), r.left.nothing())
    goals.add("no false verdict of the watcher", f"{len(r.false_verdicts)} false",
              not r.false_verdicts)
    return goals.goals


def render(runs: Sequence[SoakRun], bmv2: str, watch: dict[str, float]) -> str:
    lines = [f"chaos soak: a training-like loop of AllReduce calls while switches and links "
             f"fail and come back, the watcher (probes every {watch['interval']:g}s, verdict "
             f"after {watch['detect_after']:g}s) repairing, a member misbehaving and an "
             f"outsider sending garbage; {bmv2}"]
    for r in runs:
        minutes = r.seconds / 60
        rate = r.calls / minutes if minutes else 0.0
        lines += [
            f"{r.case} ({r.topology}): job {r.job_id}, {len(r.workers)} workers; seed "
            f"{r.seed}; {r.seconds:.0f}s (bound {r.minutes:g} min, {r.max_calls} calls)",
            f"  calls run {r.calls} ({r.attempts} attempts, {rate:.0f} a minute): exact "
            f"{r.exact}; WRONG {len(r.wrong)}; hung {len(r.hung)} (a call not ended within "
            f"{r.hung_after:g}s; workers give up after {r.worker_timeout:g}s without "
            f"progress); needed a retry {r.retried}, of which {r.given_up} failed all "
            f"{r.max_attempts} attempts (then the job was redeployed: {r.redeployed} times); "
            f"worker processes restarted {r.restarted}",
            "  step time (s): median, 95th percentile, max: "
            + (", ".join(f"{s:.3f}" for s in r.step_seconds) or "none"),
            f"  failed attempts by error: {_counts(r.errors)}",
            f"  failures injected: {_counts(r.failures, FAULT_KINDS)}; recovered "
            f"{r.recoveries}; missed by the watcher {len(r.undetected)}; false verdicts "
            f"{len(r.false_verdicts)}; still reported down 10s after they were back "
            f"{len(r.stale_verdicts)}",
            f"  repairs: {_counts(r.repairs)}; worker re-plans {r.replans}; runs on hosts "
            f"{r.on_hosts}",
            f"  misbehaving member {r.member}: {_counts(r.member_sent, MEMBER_KINDS)}",
            f"  outsider {r.outsider}: {_counts(r.outsider_sent, OUTSIDER_KINDS)} "
            f"({r.frames_sent} frames from both)",
            f"  dropped by the switches (packets): {_counts(r.drops)}",
            f"  once everything was back, the watcher reported down: "
            f"{r.end_verdict or 'not known'}; one more call: {r.final_call or 'not run'}",
            f"  left behind: {r.left.describe()}",
        ]
        lines += render_goals("  goals:", soak_goals(r))
        lines += [f"  WRONG: {w}" for w in r.wrong[:10]]
        lines += [f"  HUNG: {h}" for h in r.hung[:10]]
        lines += [f"  error, e.g.: {e}" for e in r.first_errors[:8]]
        lines += [f"  missed: {u}" for u in r.undetected[:5]]
        lines += [f"  false verdict: {v}" for v in r.false_verdicts[:5]]
        lines += [f"  stale verdict: {v}" for v in r.stale_verdicts[:5]]
    return "\n".join(lines)


@dataclass
class SoakFigures:
    """What ``inabench soak`` measured: a run per case, the BMv2 build, the watcher's
    options."""

    runs: list[SoakRun]
    bmv2: str
    watch: dict[str, float]

    @classmethod
    def measured(cls, runs: list[SoakRun], bmv2: str, options: WatchOptions) -> SoakFigures:
        return cls(runs, bmv2, watch_figures(options))

    def figures(self) -> dict[str, Any]:
        """As JSON-ready data (docs/soak.json)."""
        return {"bmv2": self.bmv2, "watch": self.watch, "runs": [r.figures() for r in self.runs]}

    @classmethod
    def from_figures(cls, doc: Any) -> SoakFigures:
        """From ``figures()``'s data (KeyError or TypeError if it is not that)."""
        return cls([SoakRun.from_figures(r) for r in doc["runs"]], str(doc["bmv2"]),
                   {k: float(v) for k, v in doc["watch"].items()})

    def render(self) -> str:
        return render(self.runs, self.bmv2, self.watch)
