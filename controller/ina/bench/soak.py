"""The chaos soak (``inabench soak``, ``make soak``): a training-like loop of
AllReduce calls on a lab while switches and links fail and come back at random,
the watcher detects and repairs, a member of the job misbehaves and an outsider
sends garbage; then what was left behind.

The loop. One long-lived worker process per worker host (ina.bench.soak_host), as
a training job has, driven over stdin/stdout: the soak tells every worker to run
call ``i`` (its size and kind from the seed), each runs it with its array from
(seed, i, rank) and checks the result against the exact one, which every worker
can compute (ina.bench.chaos_calls). A call that fails at any worker (an error, at any
of them) is run again by every worker: a retry, up to ``max_attempts`` runs; a
run of a call that has not ended, with a result or an error, at every worker
within ``hung_after`` seconds hung: the soak stops the workers that did not
answer (SIGTERM, then SIGKILL), starts them again and retries the call.

The chaos (ina.bench.chaos.schedule, seeded): every few seconds an element fails
(a spine, an aggregation or core switch, an edge switch with no worker of the
job, a link between switches: the BMv2 process stopped, or the link dropping
every frame) or the one down longest comes back (a switch started again, empty;
the soak waits until the watcher has seen the failure first, so that the
controller knows to repair it). A worker's own edge switch and host link never
fail: that would cut it off, and its calls could only stall until it is back.
The watcher runs as ``inactl watch`` does (WatchOptions' defaults), repairing the
switches on each change. Meanwhile a worker host of the job (the member) sends
bad INA packets now and then, and a host of no job (the outsider) garbage
(ina.bench.chaos_frames.member_frames, outsider_frames), both through an injector process
on their host (raw frames on the host's link).

Afterwards everything is brought back, the workers and injectors stopped, the
job torn down, and the soak looks for what is left: processes it started (or
any new process in the lab), entries, groups, job indices and slots of the job
on any switch, new files in the lab's run directory and the temporary directory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ina.bench.chaos import ChaosEvent, ChaosSettings, schedule
from ina.bench.chaos_calls import call_counts, call_plan
from ina.bench.chaos_frames import HostView, JobView, MemberState, member_frames, outsider_frames
from ina.bench.hostprocess import HostProcess
from ina.bench.onlab import ROOT
from ina.bench.soak_figures import SoakRun
from ina.control import p4names as n
from ina.control.allocation import used_resources
from ina.control.controller import Controller
from ina.control.entities import TableEntry
from ina.control.repair import repair_switches
from ina.control.watch import WatchOptions
from ina.errors import UsageError
from ina.lab.deploy import controller_call, deploy, repair_lab
from ina.lab.mininet import Lab, LabOptions
from ina.lab.watching import WatcherThread
from ina.protocol.constants import JOB_GROUP_BASE, JobStat
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Failures, Topology

LOG = logging.getLogger(__name__)
#: Seconds the soak waits for the watcher to see a failure before it brings the
#: element back anyway (and counts the failure as missed).
DETECT_TIMEOUT = 15.0
#: Seconds the soak waits, at the end, for the watcher to see everything back and
#: the repair after it.
SETTLE_TIMEOUT = 60.0
#: How long, in seconds, the misbehaving member duplicates its frames, and how many
#: captured ones it replays, for "duplicates".
DUPLICATE_SECONDS = 1.0
REPLAYS = 8
#: Seconds after which a verdict that disagrees with what the soak did is wrong.
STALE = 10.0
#: Events kept in the figures.
MAX_EVENTS = 400


@dataclass(frozen=True)
class SoakCase:
    name: str
    topology: Path
    job: Path  # a planned job: the controller chooses its VAT
    member: str  # a worker of the job that misbehaves
    outsider: str  # a host of no job


CASES = {
    "leaf-spine": SoakCase("leaf-spine", ROOT / "topologies" / "leaf-spine-2x4.yaml",
                           ROOT / "jobs" / "leaf-spine-sum.yaml", "h4_1", "h2_2"),
    "fat-tree": SoakCase("fat-tree", ROOT / "topologies" / "fat-tree-4.yaml",
                         ROOT / "jobs" / "fat-tree-4-bench.yaml", "h3_1_0", "h0_0_1"),
}


@dataclass(frozen=True)
class SoakSettings:
    minutes: float = 2.0  # the loop starts no call after this
    max_calls: int = 1000
    #: Calls the loop runs whatever the time (at most max_calls).
    min_calls: int = 0
    seed: int = 1
    #: A worker gives up on a call after this many seconds without progress.
    worker_timeout: float = 10.0
    #: A run of a call not ended at every worker after this many seconds hung.
    hung_after: float = 60.0
    max_attempts: int = 5
    #: Seconds between calls (the step's compute), drawn uniformly.
    compute: tuple[float, float] = (0.0, 0.05)
    chaos: ChaosSettings = field(default_factory=ChaosSettings)
    member_kinds: tuple[str, ...] | None = None  # None: every kind
    outsider_kinds: tuple[str, ...] | None = None
    #: The events to play instead of chaos.schedule's (a test's script).
    events: tuple[ChaosEvent, ...] | None = None
    watch: WatchOptions = field(default_factory=WatchOptions)


# --- The soak -------------------------------------------------------------------------


def _error_kind(reply: dict[str, Any]) -> str:
    """A failed run's error, named for counting (the message, less its numbers)."""
    text = str(reply.get("error", ""))
    for pattern, name in ((r"lost the progress", "the root lost the progress of calls"),
                          (r"re-planned \d+ times", "re-planned too often"),
                          (r"cannot run again after the job was re-planned",
                           "others had finished the call when it was re-planned"),
                          (r"no answer from the job's root", "no answer to the call's start"),
                          (r"did not start", "the call did not start at every worker"),
                          (r"got no result within", "no result for the timeout"),
                          (r"ring on hosts", "the ring on hosts failed"),
                          (r"do not make the same call", "the workers disagree on the call")):
        if re.search(pattern, text):
            return f"{reply.get('kind', 'error')}: {name}"
    return str(reply.get("kind") or "error")


