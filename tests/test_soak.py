"""The chaos soak's plan without a lab (ina.bench.chaos): seeded schedules that never
cut a worker off, the exact results the workers check theirs against (the model's,
bit for bit), the misbehaving member's packets that cannot pass for its own, the
outsider's garbage dropped by the data plane, and the figures' round trip through
``inabench soak --from-json``."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ina.bench import chaos, chaos_calls, chaos_frames, soak_figures
from ina.bench.chaos_calls import CallPlan
from ina.bench.chaos_frames import (
    FAR_AHEAD,
    MEMBER_KINDS,
    OUTSIDER_KINDS,
    HostView,
    JobView,
    MemberState,
)
from ina.bench.soak import CASES, _error_kind
from ina.bench.soak_figures import Leftovers, SoakFigures, SoakRun
from ina.cli import inabench
from ina.control.watch import WatchOptions
from ina.host import quantize
from ina.host.results import AllreduceResult
from ina.protocol.bitmaps import one_set
from ina.protocol.constants import ELEMS_PER_PACKET, Flag, Op, SwitchStat
from ina.protocol.frames import parse_frame
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Failures, Topology

from inatest import ROOT, ModelLab, in_threads, make_model_lab, model_workers, switch_stat

LEAF_SPINE = Topology.load(CASES["leaf-spine"].topology)
LEAF_SPINE_JOB = JobSpec.load(CASES["leaf-spine"].job)
FAT_TREE = Topology.load(CASES["fat-tree"].topology)
FAT_TREE_JOB = JobSpec.load(CASES["fat-tree"].job)


# --- what fails, when ---------------------------------------------------------------


def test_the_elements_that_may_fail_are_all_but_the_workers_edges_and_host_links() -> None:
    kinds = Counter(f.kind for f in chaos.faults(LEAF_SPINE, LEAF_SPINE_JOB.workers))
    assert kinds == {"spine": 2, "link": 8}
    kinds = Counter(f.kind for f in chaos.faults(FAT_TREE, FAT_TREE_JOB.workers))
    assert kinds == {"aggregation switch": 8, "core switch": 4, "link": 32}
    # Workers under two of the four leaves: the two others may fail.
    elements = chaos.faults(LEAF_SPINE, ["h1_1", "h2_1"])
    assert sorted(f.target[1] for f in elements if f.kind == "edge switch (no worker)") == [
        "leaf3", "leaf4"]


@pytest.mark.parametrize(("topology", "spec"), [(LEAF_SPINE, LEAF_SPINE_JOB),
                                                (FAT_TREE, FAT_TREE_JOB)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_schedule_never_cuts_the_workers_off_and_recovers_only_what_failed(
        topology: Topology, spec: JobSpec, seed: int) -> None:
    settings = chaos.ChaosSettings()
    events = chaos.schedule(topology, spec.workers, seed, 600, settings)
    edges = {topology.host_attachment(w)[0] for w in spec.workers}
    down: list[tuple[str, ...]] = []
    for e in events:
        assert 0 < e.at < 600
        if e.action == "fail":
            assert e.target not in down and not (e.target[0] == "switch" and e.target[1] in edges)
            down.append(e.target)
            state = Failures()
            for t in down:
                state = state | chaos.Fault("", t).failures()
            assert chaos.workers_connected(topology, spec.workers, state)
            assert len(down) <= settings.max_down
        elif e.action == "recover":
            assert e.target == down.pop(0)
    actions = Counter(e.action for e in events)
    assert actions["fail"] > 50 and actions["member"] > 50 and actions["outsider"] > 100
    assert {e.kind for e in events if e.action == "member"} == set(MEMBER_KINDS)
    assert {e.kind for e in events if e.action == "outsider"} == set(OUTSIDER_KINDS)
    kinds = {e.kind for e in events if e.action == "fail"}
    assert kinds == ({"spine", "link"} if topology is LEAF_SPINE
                     else {"aggregation switch", "core switch", "link"})


def test_the_same_seed_gives_the_same_soak_and_another_seed_another() -> None:
    def soak(seed: int) -> tuple[list[chaos.ChaosEvent], list[CallPlan]]:
        return (chaos.schedule(LEAF_SPINE, LEAF_SPINE_JOB.workers, seed, 120),
                [chaos_calls.call_plan(seed, i) for i in range(50)])

    assert soak(1) == soak(1)
    assert soak(1)[0] != soak(2)[0] and soak(1)[1] != soak(2)[1]
    arrays = [chaos_calls.call_array(1, chaos_calls.call_plan(1, 3), r) for r in (0, 0, 1)]
    assert np.array_equal(arrays[0], arrays[1]) and not np.array_equal(arrays[0], arrays[2])


# --- the calls ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployed() -> tuple[ModelLab, Job]:
    lab = make_model_lab(LEAF_SPINE)
    job = asyncio.run(lab.ctl.deploy(LEAF_SPINE_JOB)).job
    assert job is not None
    return lab, job


def _call(lab: ModelLab, job: Job, seed: int, plan: CallPlan) -> dict[str, AllreduceResult]:
    workers = model_workers(lab, job)
    outcomes = in_threads({w: partial(workers[w].allreduce,
                                      chaos_calls.call_array(seed, plan, rank))
                           for rank, w in enumerate(job.workers)})
    assert all(isinstance(o, AllreduceResult) for o in outcomes.values()), outcomes
    return {w: o for w, o in outcomes.items() if isinstance(o, AllreduceResult)}


@pytest.mark.parametrize("plan", [CallPlan(0, 1000, False), CallPlan(1, 700, True),
                                  CallPlan(2, 1, True), CallPlan(3, 257, False)])
def test_the_expected_result_is_what_the_workers_get_bit_for_bit(
        deployed: tuple[ModelLab, Job], plan: CallPlan) -> None:
    lab, job = deployed
    expected = chaos_calls.expected_result(5, plan, len(job.workers))
    for result in _call(lab, job, 5, plan).values():
        assert result.values.dtype == expected.dtype
        assert np.array_equal(result.values, expected)


def test_a_guessed_float_call_is_exact_with_the_exponents_it_used(
        deployed: tuple[ModelLab, Job]) -> None:
    """The soak's calls 19 and 22 (seed 1): the second, of the same kind (one chunk),
    sends its values scaled by exponents guessed from the first's (ina.host.guesses),
    above the agreed ones: checked against the agreed ones alone, the soak called
    19 of its 21 values wrong; with the exponents the call used, it is exact."""
    lab, job = deployed
    workers = model_workers(lab, job)
    first, second = CallPlan(19, 190, True), CallPlan(22, 21, True)
    for plan in (first, second):
        outcomes = in_threads({w: partial(workers[w].allreduce,
                                          chaos_calls.call_array(1, plan, rank))
                               for rank, w in enumerate(job.workers)})
    assert all((g := workers[w].guesses) is not None and g.guessed == 1 for w in job.workers)
    agreed = chaos_calls.expected_result(1, second, len(job.workers))
    for result in outcomes.values():
        assert isinstance(result, AllreduceResult) and result.exponents is not None
        assert np.array_equal(result.values,
                              chaos_calls.expected_result(1, second, len(job.workers),
                                                    result.exponents))
        assert not np.array_equal(result.values, agreed)


def test_exponents_below_the_agreed_ones_are_no_result_to_check_against() -> None:
    plan = CallPlan(22, 21, True)
    agreed = quantize.block_exponents(chaos_calls.call_array(1, plan, 0))
    with pytest.raises(ValueError, match="below or unlike the agreed"):
        chaos_calls.expected_result(1, plan, 4, agreed - 30)


def test_call_plans_mix_sizes_and_kinds() -> None:
    plans = [chaos_calls.call_plan(1, i) for i in range(400)]
    sizes = [p.size for p in plans]
    assert min(sizes) >= 1 and max(sizes) <= chaos_calls.MAX_SIZE
    assert sum(p.size > 10 * ELEMS_PER_PACKET for p in plans) > 40
    assert 50 < sum(p.is_float for p in plans) < 150


def test_call_counts_are_the_counts_of_the_calls_packets() -> None:
    p = ELEMS_PER_PACKET
    assert chaos_calls.call_counts(CallPlan(0, 3 * p + 7, False)) == {6, p, 7}
    assert chaos_calls.call_counts(CallPlan(0, 2 * p, False)) == {6, p}
    assert chaos_calls.call_counts(CallPlan(0, 3, True)) == {6, 3, 1}
    assert chaos_calls.call_counts(CallPlan(0, p * p, True)) == {6, p}


# --- the member and the outsider --------------------------------------------------------


def _views(topology: Topology, spec: JobSpec, host: str) -> tuple[HostView, JobView]:
    return HostView.of(topology, host), JobView(
        spec.job_id, spec.slots, {w: topology.hosts[w].bit for w in spec.workers},
        {w: topology.hosts[w].ip for w in spec.workers},
        tuple(sw.loopback for sw in topology.switches.values()))


@pytest.mark.parametrize("seed", range(20))
def test_no_packet_of_the_misbehaving_member_can_pass_for_its_own(seed: int) -> None:
    member, job = _views(LEAF_SPINE, LEAF_SPINE_JOB, "h4_1")
    state = MemberState(seq=5000, gen=3, counts=frozenset({6, 256, 17}))
    _, own = one_set(member.bit)
    for kind in MEMBER_KINDS:
        for raw in chaos_frames.member_frames(kind, seed, member, job, state):
            frame = parse_frame(raw)
            assert frame.error is None and frame.ipv4 is not None and frame.ina is not None
            assert (frame.eth.src, frame.ipv4.src, frame.ipv4.dst) == (
                member.mac, member.ip, member.edge_ip)
            ina = frame.ina
            ahead = (ina.seq - state.seq) % (1 << 32)
            if kind == "abort-far-ahead":
                assert ina.flags == Flag.SYNC | Flag.ABORT and ahead >= FAR_AHEAD[0]
            elif kind == "contributions-far-ahead":
                assert FAR_AHEAD[0] <= ahead <= FAR_AHEAD[1] and ina.pbm == own
            elif kind == "another-count":
                assert ina.count not in state.counts and ahead < 2 * job.window
            elif kind == "another-op":
                assert ina.op not in (Op.SUM, Op.MAX)
            else:
                assert kind == "forged-pbm" and ina.pbm != own
    assert chaos_frames.member_frames("duplicates", seed, member, job, state) == []


def test_the_outsiders_garbage_and_forged_pbms_are_dropped_and_the_job_stays_exact(
        deployed: tuple[ModelLab, Job]) -> None:
    lab, job = deployed
    outsider, view = _views(LEAF_SPINE, LEAF_SPINE_JOB, "h2_2")
    member, _ = _views(LEAF_SPINE, LEAF_SPINE_JOB, "h4_1")
    before = {s: switch_stat(lab, "leaf2", s) for s in (
        SwitchStat.DROP_FORGED_PBM, SwitchStat.DROP_NOT_MEMBER, SwitchStat.DROP_BIER_FROM_HOST)}
    forged_before = switch_stat(lab, "leaf4", SwitchStat.DROP_FORGED_PBM)
    sent = 0
    for seed in range(30):
        for kind in OUTSIDER_KINDS:
            for raw in chaos_frames.outsider_frames(kind, seed, outsider, view):
                lab.net.send("h2_2", raw)
                sent += 1
        for raw in chaos_frames.member_frames("forged-pbm", seed, member, view,
                                       MemberState(0, 0)):
            lab.net.send("h4_1", raw)
    assert sent > 300
    assert all(not lab.net.inbox[h] for h in LEAF_SPINE.hosts), "garbage reached a host"
    after = {s: switch_stat(lab, "leaf2", s) for s in before}
    assert all(after[s] > before[s] for s in before), after
    assert switch_stat(lab, "leaf4", SwitchStat.DROP_FORGED_PBM) > forged_before
    plan = CallPlan(9, 3000, False)
    expected = chaos_calls.expected_result(9, plan, len(job.workers))
    assert all(np.array_equal(r.values, expected) for r in _call(lab, job, 9, plan).values())


# --- the figures ----------------------------------------------------------------------


def _run() -> SoakRun:
    run = SoakRun("leaf-spine", "leaf-spine-2x4", 1, ["h1_1", "h4_1"], "h4_1", "h2_2", 1, 2.0,
                  1000, 10.0, 60.0, 5, seconds=120.0, calls=300, attempts=310, exact=300,
                  retried=4, errors={"AllreduceTimeout: no result for the timeout": 10},
                  failures={"spine": 3, "link": 5}, recoveries=8, repairs={"kept": 9},
                  member_sent={"forged-pbm": 2}, outsider_sent={"random-bytes": 7},
                  frames_sent=30, final_call="exact", events=["  1.00s fail spine spine1"])
    run.step_stats([0.01, 0.02, 0.5])
    return run


def test_the_figures_round_trip_and_say_whether_the_goals_are_met() -> None:
    run = _run()
    doc = json.loads(json.dumps(SoakFigures.measured([run], "BMv2 x", WatchOptions()).figures()))
    read = SoakFigures.from_figures(doc)
    runs, bmv2, watch = read.runs, read.bmv2, read.watch
    assert runs == [run] and bmv2 == "BMv2 x"
    text = read.render()
    assert "calls run 300" in text and "WRONG 0; hung 0" in text
    assert "spine 3, link 5" in text and "left behind: nothing" in text
    assert "MISS" not in text and text.count("[    pass    ]") == 4
    run.left = Leftovers(processes=["pid 7: python"], job_entries=2)
    run.wrong = ["call 3 attempt 1 at h1_1: 1 of 3 values wrong"]
    text = soak_figures.render([run], bmv2, watch)
    assert "[    MISS    ] leaf-spine: no wrong result: 1 wrong" in text
    assert "[    MISS    ] leaf-spine: nothing left behind: " in text and "2 table entries" in text


def test_a_false_verdict_of_the_watcher_misses_the_soaks_goal() -> None:
    run = _run()
    run.false_verdicts = ["link spine1-leaf2 at 40.0s"]
    text = soak_figures.render([run], "BMv2 x", {"interval": 0.5, "detect_after": 3.0})
    assert "[    MISS    ] leaf-spine: no false verdict of the watcher: 1 false" in text
    assert text.count("[    pass    ]") == 3


def test_inabench_soak_reports_the_figures_of_an_earlier_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "soak.json"
    path.write_text(json.dumps(SoakFigures.measured([_run()], "BMv2 x", WatchOptions())
                               .figures()))
    assert inabench.main(["soak", "--from-json", str(path)]) == 0
    assert "leaf-spine (leaf-spine-2x4): job 1" in capsys.readouterr().out
    assert inabench.main(["soak", "--from-json", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(path.read_text())


@pytest.mark.skipif(not (ROOT / "docs" / "soak.json").exists(), reason="no docs/soak.json")
def test_the_committed_soak_figures_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert inabench.main(["soak", "--from-json", str(ROOT / "docs" / "soak.json")]) == 0
    assert "calls run" in capsys.readouterr().out


def test_failed_runs_are_counted_by_what_went_wrong_not_by_their_numbers() -> None:
    def kind(text: str) -> str:
        return _error_kind({"kind": "AllreduceTimeout", "error": text})

    assert kind("job 1: h1_1 got no result within 3s while reducing: 9 of 12") == kind(
        "job 1: h4_1 got no result within 10s while agreeing on the call: 1 of 1")
    assert _error_kind({"kind": "OSError", "error": "boom"}) == "OSError"


# --- the loop's bookkeeping -------------------------------------------------------------


class _FakeAgent:
    """A worker process that answers each call with what the test says."""

    def __init__(self, answers: list[bytes | None]):
        self.answers, self.sent = answers, 0

    def send(self, request: object) -> bool:
        self.sent += 1
        return True

    def next_line(self, timeout: float) -> bytes | None:
        return self.answers.pop(0)

    def tail(self, lines: int = 5) -> str:
        return "the log's last lines"


def _reply(ok: bool = True, exact: bool = True, error: str = "") -> bytes:
    return json.dumps({"call": 0, "ok": ok, "exact": exact, "error": error,
                       "kind": "" if ok else "AllreduceTimeout", "replans": 0, "on_hosts": 0,
                       "seq": 10, "gen": 1}).encode()


def test_the_loop_counts_exact_wrong_failed_hung_and_ended_runs_and_restarts(
        tmp_path: Path) -> None:
    from types import SimpleNamespace

    from ina.bench.soak import Soak, SoakSettings

    lab: Any = SimpleNamespace(topology=LEAF_SPINE)
    soak = Soak(lab, CASES["leaf-spine"], SoakSettings(max_attempts=2), tmp_path)
    restarted: list[str] = []
    soak._restart = restarted.append  # type: ignore[method-assign,assignment]
    workers = LEAF_SPINE_JOB.workers
    timeout = "job 1: h got no result within 3s while reducing"
    answers: dict[str, list[bytes | None]] = {w: [_reply()] * 5 for w in workers}
    answers["h1_1"] = [_reply(), _reply(exact=False, error="1 of 9 values wrong"),
                       _reply(ok=False, error=timeout), None, b""]
    soak.workers = {w: _FakeAgent(a) for w, a in answers.items()}  # type: ignore[misc]
    plan = CallPlan(0, 9, False)
    outcomes = [soak._attempt(plan, attempt) for attempt in (1, 1, 1, 2, 3)]
    run = soak.run
    assert outcomes == [True, True, False, False, False]
    assert run.attempts == 5 and run.exact == 1 and run.retried == 1
    assert run.wrong == ["call 0 attempt 1 at h1_1: 1 of 9 values wrong"]
    assert len(run.hung) == 1 and "h1_1 did not end within 60s" in run.hung[0]
    assert restarted == ["h1_1", "h1_1"]  # hung, then ended
    assert run.errors == {"AllreduceTimeout: no result for the timeout": 1,
                          "the worker process ended": 1}
    assert soak.member_state.seq == 10
    assert [e.split(" (")[0] for e in run.first_errors] == [
        "AllreduceTimeout: no result for the timeout", "the worker process ended"]


def test_verdicts_the_soak_did_not_cause_or_that_outlive_the_failure_are_reported(
        tmp_path: Path) -> None:
    from types import SimpleNamespace

    from ina.bench.soak import Soak, SoakSettings

    lab: Any = SimpleNamespace(topology=LEAF_SPINE)
    soak = Soak(lab, CASES["leaf-spine"], SoakSettings(), tmp_path)
    soak.started = 0.0
    spine1 = Failures().with_switch("spine1")
    soak.down_spans = [(("switch", "spine1"), 5.0, 10.0)]
    soak.watcher = SimpleNamespace(  # type: ignore[assignment]
        changes=[(5.5, spine1.with_link("leaf2", "spine1")), (6.0, spine1),
                 (30.0, spine1), (40.0, spine1.with_link("leaf1", "spine2"))],
        failures=spine1)
    false, stale = soak.verdict_problems()
    assert false == ["link leaf1-spine2 at 40.0s"]
    assert stale == ["switch spine1: back at 10.0s, still reported down at 30.0s"]
