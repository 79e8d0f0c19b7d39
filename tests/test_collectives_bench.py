"""inabench collectives without a lab: its figures through JSON and back, their text,
picture and goals (pass, miss, not measured: never a pass without a measurement), what
a regime measures, what each rank must get, and the arguments it refuses."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from ina.bench.collective_rank import OWNED, Command, expected, inputs
from ina.bench.collectives_figures import CollectivesFigures
from ina.bench.collectives_goals import cpu_goals, goals, unlimited_speed_goals
from ina.bench.collectives_plan import (
    ARRAY_COLLECTIVES,
    BIER_WIRE_PER_VALUE,
    METHODS,
    CollectiveRun,
    CollectivesCase,
    CollectivesRegime,
    commands,
)
from ina.bench.onlab import COLLECTIVE_SIZE_QUANTUM, INA_WIRE_PER_VALUE
from ina.cli import inabench

WORKERS = ["w1", "w2", "w3", "w4"]
SIZE = 131072
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib not installed: pip install -e '.[bench]'")


def run(collective: str, method: str, seconds: float, *, dtype: str = "float32",
        width: int | None = None, up: float = 4.4, down: float = 4.4, busiest: float = 4.5,
        correct: bool = True, cpu: tuple[float, float] = (0.0, 0.0)) -> CollectiveRun:
    """``cpu``: CPU seconds of the switches and of the ranks (none: not measured)."""
    return CollectiveRun(collective, method, dtype, width, seconds,
                         0.0 if collective == "barrier" else SIZE / seconds, ("s1", "s5"),
                         busiest, busiest * 6, dict.fromkeys(WORKERS, up),
                         dict.fromkeys(WORKERS, down), correct, 1e-6,
                         switch_cpu_s=cpu[0], rank_cpu_s=cpu[1], values=SIZE)


def regime(rate: float | None, *, reduce_ina: float = 1.0) -> CollectivesRegime:
    """A regime without INA's Allgather (as a run that lost it): INA Reduce
    ``reduce_ina`` seconds against gloo's 2."""
    runs = [run("broadcast", "INA", 1.0, up=0.4), run("broadcast", "gloo", 3.0),
            run("broadcast", "hosts", 2.0),
            run("reduce", "INA", reduce_ina, down=0.5), run("reduce", "gloo", 2.0),
            run("reduce", "hosts", 2.0),
            run("reduce_scatter", "INA", 1.0, down=INA_WIRE_PER_VALUE * 0.3),
            run("reduce_scatter", "gloo", 1.5), run("reduce_scatter", "hosts", 2.0),
            run("allgather", "gloo", 1.5), run("allgather", "hosts", 2.0),
            run("allreduce", "INA", 1.0), run("allreduce", "gloo", 2.0),
            run("allreduce", "hosts", 2.0)]
    runs += [run("barrier", m, 0.01) for m in ("INA", "gloo", "hosts")]
    runs += [run("allreduce", "INA", 0.5, dtype="float16", width=16, busiest=2.25),
             run("allreduce", "INA", 1.0, dtype="float16", width=32),
             run("allreduce", "gloo", 1.0, dtype="float16")]
    return CollectivesRegime("cpu" if rate is None else "link", rate, runs)


def case(link: CollectivesRegime | None = None) -> CollectivesCase:
    return CollectivesCase("figure1", "figure1", WORKERS, "root s1", SIZE, 32,
                           [regime(None), link or regime(4.0)])


def figures(link: CollectivesRegime | None = None) -> CollectivesFigures:
    return CollectivesFigures([case(link)], "simple_switch_grpc 1.15.5", "2.14.1")


def goal(c: CollectivesCase, starts: str) -> tuple[str, bool | None]:
    found = next(g for g in goals(c) if g.goal.startswith(starts))
    return found.measured, found.passed


# --- JSON -------------------------------------------------------------------------------


def test_figures_read_back_from_their_json_are_the_same_figures() -> None:
    doc = json.loads(json.dumps(figures().figures()))
    again = CollectivesFigures.from_figures(doc).figures()
    assert json.loads(json.dumps(again)) == doc


