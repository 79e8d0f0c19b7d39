"""The goals of issues 17 and 24 for ``inabench collectives``, judged against a
case's runs (ina.bench.collectives_plan's records)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from ina.bench.collective_rank import OWNED, OWNED_COLLECTIVES, Command
from ina.bench.collectives_plan import (
    BIER_WIRE_PER_VALUE,
    NAMES,
    CollectiveRun,
    CollectivesCase,
    CollectivesRegime,
)
from ina.bench.goals import Goal, Goals, less_cpu
from ina.bench.onlab import (
    INA_WIRE_PER_VALUE,
)

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
    return None if r.ok else f"{r.label} {NAMES[r.collective]}: {r.failure()}"


def _faster(least: float) -> Callable[[list[CollectiveRun]], tuple[str, bool]]:
    """The first run at least ``least`` times as fast as the second."""
    return lambda rs: (f"{rs[1].seconds / rs[0].seconds:.2f}x",
                       rs[1].seconds / rs[0].seconds >= least)


