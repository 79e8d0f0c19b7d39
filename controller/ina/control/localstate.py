"""What a controller keeps on its own machine, next to a running lab: locks and
small files, written so that concurrent commands never lose each other's updates.

- ``FileLock``: an exclusive ``flock`` on a lock file, for the processes of this
  machine; waiting for it is bounded, and the holder writes who it is into the
  file, so that a command that gives up can say who holds it.
- ``atomic_write``: a file replaced whole, through a fresh temporary file in the
  same directory (``mkstemp``: a name nobody can guess or have planted, opened
  with O_EXCL, so never through a symlink), then ``os.replace`` (which replaces
  a symlink at the destination rather than following it).
- The failures file (``<topology>.failures.yaml``): the switches and links down,
  **declared** (``inactl down``, until ``inactl up``) and **detected** (``inactl
  watch``, which rewrites only its own verdicts) kept apart; every command leaves
  both out of the topology. Read, changed and written under its lock
  (``update_failures``), so two commands at once lose nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ina.errors import ControllerError, LockTimeout, TopologyError, UsageError
from ina.spec.topology import Failures

LOG = logging.getLogger(__name__)
#: Seconds between two tries of a lock that another process holds.
LOCK_POLL = 0.02


class FileLock:
    """An exclusive ``flock`` on ``path`` (created mode 0600 if missing, never
    through a symlink). The kernel releases it when its holder dies, so a killed
    command leaves nothing to clean up. Not re-entrant: one holder per instance."""

    def __init__(self, path: Path, purpose: str):
        self.path = path
        self.purpose = purpose  # written into the file while held: "inactl deploy"
        self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                           0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ControllerError(f"{self.path} is a symlink: refusing to lock through "
                                      "it (remove it)") from exc
            raise ControllerError(f"cannot open the lock file {self.path}: "
                                  f"{exc.strerror or exc}") from exc

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; whether it is now held."""
        assert not self.held, "this lock is held already"
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {self.purpose}\n".encode(), 0)
        self._fd = fd
        return True

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it (or "unknown")."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            text = ""
        return text or "unknown"

    def _timeout(self, timeout: float) -> LockTimeout:
        return LockTimeout(f"{self.path} stayed locked for {timeout:g}s by another command "
                           f"({self.holder()}): try again once it has finished")

    def acquire(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the lock; LockTimeout after that."""
        deadline = time.monotonic() + timeout
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                raise self._timeout(timeout)
            time.sleep(LOCK_POLL)  # the holder's release cannot be waited on otherwise

    async def acquire_async(self, timeout: float) -> None:
        """``acquire``, without blocking the event loop while it waits."""
        deadline = time.monotonic() + timeout
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                raise self._timeout(timeout)
            await asyncio.sleep(LOCK_POLL)

    def release(self) -> None:
        if self.held:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = -1

    @contextlib.contextmanager
    def holding(self, timeout: float) -> Iterator[None]:
        self.acquire(timeout)
        try:
            yield
        finally:
            self.release()


def atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` at once: readers see the old file or the new one,
    never a part, and nothing is written through a symlink an attacker planted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- The failures file -------------------------------------------------------------


@dataclass(frozen=True)
class RecordedFailures:
    """The failures file: what people declared down (``inactl down``, until ``inactl
    up``) and what the watcher detected down (its latest verdict), kept apart."""

    declared: Failures = field(default_factory=Failures)
    detected: Failures = field(default_factory=Failures)

    @property
    def all(self) -> Failures:
        """Every switch and link down, whoever said so: what commands leave out."""
        return self.declared | self.detected

    def __bool__(self) -> bool:
        return bool(self.declared or self.detected)


def _failures_of(data: object, what: str) -> Failures:
    if data is None:
        return Failures()
    if not isinstance(data, dict) or set(data) - {"switches", "links"}:
        raise UsageError(f"{what}: expected a mapping with switches and links")
    switches = frozenset(str(s) for s in data.get("switches") or [])
    links = frozenset(frozenset(str(x) for x in pair) for pair in data.get("links") or [])
    if any(len(pair) != 2 for pair in links):
        raise UsageError(f"{what}: a link is two different nodes")
    return Failures(switches, links)


def _failures_data(failures: Failures) -> dict[str, list[str] | list[list[str]]]:
    return {"switches": sorted(failures.switches),
            "links": sorted(sorted(pair) for pair in failures.links)}


def load_failures(path: Path) -> RecordedFailures:
    """The failures recorded in ``path`` (none if it does not exist)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return RecordedFailures()
    except OSError as exc:
        raise TopologyError([f"cannot read the failures file: {exc.strerror or exc}"],
                            str(path)) from exc
    try:
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict) or set(data) - {"declared", "detected"}:
            raise UsageError("expected a mapping with declared and detected")
        return RecordedFailures(_failures_of(data.get("declared"), "declared"),
                                _failures_of(data.get("detected"), "detected"))
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        raise TopologyError([f"cannot read the failures file: {exc}"], str(path)) from exc


def failures_lock(path: Path) -> FileLock:
    return FileLock(path.with_name(path.name + ".lock"), f"updating {path.name}")


def update_failures(path: Path, change: Callable[[RecordedFailures], RecordedFailures],
                    timeout: float = 10.0) -> RecordedFailures:
    """Read the failures file, apply ``change`` and write the result, all under the
    file's lock (no update of another command is lost); no failures: no file."""
    with failures_lock(path).holding(timeout):
        recorded = change(load_failures(path))
        if not recorded:
            path.unlink(missing_ok=True)
        else:
            atomic_write(path, yaml.safe_dump({
                "declared": _failures_data(recorded.declared),
                "detected": _failures_data(recorded.detected)}))
        return recorded