def test_from_json_prints_the_json_it_read(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "collectives.json"
    path.write_text(json.dumps(figures().figures()))
    assert inabench.main(["collectives", "--from-json", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(path.read_text())


@needs_matplotlib
def test_from_json_reports_and_draws_the_figures(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path, png = tmp_path / "collectives.json", tmp_path / "collectives.png"
    path.write_text(json.dumps(figures().figures()))
    assert inabench.main(["collectives", "--from-json", str(path), "--png", str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    out = capsys.readouterr().out
    assert "simple_switch_grpc 1.15.5" in out and "Goals of issue 17" in out


def test_figures_of_another_benchmark_are_refused_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "loss.json"
    path.write_text(json.dumps([{"loss": 0.0}]))
    assert inabench.main(["collectives", "--from-json", str(path)]) == 2
    assert "does not hold figures of inabench collectives" in capsys.readouterr().err


# --- the text ---------------------------------------------------------------------------


def test_the_report_puts_ina_over_gloo_and_16_over_32_bits_beside_the_rates() -> None:
    text = figures().render()
    reduce_gloo = next(line for line in text.splitlines()
                       if line.split()[:2] == ["Reduce", "gloo"])
    assert "2.00x" in reduce_gloo  # INA 1 s, gloo 2 s
    assert "16-bit/32-bit 2.00x, 16-bit/gloo float16 2.00x" in text


def test_the_report_says_a_measurement_missing_from_the_figures_was_not_run() -> None:
    text = figures().render()
    line = next(x for x in text.splitlines() if x.split()[:2] == ["Allgather", "INA"])
    assert line.split()[2:] == ["not", "run"]


def test_a_wrong_result_is_reported_as_wrong_not_as_a_rate() -> None:
    link = regime(4.0)
    link.runs[3] = dataclasses.replace(link.runs[3], correct=False)  # INA Reduce
    text = figures(link).render()
    assert "WRONG" in text
    assert "NOT: INA Reduce (link)" in text


# --- goals ------------------------------------------------------------------------------


@pytest.mark.parametrize("copies,passed", [(1.0, True), (2.0, False)])
def test_broadcasts_goal_of_no_link_carrying_it_twice_counts_copies_inside_bier(
        copies: float, passed: bool) -> None:
    link = regime(4.0)
    link.runs[0] = dataclasses.replace(link.runs[0],
                                       busiest_bytes_per_value=copies * BIER_WIRE_PER_VALUE)
    assert goal(case(link), "Broadcast: no link") == (
        f"busiest s1->s5 {copies:.2f}x one copy", passed)


def test_a_goal_met_passes() -> None:
    assert goal(case(), "Reduce:") == ("2.00x", True)


def test_a_goal_missed_by_a_little_is_a_miss() -> None:
    measured, passed = goal(case(regime(4.0, reduce_ina=1.6)), "Reduce:")
    assert (measured, passed) == ("1.25x", False)


def test_a_goal_on_a_collective_not_run_is_not_measured_not_passed() -> None:
    assert goal(case(), "Allgather: INA >=") == ("INA Allgather: not run", None)


def test_a_goal_on_a_failed_run_is_a_miss() -> None:
    link = regime(4.0)
    link.runs[6] = dataclasses.replace(link.runs[6], errors=["w1: AllreduceTimeout"])
    measured, passed = goal(case(link), "Reduce-scatter: each downlink")
    assert passed is False and "FAILED" in measured


def test_reduce_scatters_downlink_goal_is_s_over_n_plus_a_tenth_of_s() -> None:
    assert goal(case(), "Reduce-scatter: each downlink") == ("largest 0.300 S", True)
    link = regime(4.0)
    link.runs[6] = dataclasses.replace(
        link.runs[6], downlink_bytes_per_value=dict.fromkeys(WORKERS, INA_WIRE_PER_VALUE * 0.4))
    assert goal(case(link), "Reduce-scatter: each downlink") == ("largest 0.400 S", False)


def test_without_the_link_regime_no_goal_is_judged() -> None:
    c = dataclasses.replace(case(), regimes=[regime(None)])
    assert [g.passed for g in goals(c)] == [None]


# --- what is measured -------------------------------------------------------------------


def test_a_regime_measures_every_collective_by_every_method_and_barriers_by_each() -> None:
    plan = commands(COLLECTIVE_SIZE_QUANTUM)
    float32 = [(c.method, c.collective) for c in plan if c.dtype == "float32"]
    assert set(float32) == ({(m, k) for k in (*ARRAY_COLLECTIVES, "barrier") for m in METHODS}
                            | {(OWNED, k) for k in ("broadcast", "allgather")})
    assert len(float32) == len(set(float32))


def test_a_regime_measures_float16_allreduce_in_both_widths_and_gloos() -> None:
    fp16 = [(c.method, c.width) for c in commands(COLLECTIVE_SIZE_QUANTUM) if c.dtype == "float16"]
    assert fp16 == [("INA", 16), ("INA", 32), ("gloo", None)]


def test_each_rank_expects_its_own_part_of_a_reduce_scatter() -> None:
    command = Command("INA", "reduce_scatter", 8)
    arrays = inputs(command, 4)
    total = np.sum([a.astype(np.float64) for a in arrays], axis=0)
    got = expected(command, arrays, 2)
    assert got is not None and np.array_equal(got, total[4:6])


def test_an_allgathers_parts_are_s_over_n_and_every_rank_expects_them_all() -> None:
    command = Command("gloo", "allgather", 8)
    arrays = inputs(command, 4)
    assert [a.size for a in arrays] == [2, 2, 2, 2]
    got = expected(command, arrays, 0)
    assert got is not None and got.size == 8


def test_only_the_root_expects_a_reduces_result() -> None:
    command = Command("INA", "reduce", 8, root=1)
    arrays = inputs(command, 4)
    assert expected(command, arrays, 0) is None
    assert expected(command, arrays, 1) is not None


# --- arguments --------------------------------------------------------------------------


@pytest.mark.parametrize("argv,says", [
    (["--size", str(COLLECTIVE_SIZE_QUANTUM + 4)], "not a positive multiple of"),
    (["--size", "0"], "not a positive multiple of"),
    (["--size", "many"], "not a whole number"),
    (["--case", "leaf-spine"], "invalid choice"),
])
def test_bad_arguments_exit_2_saying_why(argv: list[str], says: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        inabench.main(["collectives", *argv])
    assert ended.value.code == 2
    assert says in capsys.readouterr().err


def test_an_unknown_regime_exits_2_before_anything_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert inabench.main(["collectives", "--regimes", "cpu,fast"]) == 2
    assert "--regimes takes cpu, link or both" in capsys.readouterr().err


# --- CPU per value (issue 24) -------------------------------------------------------------


def _with_cpu(ina: tuple[float, float], gloo: tuple[float, float]) -> CollectivesCase:
    c = case()
    cpu = c.regimes[0]
    cpu.runs = [dataclasses.replace(r, switch_cpu_s=ina[0], rank_cpu_s=ina[1])
                if r.method == "INA" else
                dataclasses.replace(r, switch_cpu_s=gloo[0], rank_cpu_s=gloo[1])
                if r.method == "gloo" else r for r in cpu.runs]
    return c


def test_cpu_per_value_is_each_kind_of_process_over_the_values_moved() -> None:
    r = run("allreduce", "INA", 1.0, cpu=(0.5, 0.25))
    assert r.cpu_us_per_value() == pytest.approx((0.5 / SIZE * 1e6, 0.25 / SIZE * 1e6))


def test_the_report_prints_cpu_per_value_by_kind_of_process() -> None:
    text = CollectivesFigures([_with_cpu((1.31072, 0.131072), (1.31072, 0.0))],
                              "BMv2", "2.14.1").render()
    assert "AllReduce      INA 10.00 + 1.00 = 11.00   gloo 10.00 + 0.00 = 10.00" in text


def test_ina_using_less_cpu_per_value_than_gloo_passes_issue_24s_goal() -> None:
    judged = {g.goal.split(",")[0]: g.passed for g in cpu_goals(_with_cpu((1.0, 0.1), (1.0, 0.2)))}
    assert judged == {"Reduce": True, "Reduce-scatter": True, "AllReduce": True}


def test_ina_using_more_cpu_per_value_misses_issue_24s_goal() -> None:
    goals_ = cpu_goals(_with_cpu((1.2, 0.2), (1.0, 0.2)))
    assert [g.passed for g in goals_] == [False, False, False]
    assert "(1.17x)" in goals_[0].measured


def test_a_cpu_goal_inas_switches_alone_miss_says_no_host_code_can_meet_it() -> None:
    goals_ = cpu_goals(_with_cpu((1.3, 0.2), (1.0, 0.2)))
    assert [g.passed for g in goals_] == [False, False, False]
    assert goals_[0].measured.endswith(": out of the hosts' code's reach")


def test_a_cpu_goal_missed_by_the_ranks_alone_is_not_called_out_of_reach() -> None:
    goals_ = cpu_goals(_with_cpu((1.1, 0.2), (1.0, 0.2)))
    assert [g.passed for g in goals_] == [False, False, False]
    assert "reach" not in goals_[0].measured


def test_figures_without_cpu_times_leave_issue_24s_goal_not_measured() -> None:
    assert [g.passed for g in cpu_goals(case())] == [None, None, None]


def test_issue_24s_speed_goals_with_links_unlimited_judge_each_collective_against_gloo() -> None:
    judged = {g.goal.split(",")[0]: (g.measured, g.passed) for g in unlimited_speed_goals(case())}
    assert judged["Reduce"] == ("2.00x", True)
    assert judged["Broadcast"] == ("3.00x", True)
    assert judged["Allgather"] == ("INA Allgather: not run", None)


def test_a_collective_slower_than_gloo_with_links_unlimited_misses_issue_24s_goal() -> None:
    slow = CollectivesCase("figure1", "figure1", WORKERS, "root s1", SIZE, 32,
                           [regime(None, reduce_ina=2.5)])
    judged = {g.goal.split(",")[0]: g.passed for g in unlimited_speed_goals(slow)}
    assert judged["Reduce"] is False and judged["AllReduce"] is True