class Soak:
    """One soak on a running lab with the base state installed."""

    def __init__(self, lab: Lab, case: SoakCase, settings: SoakSettings, workdir: Path):
        self.lab, self.case, self.settings, self.workdir = lab, case, settings, workdir
        self.topology: Topology = lab.topology
        self.spec = JobSpec.load(case.job)
        workers = list(self.spec.workers)
        for host, what in ((case.member, "member"), (case.outsider, "outsider")):
            if host not in self.topology.hosts:
                raise UsageError(f"the {what} {host} is no host of {self.topology.name}")
        if case.member not in workers or case.outsider in workers:
            raise UsageError(f"{case.member} must be a worker of job {self.spec.job_id}, "
                             f"{case.outsider} not")
        self.run = SoakRun(case.name, self.topology.name, self.spec.job_id, workers,
                           case.member, case.outsider, settings.seed, settings.minutes,
                           settings.max_calls, settings.worker_timeout, settings.hung_after,
                           settings.max_attempts)
        self.workers: dict[str, HostProcess] = {}
        self.injectors: dict[str, HostProcess] = {}
        self.every_agent: list[HostProcess] = []
        self.watcher: WatcherThread | None = None
        self.started = time.monotonic()
        self.lock = threading.Lock()
        # Shared with the chaos thread.
        self.call_index = 0
        self.member_state = MemberState(0, 0)
        self.down: dict[tuple[str, ...], tuple[str, float]] = {}  # target: (kind, since)
        self.seen: set[tuple[str, ...]] = set()  # of those, what the watcher reported
        self.down_spans: list[tuple[tuple[str, ...], float, float | None]] = []
        self.stop_chaos = threading.Event()
        self.repairs: list[tuple[float, Failures, bool]] = []

    # --- bookkeeping ---

    def note(self, text: str, keep: bool = True) -> None:
        """Log what happened; with ``keep``, in the figures' events too."""
        with self.lock:
            if keep and len(self.run.events) < MAX_EVENTS:
                self.run.events.append(f"{time.monotonic() - self.started:7.2f}s {text}")
        LOG.info("soak: %s", text)

    def _count(self, counts: dict[str, int], key: str, n: int = 1) -> None:
        with self.lock:
            counts[key] = counts.get(key, 0) + n

    # --- the processes ---

    def _agent(self, host: str, argv: list[str], log: str) -> HostProcess:
        """A process of the soak's (ina.bench.soak_host) on ``host``; an empty line
        ends it."""
        agent = HostProcess.on(self.lab, host, [sys.executable, "-m", "ina.bench.soak_host",
                                                *argv], self.workdir / log, ask=b"")
        self.every_agent.append(agent)
        return agent

    def _start_worker(self, worker: str) -> HostProcess:
        return self._agent(worker, [
            "worker", "-t", str(self.case.topology), "--job", str(self.case.job), "--worker",
            worker, "--seed", str(self.settings.seed), "--timeout",
            str(self.settings.worker_timeout)], f"{worker}.log")

    def _start_injector(self, host: str) -> HostProcess:
        intf = self.lab.host(host).defaultIntf().name
        return self._agent(host, ["inject", "--ip", self.topology.hosts[host].ip,
                                  "--intf", intf], f"{host}-inject.log")

    # --- the loop ---

    def loop(self) -> None:
        s, run = self.settings, self.run
        rng = random.Random(s.seed)
        end = self.started + 60 * s.minutes
        steps: list[float] = []
        index = 0
        while index < s.max_calls and (index < s.min_calls or time.monotonic() < end):
            plan = call_plan(s.seed, index)
            self.call_index = index
            run.calls += 1
            step_started = time.monotonic()
            for attempt in range(1, s.max_attempts + 1):
                if self._attempt(plan, attempt):
                    steps.append(time.monotonic() - step_started)
                    break
            else:
                run.given_up += 1
                self.note(f"call {index}: failed all {s.max_attempts} attempts: redeploying "
                          "the job")
                self._redeploy()
            time.sleep(rng.uniform(*s.compute))
            index += 1
        run.seconds = round(time.monotonic() - self.started, 2)
        run.step_stats(steps)

    def _attempt(self, plan: Any, attempt: int) -> bool:
        """One run of the call by every worker; whether it ended with a result at
        every one of them (exact or not: a wrong result is counted, not retried)."""
        s, run = self.settings, self.run
        run.attempts += 1
        if attempt == 2:
            run.retried += 1
        request = {"call": plan.index, "size": plan.size, "float": plan.is_float}
        for agent in self.workers.values():
            agent.send(request)
        deadline = time.monotonic() + s.hung_after
        replies: dict[str, dict[str, Any] | None] = {}
        ended: list[str] = []
        for w, agent in self.workers.items():
            line = agent.next_line(deadline - time.monotonic())
            if line == b"":  # the process ended: an error, not a hang
                ended.append(w)
                replies[w] = {"call": plan.index, "ok": False, "exact": False,
                              "kind": "the worker process ended",
                              "error": f"its log: {agent.tail(3)}"}
            else:
                replies[w] = json.loads(line) if line is not None else None
        for w in ended:
            self.note(f"call {plan.index}: the process of {w} ended: restarting it")
            self._restart(w)
        hung = sorted(w for w, r in replies.items() if r is None)
        if hung:
            run.hung.append(f"call {plan.index} attempt {attempt}: {', '.join(hung)} did not "
                            f"end within {s.hung_after:g}s (" + "; ".join(
                                f"{w}'s log: {self.workers[w].tail(2)}" for w in hung) + ")")
            self.note(f"call {plan.index}: HUNG at {', '.join(hung)}: restarting them")
            for w in hung:
                self._restart(w)
            return False
        answered = {w: r for w, r in replies.items() if r is not None}
        for w, r in answered.items():
            run.replans += int(r.get("replans", 0))
            run.on_hosts += int(r.get("on_hosts", 0))
            if r["ok"] and not r["exact"]:
                run.wrong.append(f"call {plan.index} attempt {attempt} at {w}: {r['error']}")
                self.note(f"call {plan.index}: WRONG result at {w}: {r['error']}")
        member = answered.get(self.case.member)
        if member is not None and "seq" in member:
            self.member_state = MemberState(int(member["seq"]), int(member["gen"]))
        failed = {w: r for w, r in answered.items() if not r["ok"]}
        if not failed:
            if all(r["exact"] for r in answered.values()):
                run.exact += 1
            return True
        kinds = sorted({_error_kind(r) for r in failed.values()})
        for k in kinds:
            self._count(run.errors, k)
        for w, r in sorted(failed.items()):  # the first message of each kind, an example
            kind = _error_kind(r)
            if not any(e.startswith(f"{kind} (") for e in run.first_errors):
                run.first_errors.append(f"{kind} (call {plan.index} at {w}): {r['error']}")
        self.note(f"call {plan.index} attempt {attempt} failed at {', '.join(sorted(failed))}: "
                  + "; ".join(kinds))
        return False

    def _redeploy(self) -> None:
        """What an operator does with a job that no longer works: repair the
        switches (``inactl repair``), tear the job down and deploy it again (on what is
        up now), while the watcher runs."""
        from ina.control.p4runtime import connect  # grpc is slow to import

        lab, job_id = self.lab, self.spec.job_id

        async def redeploy() -> str:
            # `inactl repair` first: a deploy needs every switch initialised, and the
            # watcher's last repair may have failed (it is made again, after a while).
            await repair_switches(self.topology, lab.failures, lab.p4info, lab.p4blob,
                                  lab.access)
            topology = self.topology.without(lab.failures)
            async with connect(topology, lab.p4info, access=lab.access) as clients:
                ctl = Controller(topology, clients)
                with contextlib.suppress(Exception):  # not deployed: deploy it anyway
                    await ctl.teardown(job_id)
                job = (await ctl.deploy(self.spec)).job
            return "on hosts" if job is None else f"VAT {', '.join(sorted(job.nodes))}"

        assert self.watcher is not None
        try:
            where = self.watcher.call(redeploy, 120)
        except Exception as exc:  # noqa: BLE001 (the next given-up call tries again)
            self.note(f"redeploying job {job_id} failed: {exc!r}")
            return
        self.run.redeployed += 1
        self.note(f"job {job_id} redeployed: {where}")

    def _restart(self, worker: str) -> None:
        old = self.workers[worker]
        old.kill()
        self.workers[worker] = agent = self._start_worker(worker)
        agent.ready()
        self.run.restarted += 1

    # --- the chaos ---

    def events(self) -> list[ChaosEvent]:
        s = self.settings
        if s.events is not None:
            return list(s.events)
        return schedule(self.topology, self.run.workers, s.seed, 60 * s.minutes, s.chaos,
                        s.member_kinds, s.outsider_kinds)

    def chaos(self, events: list[ChaosEvent]) -> None:
        member = HostView.of(self.topology, self.case.member)
        outsider = HostView.of(self.topology, self.case.outsider)
        job = JobView(self.spec.job_id, self.spec.slots,
                      {w: self.topology.hosts[w].bit for w in self.run.workers},
                      {w: self.topology.hosts[w].ip for w in self.run.workers},
                      tuple(sw.loopback for sw in self.topology.switches.values()))
        for event in events:
            if self.stop_chaos.wait(max(0.0, self.started + event.at - time.monotonic())):
                return
            try:
                self._play(event, member, outsider, job)
            except Exception as exc:  # noqa: BLE001 (said, and the soak goes on)
                self.note(f"{event.describe()} failed: {exc!r}")

    def _play(self, event: ChaosEvent, member: HostView, outsider: HostView,
              job: JobView) -> None:
        run = self.run
        if event.action == "fail":
            target = event.target
            # Down from now: a stopping switch stops answering before its process ends.
            self.down[target] = (event.kind, time.monotonic())
            self.note(event.describe())
            if target[0] == "switch":
                self.lab.fail_switch(target[1])
            else:
                self.lab.set_link(target[1], target[2], up=False)
            self._count(run.failures, event.kind)
        elif event.action == "recover":
            self._recover(event.target)
        elif event.action == "member":
            index = self.call_index
            counts = call_counts(call_plan(self.settings.seed, index)) | call_counts(
                call_plan(self.settings.seed, index + 1))
            state = replace(self.member_state, counts=frozenset(counts))
            if event.kind == "duplicates":
                answer = self.injectors[member.name].request(
                    {"duplicates": DUPLICATE_SECONDS, "replay": REPLAYS},
                    DUPLICATE_SECONDS + 30)
            else:
                frames = member_frames(event.kind, event.seed, member, job, state)
                answer = self.injectors[member.name].request(
                    {"frames": [f.hex() for f in frames]}, 30)
            self._sent(run.member_sent, event, answer)
        else:
            frames = outsider_frames(event.kind, event.seed, outsider, job)
            answer = self.injectors[outsider.name].request(
                {"frames": [f.hex() for f in frames]}, 30)
            self._sent(run.outsider_sent, event, answer)

    def _sent(self, counts: dict[str, int], event: ChaosEvent,
              answer: dict[str, Any] | None) -> None:
        if answer is None:
            self.note(f"{event.describe()}: the injector did not answer")
            return
        self._count(counts, event.kind)
        with self.lock:
            self.run.frames_sent += int(answer["sent"])
        self.note(f"{event.describe()} ({answer['sent']} frames)", keep=False)

    def _seen_down(self, target: tuple[str, ...], failures: Failures | None = None) -> bool:
        """Whether the watcher reports ``target`` down (or, for a link, one of its
        switches: the watcher cannot judge the links of a dead switch); once it has,
        it counts as seen until it is back."""
        if target in self.seen:
            return True
        if failures is None:
            assert self.watcher is not None
            failures = self.watcher.failures
        switches = {target[1]} if target[0] == "switch" else set(target[1:])
        if switches & failures.switches or (target[0] == "link"
                                            and frozenset(target[1:]) in failures.links):
            self.seen.add(target)
            return True
        return False

    def _recover(self, target: tuple[str, ...]) -> None:
        """Bring an element back, once the watcher has seen it down (or after
        DETECT_TIMEOUT: then it counts as missed)."""
        if target not in self.down:
            return
        kind, since = self.down[target]
        deadline = time.monotonic() + DETECT_TIMEOUT
        while not self._seen_down(target) and time.monotonic() < deadline:
            time.sleep(0.02)
        what = f"{target[0]} {'-'.join(target[1:])}"
        if not self._seen_down(target):
            self.run.undetected.append(f"{what} ({kind}) not reported down within "
                                       f"{DETECT_TIMEOUT:g}s")
        if target[0] == "switch":
            self.lab.recover_switch(target[1])
        else:
            self.lab.set_link(target[1], target[2], up=True)
        del self.down[target]
        self.seen.discard(target)
        self.down_spans.append((target, since, time.monotonic()))
        self.run.recoveries += 1
        self.note(f"recovered {kind} {what}")

    # --- the watcher ---

    async def on_change(self, failures: Failures) -> None:
        """What ``inactl watch`` does: repair the switches for what is down now. A
        repair that fails raises: the watcher makes it again (with backoff) until it
        succeeds or the verdict changes."""
        again = bool(self.repairs) and self.repairs[-1][1] == failures \
            and not self.repairs[-1][2]
        self.note(f"repairing again for: down {failures.describe()}" if again
                  else f"verdict: down {failures.describe()}")
        if again:
            self._count(self.run.repairs, "made again")
        for target in list(self.down):
            self._seen_down(target, failures)
        try:
            report = await repair_switches(self.topology, failures, self.lab.p4info,
                                           self.lab.p4blob, self.lab.access)
        except Exception as exc:
            self._count(self.run.repairs, "failed")
            self.repairs.append((time.monotonic(), failures, False))
            self.note(f"repair for {failures.describe()} failed: {exc!r}")
            raise
        for j in report.jobs:
            self._count(self.run.repairs, j.action)
        self.repairs.append((time.monotonic(), failures, True))
        self.note("repaired: " + ("; ".join(j.describe() for j in report.jobs) or "no job"))

    def settled(self) -> bool:
        """Nothing down for the watcher, and its repair for that done and successful
        (none waiting to be made, or made again); true too if nothing ever changed."""
        assert self.watcher is not None
        if self.watcher.failures or self.watcher.watcher.repairing:
            return False
        if not self.repairs:
            return True
        _, failures, ok = self.repairs[-1]
        return not failures and ok

    def verdict_problems(self) -> tuple[list[str], list[str]]:
        """What the watcher got wrong, from its verdicts and what the soak did: the
        elements it reported down that the soak had not failed (nor, for a link, one
        of its switches) in the STALE seconds before; and the elements it still
        reported down STALE seconds or more after the soak had brought them back
        (each once per time it was back)."""
        assert self.watcher is not None
        spans = list(self.down_spans) + [(t, since, None) for t, (_, since) in self.down.items()]

        def failed_at(target: tuple[str, ...], at: float) -> bool:
            return any(t == target and since <= at and (until is None or until >= at - STALE)
                       for t, since, until in spans)

        def back_since(target: tuple[str, ...], at: float) -> float | None:
            """When the soak last brought ``target`` back before ``at``, if it did and
            has not failed it again since."""
            last = max((sp for sp in spans if sp[0] == target and sp[1] <= at),
                       key=lambda sp: sp[1], default=None)
            return None if last is None or last[2] is None or last[2] > at else last[2]

        false, stale = [], []
        seen_stale: set[tuple[tuple[str, ...], float]] = set()
        previous = Failures()
        for at, failures in [*self.watcher.changes, (time.monotonic(), self.watcher.failures)]:
            for sw in sorted(failures.switches - previous.switches):
                if not failed_at(("switch", sw), at):
                    false.append(f"switch {sw} at {at - self.started:.1f}s")
            for link in sorted(failures.links - previous.links, key=sorted):
                a, b = sorted(link)
                if not (failed_at(("link", a, b), at) or failed_at(("switch", a), at)
                        or failed_at(("switch", b), at)):
                    false.append(f"link {a}-{b} at {at - self.started:.1f}s")
            targets: list[tuple[str, ...]] = [("switch", sw) for sw in sorted(failures.switches)]
            targets += [("link", *sorted(lk)) for lk in sorted(failures.links, key=sorted)]
            for target in targets:
                back = back_since(target, at)
                if back is not None and at - back >= STALE and (target, back) not in seen_stale:
                    seen_stale.add((target, back))
                    stale.append(f"{target[0]} {'-'.join(target[1:])}: back at "
                                 f"{back - self.started:.1f}s, still reported down at "
                                 f"{at - self.started:.1f}s")
            previous = failures
        return false, stale

    # --- the whole ---

    def execute(self) -> SoakRun:
        run, s = self.run, self.settings
        baseline = _process_ids()
        before_files = _files(self.lab.record.directory) | _tmp_entries()
        others = {_job_id(e) for es in controller_call(
            self.lab, lambda ctl: ctl.read_job_state(), write=False)[0].values() for e in es}
        if self.spec.job_id in others:
            raise UsageError(f"job {self.spec.job_id} is deployed already")
        job = deploy(self.lab, self.spec)
        self.note(f"job {job.job_id} deployed: VAT {', '.join(sorted(job.nodes))}")
        chaos = threading.Thread(target=self.chaos, args=(self.events(),), name="chaos",
                                 daemon=True)
        looped = False
        try:
            self.watcher = WatcherThread(self.lab, s.watch, self.on_change)
            try:
                self.watcher.settled()
                for w in run.workers:
                    self.workers[w] = self._start_worker(w)
                for host in (self.case.member, self.case.outsider):
                    self.injectors[host] = self._start_injector(host)
                for agent in [*self.workers.values(), *self.injectors.values()]:
                    agent.ready()
                self.started = time.monotonic()
                chaos.start()
                looped = True
                self.loop()
            finally:
                self.stop_chaos.set()
                if chaos.is_alive():
                    chaos.join(timeout=120)
                self._safely("bringing everything back", self._restore)
                if looped:
                    self._safely("the last call", self._final_call)
                for agent in [*self.workers.values(), *self.injectors.values()]:
                    self._safely(f"stopping the process on {agent.name}", agent.stop)
                run.false_verdicts, run.stale_verdicts = self.verdict_problems()
                self.watcher.stop()
        finally:
            if self.watcher is not None and not self.settled():
                self.note("the last repair did not settle: repairing again")
                self._safely("repairing", lambda: repair_lab(self.lab))
            run.drops = _drops(self.lab, job)
            self._teardown(job)
        self._leftovers(baseline, before_files)
        return run

    def _safely(self, what: str, fn: Callable[[], object]) -> None:
        """``fn()``; an exception is said, not raised (the soak must still clean up)."""
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            self.note(f"{what} failed: {exc!r}")

    def _restore(self) -> None:
        """Bring back everything still down, and wait for the watcher's repair."""
        for target in list(self.down):
            try:
                self._recover(target)
            except Exception as exc:  # noqa: BLE001
                self.note(f"bringing {target} back failed: {exc!r}")
        assert self.watcher is not None
        try:
            # The watcher makes a repair that failed again; if it never succeeds, the
            # soak repairs once the watcher has stopped.
            self.watcher.wait_for(self.settled, SETTLE_TIMEOUT, "everything back and repaired")
        except Exception as exc:  # noqa: BLE001 (repaired again after the watcher stops)
            self.note(f"not settled: {exc}")
        finally:
            self.run.end_verdict = self.watcher.failures.describe()

    def _final_call(self) -> None:
        """One more call once everything is back (not counted with the loop's): does
        the job still work?"""
        run = self.run
        plan = call_plan(self.settings.seed, self.settings.max_calls)
        counted = (run.attempts, run.exact, len(run.wrong), len(run.hung), dict(run.errors))
        ok = self._attempt(plan, 1)
        if len(run.wrong) > counted[2]:
            run.final_call = "WRONG: " + run.wrong[-1]
        elif len(run.hung) > counted[3]:
            run.final_call = "HUNG: " + run.hung[-1]
        elif ok:
            run.final_call = "exact"
        else:
            run.final_call = "failed: " + ", ".join(
                k for k in run.errors if run.errors[k] != counted[4].get(k))
        run.attempts, run.exact, run.errors = counted[0], counted[1], counted[4]
        del run.wrong[counted[2]:], run.hung[counted[3]:]
        self.note(f"one more call with everything back: {run.final_call}")

    def _teardown(self, job: Job) -> None:
        try:
            controller_call(self.lab, lambda ctl: ctl.teardown(job.job_id))
        except Exception as exc:  # noqa: BLE001 (what is left is measured next)
            self.note(f"teardown of job {job.job_id} failed: {exc!r}")

    def _leftovers(self, baseline: set[int], before_files: set[str]) -> None:
        left = self.run.left
        running = [a for a in self.every_agent if a.running()]
        left.processes = [f"{a.name}: {a.argv[3]} (pid {a.proc.pid})"
                          for a in running]
        switches = {sw.proc.pid for sw in self.lab.net.switches if sw.proc is not None}
        for pid in sorted(_process_ids() - baseline - switches - {os.getpid()}):
            command = _command(pid)
            if command is not None:
                left.processes.append(f"pid {pid}: {command}")
        try:
            entries, groups = controller_call(self.lab, lambda ctl: ctl.read_job_state(),
                                              write=False)
        except Exception as exc:  # noqa: BLE001
            left.problems.append(f"the switches could not be read: {exc!r}")
        else:
            jid = self.spec.job_id
            for sw, es in entries.items():
                mine = [e for e in es if _job_id(e) == jid]
                left.job_entries += len(mine)
                indices, slots = used_resources(mine)
                left.job_indices += len(indices)
                left.slots += sum(len(r) for r in slots)
                held = {JOB_GROUP_BASE + e.param("job_index") for e in es
                        if _job_id(e) != jid and e.table == n.VAT_JOBS.name}
                left.job_groups += sum(1 for g in groups.get(sw, []) if g.group_id not in held)
        after = _files(self.lab.record.directory) | _tmp_entries()
        left.files = sorted(after - before_files)


