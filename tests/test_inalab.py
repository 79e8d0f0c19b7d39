"""inalab's record of running labs (.run/<topology>.pid and .json): a second run of a
running topology is refused, and what a killed run left behind blocks nothing. The
"sandboxes" here are fake processes; tests/bmv2/test_lab_lifecycle.py runs real ones.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ina.cli import inalab
from ina.errors import UsageError
from ina.lab.labstate import SANDBOX_MARK, LabRecord, SandboxProcess

from inatest import FIGURE1


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INA_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


@pytest.fixture
def fake_sandbox() -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line has the sandbox's mark, as unshare's has."""
    proc = subprocess.Popen(["sh", "-c", "sleep 1000; :", SANDBOX_MARK])
    yield proc
    proc.kill()
    proc.wait()


def _recorded(proc: subprocess.Popen[bytes], run_dir: Path) -> LabRecord:
    record = LabRecord("figure1", run_dir)
    record.claim(SandboxProcess.of(proc.pid, owner=proc.pid))
    record.publish({"w1": 2})
    return record


def _killed_after_recording(proc: subprocess.Popen[bytes], run_dir: Path) -> LabRecord:
    """The record of a sandbox killed with SIGKILL: nobody removed its files."""
    record = _recorded(proc, run_dir)
    proc.kill()
    proc.wait()
    return record


def _inalab_run(run_dir: Path) -> int:
    """``inalab run`` with no compiled program: it checks the rest, and starts nothing."""
    return inalab.main(["-t", str(FIGURE1), "--build", str(run_dir / "none"), "run",
                        "--no-cli"])


def test_a_recorded_sandbox_that_runs_is_running(
        fake_sandbox: subprocess.Popen[bytes], run_dir: Path) -> None:
    record = _recorded(fake_sandbox, run_dir)
    assert record.running() == record.sandbox()
    assert record.hosts() == {"w1": 2}


def test_the_record_of_a_sandbox_that_was_killed_is_stale_and_removed(
        fake_sandbox: subprocess.Popen[bytes], run_dir: Path) -> None:
    record = _killed_after_recording(fake_sandbox, run_dir)
    assert record.running() is None
    assert not record.pid_file.exists() and not record.state_file.exists()


def test_a_reused_pid_is_not_taken_for_the_recorded_sandbox(
        fake_sandbox: subprocess.Popen[bytes], run_dir: Path) -> None:
    record = LabRecord("figure1", run_dir)
    real = SandboxProcess.of(fake_sandbox.pid, owner=1)
    record.claim(SandboxProcess(real.pid, real.start - 1, real.pid_ns, real.owner))
    assert record.running() is None


def test_a_live_process_that_is_no_sandbox_is_not_taken_for_one(run_dir: Path) -> None:
    other = subprocess.Popen(["sleep", "1000"])
    try:
        record = _recorded(other, run_dir)
        assert record.running() is None
    finally:
        other.kill()
        other.wait()


def test_releasing_a_record_leaves_a_newer_runs_record(
        fake_sandbox: subprocess.Popen[bytes], run_dir: Path) -> None:
    record = _recorded(fake_sandbox, run_dir)
    current = record.sandbox()
    assert current is not None
    record.release(SandboxProcess(current.pid + 1, current.start, current.pid_ns, 1))
    assert record.sandbox() == current


def test_a_second_inalab_run_of_a_running_topology_is_refused(
        fake_sandbox: subprocess.Popen[bytes], run_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    record = _recorded(fake_sandbox, run_dir)
    code = _inalab_run(run_dir)
    assert code == UsageError.exit_code
    assert "a lab of figure1 is already running" in capsys.readouterr().err
    assert record.running() is not None  # the first run's record is untouched


def test_a_stale_record_does_not_block_inalab_run(
        fake_sandbox: subprocess.Popen[bytes], run_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    record = _killed_after_recording(fake_sandbox, run_dir)
    # It goes on to check the build (missing here) and stops there, starting nothing.
    code = _inalab_run(run_dir)
    assert code == UsageError.exit_code
    err = capsys.readouterr().err
    assert "already running" not in err and "cannot run here" in err
    assert not record.pid_file.exists()


def test_inalab_exec_without_a_running_lab_exits_2(
        run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert inalab.main(["-t", str(FIGURE1), "exec", "--", "true"]) == UsageError.exit_code
    assert "no lab of figure1 is running" in capsys.readouterr().err


def test_inalab_host_after_a_killed_run_removes_its_stale_state(
        fake_sandbox: subprocess.Popen[bytes], run_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    record = _killed_after_recording(fake_sandbox, run_dir)
    assert inalab.main(["-t", str(FIGURE1), "host", "w1", "--", "true"]) == 2
    assert "no lab of figure1 is running" in capsys.readouterr().err
    assert not record.pid_file.exists() and not record.state_file.exists()
