"""The sandbox ends with the program that made it: every process in it is gone after
SIGTERM, SIGHUP or SIGINT to that program, after its SIGKILL, after its parent's
death, and after a grace period when the command ignores SIGTERM; a Ctrl-C typed in
its terminal reaches the command once. Needs root and unshare (no BMv2); under
`make test` these sandboxes are nested in the test run's own.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ina.lab import sandbox
from ina.lab.mininet import wait_until

from inatest import ROOT, children, pid_namespace, processes_in

pytestmark = pytest.mark.skipif(sandbox.why_not_available() is not None,
                                reason=f"no sandbox here: {sandbox.why_not_available()}")

#: Makes a sandbox the way the CLIs do (python -m ina.lab.sandbox would not nest one
#: inside the sandbox `make test` runs in).
LAUNCHER = ("import sys; from ina.lab import sandbox; sandbox.die_with_parent(); "
            "sys.exit(sandbox.run(sys.argv[2:], grace=float(sys.argv[1])))")
#: A command with a few processes that stay until killed.
SLEEPERS = ["sh", "-c", "sleep 1000 & sleep 1000 & wait"]


@dataclass
class Sandbox:
    outer: subprocess.Popen[bytes]  # the program that made it
    namespace: str  # its PID namespace

    def processes(self) -> list[int]:
        return processes_in(self.namespace)

    def wait_gone(self) -> None:
        wait_until(lambda: not self.processes(), 20.0, "every process in the sandbox to end")


def _launch(cmd: list[str], grace: float = 30.0, **popen: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", LAUNCHER, str(grace), *cmd], cwd=ROOT,
                            **popen)


def _find(outer: int, processes: int) -> str:
    """The PID namespace of the sandbox ``outer`` made, once it holds ``processes``
    processes (PID 1 included)."""
    found: list[str] = []

    def up() -> bool:
        for unshare in children(outer):
            for init in children(unshare):
                ns = pid_namespace(init)
                if ns is not None and len(processes_in(ns)) >= processes:
                    found.append(ns)
                    return True
        return False

    wait_until(up, 20.0, "the sandbox's processes to start")
    return found[0]


@pytest.fixture
def sleepers() -> Iterator[Sandbox]:
    outer = _launch(SLEEPERS, stdin=subprocess.DEVNULL)
    try:
        yield Sandbox(outer, _find(outer.pid, 4))  # PID 1, sh, two sleeps
    finally:
        if outer.poll() is None:
            outer.kill()
        outer.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_signal_to_its_maker_ends_every_process_in_the_sandbox(
        sleepers: Sandbox, sig: signal.Signals) -> None:
    sleepers.outer.send_signal(sig)
    assert sleepers.outer.wait(timeout=20) != 0
    assert sleepers.processes() == []


def test_a_stop_signal_right_after_the_start_ends_the_sandbox() -> None:
    # Perhaps before the sandbox's PID 1 runs: the signal must not be lost.
    outer = _launch(SLEEPERS, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: bool(children(outer.pid)), 20.0, "unshare to start")
        outer.terminate()
        # run() returns only once unshare has, and unshare once every process of the
        # sandbox has ended.
        assert outer.wait(timeout=30) != 0
    finally:
        if outer.poll() is None:
            outer.kill()
            outer.wait()


def test_sigkill_of_its_maker_ends_the_sandbox_by_itself(sleepers: Sandbox) -> None:
    sleepers.outer.kill()
    sleepers.outer.wait()
    sleepers.wait_gone()


def test_the_death_of_its_makers_parent_ends_the_sandbox() -> None:
    # sh runs the maker as its child (not exec: a command follows), then sh is killed.
    parent = subprocess.Popen(["sh", "-c", '"$@"; echo never', "sh", sys.executable, "-c",
                               LAUNCHER, "30", *SLEEPERS], cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: bool(children(parent.pid)), 20.0, "sh to start the maker")
        namespace = _find(children(parent.pid)[0], 4)
        parent.kill()
        wait_until(lambda: not processes_in(namespace), 20.0,
                   "every process in the sandbox to end")
    finally:
        parent.kill()
        parent.wait()


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace_period() -> None:
    outer = _launch(["sh", "-c", "trap '' TERM HUP; sleep 1000 & wait; sleep 1000"], grace=0.5,
                    stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        box = Sandbox(outer, _find(outer.pid, 3))
        started = time.monotonic()
        outer.terminate()
        _, err = outer.communicate(timeout=20)
        assert time.monotonic() - started < 10
        assert b"did not stop within 0.5s" in err
        assert box.processes() == []
    finally:
        if outer.poll() is None:
            outer.kill()
            outer.wait()


def test_the_sandbox_exits_with_its_commands_exit_code() -> None:
    outer = _launch(["sh", "-c", "exit 7"], stdin=subprocess.DEVNULL)
    assert outer.wait(timeout=20) == 7


def test_a_path_under_tmp_given_to_keep_is_visible_inside(tmp_path: Path) -> None:
    (tmp_path / "here").write_text("yes")
    script = ("import sys; from ina.lab import sandbox; "
              "sys.exit(sandbox.run(['cat', sys.argv[1]], keep=[sys.argv[1]]))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "here")], cwd=ROOT,
                          capture_output=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, b"yes")


COUNTER = """
import signal, sys
def report(signum, frame):
    print("got:" + signal.Signals(signum).name, flush=True)
    if signum == signal.SIGTERM:
        sys.exit(0)
signal.signal(signal.SIGINT, report)
signal.signal(signal.SIGTERM, report)
print("got:ready", flush=True)
while True:
    signal.pause()
"""


def _read_until(fd: int, token: bytes, seen: bytearray, count: int = 1) -> None:
    """Read the terminal into ``seen`` until ``token`` is there ``count`` times."""
    deadline = time.monotonic() + 20.0
    while seen.count(token) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"no {token!r} in {bytes(seen)!r}"
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 1024)
            except OSError:  # the terminal's other side is closed: nothing more comes
                chunk = b""
            assert chunk, f"no {token!r} in {bytes(seen)!r}"
            seen += chunk


def test_ctrl_c_typed_in_its_terminal_reaches_the_command_once() -> None:
    # The terminal sends SIGINT to its whole foreground process group: the maker,
    # the sandbox's PID 1 and the command. Neither of the first two passes it on.
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] |= termios.NOFLSH  # Ctrl-C must not flush the output still to be read
    termios.tcsetattr(slave, termios.TCSANOW, attrs)

    def controlling_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    outer = _launch([sys.executable, "-c", COUNTER], stdin=slave, stdout=slave, stderr=slave,
                    preexec_fn=controlling_terminal)
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, b"got:ready", seen)
        os.write(master, b"\x03")
        _read_until(master, b"got:SIGINT", seen)
        os.write(master, b"\x03")
        _read_until(master, b"got:SIGINT", seen, count=2)
        outer.terminate()
        _read_until(master, b"got:SIGTERM", seen)
        assert outer.wait(timeout=20) == 0
        # (the terminal echoes each Ctrl-C as ^C between the lines)
        events = re.findall(rb"got:(ready|SIGINT|SIGTERM)", bytes(seen))
        assert events == [b"ready", b"SIGINT", b"SIGINT", b"SIGTERM"]
    finally:
        if outer.poll() is None:
            outer.kill()
            outer.wait()
        os.close(master)

