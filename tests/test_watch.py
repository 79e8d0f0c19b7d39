"""The watcher's logic that needs no switch: verdict changes as events, handing them
to on_change, its clock, its options, its arbitration (the BMv2 tier runs the rest:
tests/bmv2/test_watch.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from finsy.proto import U128, p4r

from ina.cli import common, inactl_watch
from ina.control.watch import ActiveClock, Notifier, WatchOptions, _OwnElectionId, events_between
from ina.errors import UsageError
from ina.spec.topology import Failures

NONE = Failures()


def test_a_verdict_change_is_one_event_per_switch_and_link() -> None:
    old = Failures(switches=frozenset({"spine1"}), links=frozenset({frozenset({"b", "a"})}))
    new = Failures(switches=frozenset({"leaf2"}), links=frozenset({frozenset({"c", "d"})}))
    events = events_between(old, new, at=100.0, monotonic=5.0)
    assert [e.describe() for e in events] == ["switch leaf2 down", "switch spine1 up",
                                              "link c-d down", "link a-b up"]
    assert [json.loads(e.to_json()) for e in events[::2]] == [
        {"time": 100.0, "monotonic": 5.0, "event": "switch_down", "switch": "leaf2"},
        {"time": 100.0, "monotonic": 5.0, "event": "link_down", "link": ["c", "d"]},
    ]
    assert events_between(new, new, 0, 0) == []


def test_on_change_sees_the_newest_verdict_and_never_two_at_once() -> None:
    seen: list[Failures] = []
    running = 0

    async def on_change(failures: Failures) -> None:
        nonlocal running
        running += 1
        assert running == 1
        await asyncio.sleep(0.05)
        seen.append(failures)
        running -= 1

    async def main() -> None:
        notifier = Notifier(on_change)
        task = asyncio.create_task(notifier.run())
        first = NONE.with_switch("s1")
        notifier.post(first)
        await asyncio.sleep(0.01)  # first is being handed on
        for name in ("s2", "s3", "s4"):  # meanwhile: only the last one matters
            notifier.post(NONE.with_switch(name))
        await notifier.drained()
        notifier.post(NONE)
        await notifier.drained()
        task.cancel()

    asyncio.run(main())
    assert seen == [NONE.with_switch("s1"), NONE.with_switch("s4"), NONE]


def test_a_failed_repair_is_made_again_with_backoff_while_the_verdict_holds() -> None:
    """The old watcher repaired once per verdict change: a repair that failed (a switch
    stopped under it) was left failed until the next change, which may never come."""
    calls: list[Failures] = []
    delays: list[int] = []
    reported: list[int] = []

    async def on_change(failures: Failures) -> None:
        calls.append(failures)
        if len(calls) < 4:
            raise RuntimeError("a switch stopped under the repair")

    def delay(failed: int) -> float:
        delays.append(failed)
        return 0.01 * failed

    async def main() -> Notifier:
        notifier = Notifier(on_change, delay,
                            lambda _f, attempt, _d, _e: reported.append(attempt))
        task = asyncio.create_task(notifier.run())
        notifier.post(NONE.with_switch("s1"))
        async with asyncio.timeout(5):
            await notifier.drained()
        task.cancel()
        return notifier

    notifier = asyncio.run(main())
    assert calls == [NONE.with_switch("s1")] * 4
    assert delays == reported == [1, 2, 3]  # each failed attempt, and the backoff after it
    assert notifier.attempts.to_dict() == {"made": 4, "failed": 3, "retried": 3}


def test_a_newer_verdict_is_handed_on_at_once_instead_of_the_retry() -> None:
    calls: list[Failures] = []

    async def on_change(failures: Failures) -> None:
        calls.append(failures)
        if failures.switches:
            raise RuntimeError("fails while s1 is down")

    async def main() -> None:
        notifier = Notifier(on_change, lambda _: 60.0)  # a retry far away
        task = asyncio.create_task(notifier.run())
        notifier.post(NONE.with_switch("s1"))
        while not calls:
            await asyncio.sleep(0.001)
        notifier.post(NONE)
        async with asyncio.timeout(5):
            await notifier.drained()
        task.cancel()

    asyncio.run(main())
    assert calls == [NONE.with_switch("s1"), NONE]


def test_the_backoff_doubles_up_to_its_bound() -> None:
    opts = WatchOptions(retry_after=0.5, retry_max=3.0)
    assert [opts.retry_delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_the_clock_does_not_count_a_stall_of_its_own() -> None:
    now = [10.0]
    clock = ActiveClock(lambda: now[0], max_step=0.2)
    assert clock() == 10.0
    now[0] = 10.1
    assert clock() == pytest.approx(10.1)
    now[0] = 13.1  # stalled for 3 s
    assert clock() == pytest.approx(10.3)
    now[0] = 13.2
    assert clock() == pytest.approx(10.4)


@pytest.mark.parametrize("kw", [{"interval": 0}, {"interval": 0.5, "detect_after": 0.4},
                                {"election_id": 0}, {"retry_after": 0},
                                {"retry_after": 5.0, "retry_max": 1.0},
                                {"connect_timeout": 0}])
def test_options_that_cannot_work_are_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        WatchOptions(**kw)


def test_the_cli_options_and_their_defaults() -> None:
    p = common.Parser()
    inactl_watch.add_parser(common.commands(p))
    args = p.parse_args(["watch"])
    assert inactl_watch.options(args) == WatchOptions()
    assert WatchOptions().interval == 0.1 and WatchOptions().detect_after < 1.0
    args = p.parse_args(["watch", "--interval", "0.05", "--detect-after", "0.2", "--events",
                         "ev.jsonl", "--election-id", "3"])
    opts = inactl_watch.options(args)
    assert (opts.interval, opts.detect_after, opts.election_id, str(opts.events)) == \
        (0.05, 0.2, 3, "ev.jsonl")
    with pytest.raises(UsageError):
        inactl_watch.options(p.parse_args(["watch", "--detect-after", "0.05"]))


class _FakeSwitch:
    def __init__(self) -> None:
        self.promoted = 0

    def _become_primary(self) -> None:
        self.promoted += 1


def test_the_watcher_keeps_its_own_election_id_when_it_is_primary_again() -> None:
    """simple_switch_grpc, when the one-shot primary (id 10) leaves, tells the
    watcher (id 1) "you are primary" with id 1: it is, with id 1 still."""
    arb = _OwnElectionId(1)
    arb.election_id, arb.primary_id, arb.is_primary = 1, 10, False
    switch = _FakeSwitch()
    msg = p4r.MasterArbitrationUpdate(device_id=1, election_id=U128.encode(1))
    asyncio.run(arb.update(switch, msg))  # type: ignore[arg-type]
    assert (arb.is_primary, arb.election_id, arb.primary_id, switch.promoted) == (True, 1, 1, 1)
