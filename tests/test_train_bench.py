"""make train's report (ina.bench.train) from figures alone: the links' floor for a
DDP step, and the speed-up goals said against it."""

from __future__ import annotations

import json
import math

import pytest

from ina.bench.train import (
    TrainCaseResult,
    TrainFigures,
    TrainRegime,
    TrainRun,
    TrainSettings,
    goals,
    link_floor,
)
from ina.protocol.constants import ELEMS_PER_PACKET

PARAMETERS = 26_122
STEPS = 10
#: A host link's frame of a packet's values: Ethernet, IPv4, UDP, the INA header, the array.
FRAME_BYTES = 14 + 20 + 8 + 48 + 4 * ELEMS_PER_PACKET


def _run(backend: str, step: float, allreduces: int = STEPS) -> TrainRun:
    return TrainRun(backend, step * STEPS, step, 1 / step, 0.99, 0.1, 0.9, [0.1] * STEPS,
                    [step * (i + 1) for i in range(STEPS)],
                    collectives={"allreduce": {"switches": allreduces}})


def _case(name: str, rate_mbit: float | None, ina: float, gloo: float, hsdp: int = 0,
          allreduces: int = STEPS) -> tuple[TrainCaseResult, TrainRegime]:
    regime = TrainRegime("link" if rate_mbit else "cpu", rate_mbit,
                         [_run("ina", ina, allreduces), _run("gloo", gloo)], 0.0)
    case = TrainCaseResult(name, name, ["w1", "w2", "w3", "w4"], "root s1", PARAMETERS,
                           TrainSettings(steps=STEPS, hsdp=hsdp), [regime])
    return case, regime


def _floor(rate_mbit: float) -> float:
    """A step's packets (and its call's lead packet) once at ``rate_mbit``, seconds."""
    packets = math.ceil(PARAMETERS / ELEMS_PER_PACKET) + 1
    return packets * FRAME_BYTES * 8 / (rate_mbit * 1e6)


def test_the_links_floor_of_a_ddp_step_is_its_packets_once_at_the_links_rate() -> None:
    case, regime = _case("figure1", 4.0, ina=0.25, gloo=0.41)
    assert link_floor(case, regime) == pytest.approx(_floor(4.0))


def test_each_all_reduce_of_a_step_adds_its_lead_packet_to_the_floor() -> None:
    one, one_regime = _case("figure1", 4.0, ina=0.25, gloo=0.41)
    two, two_regime = _case("figure1", 4.0, ina=0.25, gloo=0.41, allreduces=2 * STEPS)
    one_floor, two_floor = link_floor(one, one_regime), link_floor(two, two_regime)
    assert one_floor is not None and two_floor is not None
    assert two_floor - one_floor == pytest.approx(FRAME_BYTES * 8 / 4e6)


def test_no_floor_with_links_unlimited_or_for_hsdp() -> None:
    assert link_floor(*_case("figure1", None, ina=0.07, gloo=0.07)) is None
    assert link_floor(*_case("fat-tree-hsdp", 2.0, ina=1.9, gloo=2.1, hsdp=2)) is None


def test_a_speedup_goal_past_what_the_links_allow_says_it_is_out_of_reach() -> None:
    case, _ = _case("figure1", 4.0, ina=0.25, gloo=0.40)
    most = 0.40 / _floor(4.0)
    assert most < 2.0
    whole_run = next(g for g in goals(case) if "whole run >= 2.0x" in g.goal)
    assert whole_run.passed is False
    assert f"the links allow at most {most:.2f}x (out of reach" in whole_run.measured


def test_a_speedup_goal_within_what_the_links_allow_is_not_called_out_of_reach() -> None:
    case, _ = _case("figure1", 4.0, ina=0.25, gloo=0.60)
    most = 0.60 / _floor(4.0)
    assert most > 2.4
    whole_run = next(g for g in goals(case) if "whole run >= 2.0x" in g.goal)
    assert whole_run.passed is True
    assert whole_run.measured == f"2.40x; the links allow at most {most:.2f}x"


def _pairs(*steps: tuple[float, float], stalled: int | None = None) -> TrainRegime:
    """A links-unlimited regime of pairs (ina's step, gloo's step), in the order
    ``run_case`` runs them (ina gloo, gloo ina, ...); ina's run of pair ``stalled``
    has one step of ten times its median."""
    runs: list[TrainRun] = []
    for i, (ina, gloo) in enumerate(steps):
        mine = _run("ina", ina)
        if i == stalled:
            mine.clock[-1] += 10 * ina
        pair = [mine, _run("gloo", gloo)]
        runs += pair if i % 2 == 0 else pair[::-1]
    return TrainRegime("cpu", None, runs, 0.0)


def test_a_regimes_speedup_is_its_median_pairs() -> None:
    regime = _pairs((0.10, 0.08), (0.10, 0.11), (0.10, 0.10))
    assert regime.speedups == pytest.approx([0.8, 1.1, 1.0])
    assert regime.speedup == pytest.approx(1.0)
    assert regime.run("ina") is regime.of("ina")[2]
    assert regime.run("gloo") is regime.of("gloo")[2]


def test_of_an_even_count_of_pairs_the_lower_middle_one_is_the_median() -> None:
    regime = _pairs((0.10, 0.12), (0.10, 0.09))
    assert regime.speedup == pytest.approx(0.9)


def test_pairs_are_made_by_backend_whatever_order_they_ran_in() -> None:
    regime = _pairs((0.10, 0.08), (0.20, 0.22))
    assert [run.backend for run in regime.runs] == ["ina", "gloo", "gloo", "ina"]
    assert [(ina.step_median, gloo.step_median) for ina, gloo in regime.pairs] == [
        (0.10, 0.08), (0.20, 0.22)]


def test_a_stall_in_any_pair_misses_the_no_stall_goal() -> None:
    regime = _pairs((0.10, 0.08), (0.10, 0.11), (0.10, 0.10), stalled=0)
    case = TrainCaseResult("fat-tree", "fat-tree", ["w1", "w2"], "root s1", PARAMETERS,
                           TrainSettings(steps=STEPS), [regime])
    stalls = next(g for g in goals(case) if "links unlimited: no ina step" in g.goal)
    assert stalls.passed is False
    assert stalls.measured.startswith("1 ")


def test_pairs_survive_the_figures_json() -> None:
    regime = _pairs((0.10, 0.08), (0.10, 0.11), (0.10, 0.10))
    case = TrainCaseResult("figure1", "figure1", ["w1", "w2"], "root s1", PARAMETERS,
                           TrainSettings(steps=STEPS), [regime])
    doc = TrainFigures([case], None, "bmv2", "torch").figures()
    again = TrainFigures.from_figures(json.loads(json.dumps(doc))).cases[0].regimes[0]
    assert again.speedups == pytest.approx(regime.speedups)
    assert doc["cases"][0]["regimes"][0]["speedup"] == pytest.approx(1.0)
    text = TrainFigures([case], None, "bmv2", "torch").render()
    assert "pair by pair: 0.80x, 1.10x, 1.00x; the median pair is 3" in text
    rows = [line.split()[:2] for line in text.splitlines()
            if line.split()[:1] in (["ina"], ["gloo"]) and line.split()[1].isdigit()]
    assert rows == [["ina", "1"], ["gloo", "1"], ["gloo", "2"], ["ina", "2"], ["ina", "3"],
                    ["gloo", "3"]]
