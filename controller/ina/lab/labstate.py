"""Where a running lab is recorded, so that ``inalab exec`` and ``inalab host``
reach it and a second ``inalab run`` of the same topology is refused.

In the run directory (``$INA_RUN_DIR``, default ``.run``):

- ``<topology>.pid``: the sandbox, written as soon as it runs: the PID of its
  ``unshare`` process with that process's start time and PID namespace (so a PID
  reused by another process is not taken for it), and the PID of the ``inalab run``
  that owns it;
- ``<topology>.json``: the PID of every host's shell as the sandbox sees it, written
  once the switches are up and initialised;
- ``<topology>.failures.yaml``: the switches and links declared or detected down
  (``inactl down``/``up``, ``inactl watch``), which every ``inactl`` command
  leaves out of the topology (ina.control.localstate);
- ``<topology>.tls/``: the lab's CA certificate, each switch's certificate and key
  and the controller's (ina.lab.pki), which every command connects with;
- ``<topology>.lock``: held by each command that writes to the switches, from
  before it connects until it has disconnected (ina.control.p4runtime.connect);
- ``<topology>.jobs.sock``: the lab's job service (ina.lab.jobs), where a torch
  program's process groups ask for their jobs.

``inalab run`` removes them (the lock file aside) when its lab ends. A run killed
with SIGKILL cannot: its files are then stale, which every reader detects (the
recorded process is gone, or is another one) and removes.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from ina.control.access import Access
from ina.control.localstate import atomic_write
from ina.errors import UsageError

LOG = logging.getLogger(__name__)
#: An argument of every sandbox's ``unshare`` command line (see ina.lab.sandbox.command).
SANDBOX_MARK = "ina-sandbox"


def run_dir() -> Path:
    """The run directory: $INA_RUN_DIR, default ``.run``; UsageError if it names
    something that is not a folder."""
    path = Path(os.environ.get("INA_RUN_DIR", ".run"))
    if path.exists() and not path.is_dir():
        raise UsageError(f"INA_RUN_DIR={path} is not a folder: give a folder (made if missing) "
                         "for the labs' run files")
    return path


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) may hold spaces and parentheses.
    return int(stat.rpartition(")")[2].split()[19])


def _pid_namespace() -> str:
    return os.readlink("/proc/self/ns/pid")


@dataclass(frozen=True)
class SandboxProcess:
    """The ``unshare`` process of a lab's sandbox, as the machine sees it."""

    pid: int
    start: int  # start_time(pid) when recorded
    pid_ns: str  # the PID namespace the PIDs are numbered in
    owner: int  # the `inalab run` process that made it

    @classmethod
    def of(cls, pid: int, owner: int) -> SandboxProcess:
        start = start_time(pid)
        if start is None:
            raise ProcessLookupError(f"no process {pid}")
        return cls(pid, start, _pid_namespace(), owner)

    def comparable(self) -> bool:
        """Whether this process's PIDs are numbered in our PID namespace."""
        return self.pid_ns == _pid_namespace()

    def alive(self) -> bool:
        """Whether that very sandbox still runs: the PID exists, started when recorded,
        and is a sandbox's. Recorded in another PID namespace: assumed so (we cannot
        tell)."""
        if not self.comparable():
            return True
        if start_time(self.pid) != self.start:
            return False
        try:
            argv = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return SANDBOX_MARK.encode() in argv


class DirectoryLock:
    """An exclusive flock on a directory, held from creation until ``release`` (or
    the end of a ``with`` block); the kernel drops it if the process dies."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DirectoryLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class LabRecord:
    """The state files of one topology's lab."""

    def __init__(self, topology: str, directory: Path | None = None):
        self.topology = topology
        self.directory = directory if directory is not None else run_dir()

    @property
    def pid_file(self) -> Path:
        return self.directory / f"{self.topology}.pid"

    @property
    def state_file(self) -> Path:
        return self.directory / f"{self.topology}.json"

    @property
    def failures_file(self) -> Path:
        return self.directory / f"{self.topology}.failures.yaml"

    @property
    def tls_dir(self) -> Path:
        return self.directory / f"{self.topology}.tls"

    @property
    def lock_file(self) -> Path:
        return self.directory / f"{self.topology}.lock"

    @property
    def jobs_socket(self) -> Path:
        return self.directory / f"{self.topology}.jobs.sock"

    def access(self, insecure: bool = False) -> Access:
        """How a command reaches the lab's switches: with the lab's TLS credentials
        (UsageError if there are none), or in plaintext if ``insecure``."""
        if insecure:
            return Access.insecure(self.lock_file)
        return Access.tls_in(self.tls_dir, self.lock_file)

    def lock(self) -> DirectoryLock:
        """Exclusive use of the run directory, while a caller checks and claims it."""
        return DirectoryLock(self.directory)

    def sandbox(self) -> SandboxProcess | None:
        """The recorded sandbox, alive or not; None if none is recorded (or the file
        cannot be parsed)."""
        try:
            data = json.loads(self.pid_file.read_text())
            return SandboxProcess(int(data["pid"]), int(data["start"]), str(data["pid_ns"]),
                                  int(data["owner"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            LOG.warning("%s: unreadable (%s): treated as stale", self.pid_file, exc)
            return None

    def running(self) -> SandboxProcess | None:
        """The recorded sandbox if it still runs. Files left by one that does not (a
        run killed with SIGKILL) are removed."""
        sandbox = self.sandbox()
        if sandbox is not None and sandbox.alive():
            return sandbox
        if self.pid_file.exists() or self.state_file.exists():
            LOG.info("%s: removing the state of a lab that no longer runs", self.topology)
            self._remove()
        return None

    def claim(self, sandbox: SandboxProcess) -> None:
        self._write(self.pid_file, json.dumps(asdict(sandbox)))

    def publish(self, hosts: dict[str, int]) -> None:
        """Record the hosts' PIDs: the lab is up."""
        self._write(self.state_file, json.dumps(hosts))

    def hosts(self) -> dict[str, int] | None:
        """The hosts' PIDs, once the lab is up."""
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        return {str(h): int(p) for h, p in data.items()} if isinstance(data, dict) else None

    def release(self, sandbox: SandboxProcess) -> None:
        """Remove the files if they still describe ``sandbox``."""
        if self.sandbox() == sandbox:
            self._remove()

    def _remove(self) -> None:
        self.failures_file.unlink(missing_ok=True)
        self.jobs_socket.unlink(missing_ok=True)
        shutil.rmtree(self.tls_dir, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)
        self.pid_file.unlink(missing_ok=True)

    @staticmethod
    def _write(path: Path, text: str) -> None:
        atomic_write(path, text + "\n")  # readers see the whole file or none
