"""A client of a network's job service (ina.spec.jobservice): jobs for sets of hosts,
deployed on request and gone when given back, or when this client's connection
closes (its process ended or was killed).

One ``JobClient`` per process is enough: it holds one connection, the lease of
every job it was granted; requests from several threads take turns on it. A child the
process forks closes its copy (ina.host.leases): a rank's DataLoader workers do not
keep its jobs after it died.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ina.errors import LabError
from ina.host import leases
from ina.spec.job import DEFAULT_SLOTS
from ina.spec.jobservice import MAX_LINE, Grant, Jobs, decode, encode

#: Seconds an answer may take (a deploy on a lab: P4Runtime connections, a plan and
#: writes to every switch of the job).
ANSWER_TIMEOUT = 120.0


class JobClient:
    """A connection to the job service at ``path`` (a Unix socket)."""

    def __init__(self, path: str | Path, timeout: float = ANSWER_TIMEOUT):
        self.path = str(path)
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(self.path)
        except OSError as exc:
            self._sock.close()
            raise LabError(f"no job service at {self.path}: {exc}") from exc
        self._file = self._sock.makefile("rb")
        leases.hold(self)

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            try:
                self._sock.sendall(encode(request))
                line = self._file.readline(MAX_LINE)
            except OSError as exc:
                raise LabError(f"the job service at {self.path} did not answer: {exc}") from exc
        if not line:
            raise LabError(f"the job service at {self.path} closed the connection")
        answer = decode(line)
        if "error" in answer:
            raise LabError(f"the job service refused {request['request']}: {answer['error']}")
        return answer

    def deploy(self, workers: Sequence[str], slots: int = DEFAULT_SLOTS) -> Grant:
        """A job over ``workers``: deployed, or granted on hosts with the reason."""
        return Grant.from_json(self._ask({"request": "deploy", "workers": list(workers),
                                          "slots": slots}))

    def teardown(self, job_id: int) -> list[str]:
        """Remove a job this client was granted; the switches it was removed from."""
        return [str(s) for s in self._ask({"request": "teardown",
                                           "job_id": job_id})["removed_from"]]

    def jobs(self) -> Jobs:
        answer = self._ask({"request": "jobs"})
        return Jobs(tuple(answer["deployed"]), tuple(answer["granted"]), int(answer["state"]))

    def close(self) -> None:
        """Close the connection: the service tears down what is still granted."""
        self._file.close()
        self._sock.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
