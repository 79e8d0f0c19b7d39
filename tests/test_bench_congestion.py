"""make bench-congestion's arithmetic, on made-up runs: each flow's share of the
link, the stops, the goals (the measurement itself needs Mininet + BMv2 + iperf3);
and its workers' loop of calls on the reference model."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest

from ina.bench.congestion import TCP_WIRE_PER_BYTE, Call, CongestionRun, calls
from ina.bench.onlab import INA_WIRE_PER_VALUE
from ina.host.arrays import random_array

from inatest import ModelLab, figure1_job, in_threads, model_workers

RATE = 4.0  # Mbit/s
VALUES = 8192
#: Seconds a call of VALUES takes at half the link.
HALF = VALUES * INA_WIRE_PER_VALUE * 8 / (RATE * 1e6 / 2)
#: TCP payload bytes per second at half the link.
TCP_HALF = RATE * 1e6 / 2 / 8 / TCP_WIRE_PER_BYTE


def _run(tcp_stop: tuple[float, float] | None = None, slow_call: float = 0.0) -> CongestionRun:
    calls, t = [], 0.0
    while t < 12:
        took = HALF if t < 10 else HALF / 2  # INA alone after 10 s: the whole link
        if slow_call and 4 <= t < 4 + HALF:
            took = slow_call
        calls.append(Call(t, t + took, True, 8.0, 1))
        t += took
    tcp = []
    for i in range(40):  # ten seconds in 0.25 s intervals
        s = i * 0.25
        stopped = tcp_stop is not None and tcp_stop[0] <= s < tcp_stop[1]
        tcp.append((s, s + 0.25, 0.0 if stopped else TCP_HALF * 0.25))
    return CongestionRun(RATE, 10.0, 2.0, VALUES, {"w1": calls, "w2": calls}, tcp,
                         [(0.0, 0)], {"shared": 5}, {"shared": 100}, "BMv2", "cubic")


def test_each_flow_at_half_the_link_has_half_of_it() -> None:
    run = _run()
    assert run.share("ina", 0, 10) == pytest.approx(0.5, rel=0.01)
    assert run.share("tcp", 0, 10) == pytest.approx(0.5, rel=0.01)


def test_a_call_counts_its_bytes_over_its_whole_duration() -> None:
    run = _run()
    first = run.calls["w1"][0]
    middle = (first.start + first.end) / 2
    assert run.ina_bits(first.start, middle) == pytest.approx(run.ina_bits(middle, first.end))


def test_fair_shares_without_stops_meet_every_goal() -> None:
    goals = _run().goals().goals
    assert [g.passed for g in goals] == [True, True, True, True], [g.line() for g in goals]


def test_a_tcp_flow_that_moves_nothing_for_over_a_second_misses_the_stop_goal() -> None:
    run = _run(tcp_stop=(3.0, 4.5))
    assert run.longest_tcp_stop() == pytest.approx(1.5)
    stops = next(g for g in run.goals().goals if "stops" in g.goal)
    assert stops.passed is False


def test_a_call_of_over_a_second_misses_the_stop_goal() -> None:
    stops = next(g for g in _run(slow_call=1.5).goals().goals if "stops" in g.goal)
    assert stops.passed is False and "1.50 s" in stops.measured


def test_a_wrong_result_misses_the_exactness_goal() -> None:
    run = _run()
    run.calls["w2"] = [*run.calls["w2"][:-1], Call(11.0, 11.1, False, 8.0, 0)]
    exact = next(g for g in run.goals().goals if "exact" in g.goal)
    assert exact.passed is False


def test_the_figures_read_back_from_json_are_the_run() -> None:
    run = _run()
    assert CongestionRun.from_figures(json.loads(json.dumps(run.figures()))) == run


def test_the_report_names_the_tcp_flows_congestion_control() -> None:
    # The machine's default may be BBR, which ignores the marks: the share depends on it.
    assert "iperf3, cubic, ECN on" in _run().render()


# --- the loop on each worker's host ------------------------------------------------------


def test_the_workers_loops_stop_after_the_same_call_when_one_workers_time_is_up(
        model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    model_lab.deploy(job)
    workers = model_workers(model_lab, job)
    arrays = {w: random_array(300, i) for i, w in enumerate(job.workers)}
    expected = np.sum([a.astype(np.int64) for a in arrays.values()], axis=0)
    seconds = {w: 0.0 if w == "w3" else 60.0 for w in job.workers}  # w3's are up at once
    made = in_threads({w: partial(calls, workers[w], arrays[w], expected, len(job.workers),
                                  seconds[w]) for w in job.workers})
    for w, outcome in made.items():
        assert isinstance(outcome, list), (w, outcome)
        assert len(outcome) == 1 and outcome[0]["exact"], w