def _job_id(e: TableEntry) -> int:
    value = e.match_value("job_id")
    assert isinstance(value, int)
    return value


def _process_ids() -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit()}


def _command(pid: int) -> str | None:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None  # gone meanwhile
    return " ".join(a.decode(errors="replace") for a in argv if a)[:200] or None


def _files(directory: Path) -> set[str]:
    if not directory.exists():
        return set()
    return {str(p) for p in directory.rglob("*")}


def _tmp_entries() -> set[str]:
    tmp = Path(tempfile.gettempdir())
    return {str(p) for p in tmp.iterdir()}


def _drops(lab: Lab, job: Job) -> dict[str, int]:
    """Packets the switches dropped, by reason: switch-wide, and the job's own."""
    async def status(ctl: Controller) -> dict[str, int]:
        result: dict[str, int] = {}
        for st in (await ctl.status()).values():
            for stat, value in st.switch_stats.items():
                if stat.name.startswith("DROP_") and value.packets:
                    key = stat.name.removeprefix("DROP_").lower()
                    result[key] = result.get(key, 0) + value.packets
            for job_stat, value in st.job_stats.get(job.job_id, {}).items():
                if job_stat.name.startswith("DROP_") and value.packets:
                    key = "job " + job_stat.name.removeprefix("DROP_").lower()
                    result[key] = result.get(key, 0) + value.packets
                elif job_stat == JobStat.ABORTED and value.packets:
                    result["job aborts"] = result.get("job aborts", 0) + value.packets
        return dict(sorted(result.items()))

    try:
        return controller_call(lab, status, write=False)
    except Exception as exc:  # noqa: BLE001 (a figure, not the soak's end)
        LOG.warning("reading the drop counters failed: %r", exc)
        return {}


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ina-soak-"))
    try:
        yield path
    finally:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


def soak_on_lab(lab: Lab, case: SoakCase, settings: SoakSettings) -> SoakRun:
    """The soak on a running lab (base state installed), which it leaves as it found
    it; the figures, with what it left behind."""
    before = _tmp_entries()
    with _workdir() as workdir:
        run = Soak(lab, case, settings, workdir).execute()
        # The workdir itself is removed below; anything else new in /tmp is left.
        run.left.files = [f for f in run.left.files if not f.startswith(str(workdir))]
    run.left.files = sorted(set(run.left.files) | (_tmp_entries() - before))
    return run


def run_case(case: SoakCase, build_dir: Path, settings: SoakSettings) -> SoakRun:
    """Inside the sandbox: the case's lab, the soak on it, the lab stopped; new
    entries of the temporary directory after the lab stopped count as left."""
    before = _tmp_entries()
    topology = Topology.load(case.topology)
    with Lab(topology, LabOptions(build_dir=build_dir)) as lab:
        lab.init_switches_sync()
        run = soak_on_lab(lab, case, settings)
    run.left.files = sorted(set(run.left.files) | (_tmp_entries() - before))
    return run
