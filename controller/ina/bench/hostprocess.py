"""A child process on a lab host (or on this machine) driven by lines on its stdin
and stdout: the benchmarks' rank, worker and injector processes, the host
benchmark's reflector, the torch tests' ranks.

The child says a token on stdout once it is set up (``ready``, ``up``), then
answers: one JSON line per JSON line it is sent, or (``inaworker --wait-go``, a
measured rank) waits for ``go`` and prints its report. Its stderr goes to a log
file, whose tail every error names. Its stdout is read by a thread into a queue,
so that every wait for a line has a bound (``next_line``), and ``stop`` ends it
whatever it does: asked first as it expects (an empty line, ``quit``, or its stdin
closed), then SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ina.errors import LabError

if TYPE_CHECKING:
    from ina.lab.mininet import Lab

#: Starts the child: called as ``spawn(argv, env=..., stdin=..., stdout=...,
#: stderr=...)`` (subprocess.Popen, a Mininet host's popen).
Spawn = Callable[..., "subprocess.Popen[bytes]"]
#: Seconds a child has to say it is set up (imports on a busy machine).
READY_TIMEOUT = 120.0
#: The bytes of a log ``tail`` reads at most.
TAIL_BYTES = 64 << 10


class HostProcess:
    """One child driven by lines. ``ask``: what it is sent to end (a line without
    its newline: ``b""``, ``b"quit"``), or None if closing its stdin is enough.
    ``log``: the file its stderr is appended to (None: a temporary file, gone once
    it is stopped)."""

    def __init__(self, name: str, argv: list[str], log: Path | None = None,
                 env: dict[str, str] | None = None, spawn: Spawn = subprocess.Popen,
                 ask: bytes | None = None):
        self.name, self.argv, self.log_path, self.ask = name, argv, log, ask
        # Open for the child's life: closed by kill().
        self._log: IO[bytes] = (
            tempfile.TemporaryFile() if log is None else log.open("a+b"))  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] = spawn(
            argv, env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._ended = False
        self._reader = threading.Thread(target=self._read, name=f"lines-{name}", daemon=True)
        self._reader.start()

    @classmethod
    def on(cls, lab: Lab, host: str, argv: list[str], log: Path | None = None,
           env: dict[str, str] | None = None, ask: bytes | None = None) -> HostProcess:
        """``argv`` on the lab's ``host``."""
        return cls(host, argv, log, env, lab.host(host).popen, ask)

    @property
    def what(self) -> str:
        """The program, briefly (its module for ``python -m``)."""
        argv = self.argv
        return argv[2] if len(argv) > 2 and argv[1] == "-m" else Path(argv[0]).name

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(b"")  # the end

    # --- lines ---

    def next_line(self, timeout: float) -> bytes | None:
        """Its next line on stdout (with its newline); ``b""`` once it has closed
        stdout (ended); None if no line came within ``timeout`` seconds."""
        if self._ended:
            return b""
        try:
            line = self._lines.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        self._ended = line == b""
        return line

    def ready(self, token: bytes = b"ready", timeout: float = READY_TIMEOUT) -> None:
        """Wait (at most ``timeout`` seconds) for its line ``token``; LabError naming
        its host and its log's tail if another line, or none, comes."""
        line = self.next_line(timeout)
        if line is None or line.strip() != token:
            said = f"said {line!r}" if line is not None else f"said nothing in {timeout:g}s"
            raise LabError(f"{self.name}: {self.what} did not get {token.decode()} ({said}); "
                           f"its log: {self.tail()}")

    def write(self, line: bytes) -> bool:
        """``line`` and a newline on its stdin; False if it no longer reads it."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + b"\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):  # ValueError: stdin closed
            return False

    def send(self, obj: Any) -> bool:
        """``obj`` as one JSON line; False if it no longer reads its stdin."""
        return self.write(json.dumps(obj).encode())

    def request(self, obj: Any, timeout: float) -> dict[str, Any] | None:
        """``obj`` sent and its one-line JSON answer; None if it could not be sent,
        or no answer came within ``timeout`` seconds (or it ended)."""
        if not self.send(obj):
            return None
        line = self.next_line(timeout)
        return json.loads(line) if line else None

    def go(self) -> bool:
        """Release it (a child waiting to start with the others, once ``ready``)."""
        return self.write(b"go")

    def finish(self, timeout: float) -> list[bytes]:
        """Its lines until it ends, and its exit, within ``timeout`` seconds (LabError
        with its log's tail if it does not end, or exits with an error)."""
        lines: list[bytes] = []
        deadline = _deadline(timeout)
        while (line := self.next_line(deadline())) != b"":
            if line is None:
                raise LabError(f"{self.name}: {self.what} did not end within {timeout:g}s; "
                               f"its log: {self.tail()}")
            lines.append(line)
        try:
            code = self.proc.wait(timeout=max(0.0, deadline()))
        except subprocess.TimeoutExpired:
            raise LabError(f"{self.name}: {self.what} closed its output but did not exit "
                           f"within {timeout:g}s") from None
        if code != 0:
            raise LabError(f"{self.name}: {self.what} failed ({code}): {self.tail()}")
        return lines

    # --- the end ---

    def running(self) -> bool:
        return self.proc.poll() is None

    def quit(self) -> None:
        """Ask it to end, as it expects: ``ask``, then its stdin closed."""
        if self.running():
            if self.ask is not None:
                self.write(self.ask)
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()

    def stop(self, grace: float = 10.0, term_grace: float = 3.0) -> None:
        """End it: asked (``quit``), then after ``grace`` seconds SIGTERM, and
        SIGKILL ``term_grace`` seconds later."""
        self.quit()
        self.kill(wait=grace, grace=term_grace)

    def kill(self, wait: float = 0.0, grace: float = 3.0) -> None:
        """End it unasked: after ``wait`` seconds, SIGTERM (a worker in a call gives
        it up, as on a failure), and SIGKILL ``grace`` seconds later."""
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout if not self._reader.is_alive() else None):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._log.close()

    def tail(self, lines: int = 5) -> str:
        """The last ``lines`` lines of its log, joined by ``|``."""
        try:
            if self._log.closed:
                if self.log_path is None:
                    return "(no log)"
                text = self.log_path.read_bytes()[-TAIL_BYTES:]
            else:
                self._log.flush()
                size = os.fstat(self._log.fileno()).st_size
                text = os.pread(self._log.fileno(), TAIL_BYTES, max(0, size - TAIL_BYTES))
        except OSError:
            return "(no log)"
        last = text.decode(errors="replace").strip().splitlines()[-lines:]
        return " | ".join(last) or "(empty log)"


def stop_all(procs: Iterable[HostProcess], grace: float = 10.0) -> None:
    """``stop`` each of ``procs``, every one asked first: processes that end
    together (a process group's ranks) are not each waited for alone."""
    procs = list(procs)
    for proc in procs:
        proc.quit()
    for proc in procs:
        proc.stop(grace)


def _deadline(timeout: float) -> Callable[[], float]:
    """The seconds left of ``timeout`` from now, each time it is called."""
    end = time.monotonic() + timeout
    return lambda: end - time.monotonic()
