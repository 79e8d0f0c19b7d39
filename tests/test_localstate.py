"""What commands keep next to a running lab: the failures file (declared and
detected failures apart, updates under a lock, never written through a symlink), the
lock writers take, and the lab's record files."""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from ina.cli import inactl
from ina.control.access import Access
from ina.control.localstate import (
    FileLock,
    RecordedFailures,
    atomic_write,
    load_failures,
    update_failures,
)
from ina.control.repair import RepairReport
from ina.errors import ControllerError, LockTimeout, TopologyError
from ina.lab.labstate import LabRecord
from ina.spec.topology import Failures, Topology

from inatest import ROOT

LEAF_SPINE = ROOT / "topologies" / "leaf-spine-2x4.yaml"
SPINE1_DOWN = Failures().with_switch("spine1")
LINK_DOWN = Failures().with_link("leaf1", "spine2")


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INA_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


def _declare(path: Path, failures: Failures) -> RecordedFailures:
    return update_failures(path, lambda r: RecordedFailures(r.declared | failures, r.detected))


def test_the_failures_file_keeps_declared_and_detected_failures(tmp_path: Path) -> None:
    path = tmp_path / "x.failures.yaml"
    update_failures(path, lambda r: RecordedFailures(SPINE1_DOWN, LINK_DOWN))
    assert load_failures(path) == RecordedFailures(SPINE1_DOWN, LINK_DOWN)
    assert load_failures(path).all == SPINE1_DOWN | LINK_DOWN


def test_no_failures_left_means_no_file(tmp_path: Path) -> None:
    path = tmp_path / "x.failures.yaml"
    _declare(path, SPINE1_DOWN)
    update_failures(path, lambda r: RecordedFailures())
    assert not path.exists() and load_failures(path) == RecordedFailures()


def test_a_malformed_failures_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "x.failures.yaml"
    path.write_text("declared: {links: [[a, b, c]]}\n")
    with pytest.raises(TopologyError, match="x.failures.yaml"):
        load_failures(path)


def _watch_args(tmp_path: Path) -> argparse.Namespace:
    return argparse.Namespace(p4info=tmp_path / "p4info", p4blob=None, timeout=1.0)


def _on_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               repaired: list[Failures]) -> Callable[[Failures], Coroutine[Any, Any, None]]:
    """``inactl watch``'s reaction to a verdict, with the repair only recorded."""
    async def repair_switches(full: Topology, failures: Failures, *_: object) -> RepairReport:
        repaired.append(failures)
        return RepairReport(failures)

    monkeypatch.setattr(inactl, "repair_switches", repair_switches)
    full = Topology.load(LEAF_SPINE)
    on_change = inactl._repair_on_change(_watch_args(tmp_path), full,
                                         LabRecord(full.name).failures_file, Access.insecure())

    async def call(detected: Failures) -> None:
        await on_change(detected)

    return call


def test_the_watchers_verdict_keeps_what_inactl_down_declared(
        run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Recorded before anything else: the P4Info is missing, the declaration stays.
    inactl.main(["-t", str(LEAF_SPINE), "--p4info", str(tmp_path / "none"),
                 "down", "switch", "spine1"])
    repaired: list[Failures] = []
    on_change = _on_change(tmp_path, monkeypatch, repaired)
    asyncio.run(on_change(LINK_DOWN))
    asyncio.run(on_change(Failures()))  # the watcher sees nothing down any more
    recorded = load_failures(LabRecord("leaf-spine-2x4").failures_file)
    assert recorded == RecordedFailures(SPINE1_DOWN, Failures())
    assert repaired == [SPINE1_DOWN | LINK_DOWN, SPINE1_DOWN]


def test_inactl_up_takes_back_a_declaration_but_not_the_watchers_verdict(
        run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = ["-t", str(LEAF_SPINE), "--p4info", str(tmp_path / "none")]
    inactl.main([*base, "down", "link", "leaf1", "spine2"])
    asyncio.run(_on_change(tmp_path, monkeypatch, [])(LINK_DOWN))
    inactl.main([*base, "up", "link", "leaf1", "spine2"])
    recorded = load_failures(LabRecord("leaf-spine-2x4").failures_file)
    assert recorded == RecordedFailures(Failures(), LINK_DOWN)


def test_two_updates_at_once_both_stay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.failures.yaml"
    second_waits = threading.Event()
    try_acquire = FileLock.try_acquire

    def noting_a_wait(lock: FileLock) -> bool:
        got = try_acquire(lock)
        if not got:
            second_waits.set()
        return got

    monkeypatch.setattr(FileLock, "try_acquire", noting_a_wait)
    second = threading.Thread(target=_declare, args=(path, LINK_DOWN))

    def first(recorded: RecordedFailures) -> RecordedFailures:
        # While the first command has read the file and not yet written it, the
        # second one tries to update it.
        second.start()
        assert second_waits.wait(10), "the second update did not wait for the first"
        return RecordedFailures(recorded.declared | SPINE1_DOWN, recorded.detected)

    update_failures(path, first)
    second.join(10)
    assert load_failures(path).declared == SPINE1_DOWN | LINK_DOWN


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text("{}\n")
    return victim


def test_an_update_writes_through_no_symlink_at_a_temporary_name(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    path = tmp_path / "x.failures.yaml"
    for planted in (path.with_suffix(".tmp"), path.with_name(path.name + ".tmp")):
        planted.symlink_to(victim)
    _declare(path, SPINE1_DOWN)
    assert victim.read_text() == "{}\n"
    assert load_failures(path).declared == SPINE1_DOWN


def test_an_update_replaces_a_symlinked_failures_file_rather_than_its_target(
        tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    path = tmp_path / "x.failures.yaml"
    path.symlink_to(victim)
    _declare(path, SPINE1_DOWN)
    assert victim.read_text() == "{}\n" and not path.is_symlink()


def test_a_lock_file_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (tmp_path / "x.lock").symlink_to(victim)
    with pytest.raises(ControllerError, match="symlink"):
        FileLock(tmp_path / "x.lock", "test").try_acquire()
    assert victim.read_text() == "{}\n"


def test_a_lock_held_by_another_command_times_out_naming_it(tmp_path: Path) -> None:
    holder = FileLock(tmp_path / "x.lock", "inactl deploy")
    assert holder.try_acquire()
    with pytest.raises(LockTimeout, match="inactl deploy"):
        FileLock(tmp_path / "x.lock", "inactl teardown").acquire(0.05)
    holder.release()
    FileLock(tmp_path / "x.lock", "inactl teardown").acquire(0.05)


def test_the_labs_record_writes_through_no_symlink_at_a_temporary_name(
        tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    record = LabRecord("figure1", tmp_path)
    record.state_file.with_name(record.state_file.name + ".tmp").symlink_to(victim)
    record.publish({"w1": 10})
    assert victim.read_text() == "{}\n" and record.hosts() == {"w1": 10}


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    atomic_write(tmp_path / "f", "text")
    assert [p.name for p in tmp_path.iterdir()] == ["f"]
