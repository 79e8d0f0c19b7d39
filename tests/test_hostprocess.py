"""ina.bench.hostprocess.HostProcess on local children (``python -c`` scripts): every
wait bounded, errors naming the child and its log's tail, and a stop that ends a
child whatever it does."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ina.bench.hostprocess import HostProcess
from ina.errors import LabError

#: Says ready, then answers each JSON line with its "x" doubled; ends on an empty line.
ECHO = """
import json, sys
print("warming up", file=sys.stderr, flush=True)
print("ready", flush=True)
for line in sys.stdin:
    if not line.strip():
        break
    print(json.dumps({"y": 2 * json.loads(line)["x"]}), flush=True)
print("asked to end", file=sys.stderr, flush=True)
"""
#: Never says ready: writes to its log and sleeps.
SILENT = """
import sys, time
print("stuck in set-up", file=sys.stderr, flush=True)
time.sleep(60)
"""
#: Ignores SIGTERM and its stdin's end.
STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""


def child(script: str, log: Path | None = None, ask: bytes | None = b"") -> HostProcess:
    return HostProcess("here", [sys.executable, "-c", script], log, ask=ask)


@pytest.fixture
def echo(tmp_path: Path) -> Iterator[HostProcess]:
    proc = child(ECHO, tmp_path / "echo.log")
    yield proc
    proc.stop(grace=5)


def test_a_child_that_says_ready_is_ready_within_the_bound(echo: HostProcess) -> None:
    started = time.monotonic()
    echo.ready(timeout=30)
    assert time.monotonic() - started < 30


def test_a_child_that_never_says_ready_is_a_lab_error_with_its_log_tail(tmp_path: Path
                                                                         ) -> None:
    proc = child(SILENT, tmp_path / "silent.log")
    try:
        started = time.monotonic()
        with pytest.raises(LabError, match=r"here: .*did not get ready.*stuck in set-up"):
            proc.ready(timeout=1.5)
        assert time.monotonic() - started < 10
    finally:
        proc.stop(grace=0)
    assert not proc.running()


def test_a_child_answers_requests_and_ends_when_asked(echo: HostProcess) -> None:
    echo.ready(timeout=30)
    assert echo.request({"x": 3}, timeout=30) == {"y": 6}
    assert echo.request({"x": 5}, timeout=30) == {"y": 10}
    started = time.monotonic()
    echo.stop(grace=10)
    assert time.monotonic() - started < 5  # asked: no SIGTERM needed
    assert echo.proc.returncode == 0
    assert "asked to end" in echo.tail()


def test_a_request_to_a_dead_child_is_none(tmp_path: Path) -> None:
    proc = child("print('ready', flush=True)", tmp_path / "dead.log")
    try:
        proc.ready(timeout=30)
        proc.proc.wait(timeout=30)
        assert proc.request({"x": 1}, timeout=5) is None
        assert proc.next_line(1) == b""  # it ended, at once
        assert proc.next_line(1) == b""
    finally:
        proc.stop(grace=0)


def test_stop_escalates_to_sigkill_for_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    proc = child(STUBBORN, tmp_path / "stubborn.log", ask=None)
    proc.ready(timeout=30)
    started = time.monotonic()
    proc.stop(grace=0.5, term_grace=0.5)
    assert time.monotonic() - started < 10
    assert proc.proc.returncode == -9


def test_the_tail_of_the_log_is_its_last_lines(tmp_path: Path) -> None:
    script = "import sys\nfor i in range(20): print('line', i, file=sys.stderr)\n"
    proc = child(script, tmp_path / "tail.log")
    assert proc.finish(timeout=30) == []
    assert proc.tail(3) == "line 17 | line 18 | line 19"
    proc.stop(grace=0)
    assert proc.tail(1) == "line 19"  # from the file, once stopped


def test_a_temporary_log_is_read_too_and_a_failed_exit_names_it() -> None:
    script = "import sys\nprint('out')\nprint('bad input', file=sys.stderr)\nsys.exit(3)\n"
    proc = child(script)
    try:
        with pytest.raises(LabError, match=r"failed \(3\): bad input"):
            proc.finish(timeout=30)
    finally:
        proc.stop(grace=0)


def test_go_releases_a_child_that_waits_for_it() -> None:
    script = ("import sys\nprint('ready', flush=True)\nsys.stdin.readline()\n"
              "print('{\"went\": true}', flush=True)\n")
    proc = child(script)
    try:
        proc.ready(timeout=30)
        assert proc.next_line(0.3) is None  # waiting
        assert proc.go()
        assert proc.finish(timeout=30) == [b'{"went": true}\n']
    finally:
        proc.stop(grace=0)
