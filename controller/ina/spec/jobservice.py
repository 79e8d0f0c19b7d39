"""The job service's messages: how a program asks the network for a job for a set of
hosts (a torch process group), and how it gives the job back.

A network that offers the service (the embedded network, ``inanet``; a lab,
``inalab run`` and every ``Lab``) listens on a Unix stream socket. A client sends
one JSON object per line and reads one per line back:

- ``{"request": "deploy", "workers": [HOST, ...], "slots": 16}``: a job over these
  hosts, planned by the controller and deployed; the answer is a ``Grant``: the job
  id chosen by the service, and either the job on the switches or ``on_hosts`` with
  the reason no switch can take it (nothing is then written; the job id stays
  reserved for its ring on hosts);
- ``{"request": "teardown", "job_id": N}``: the job removed (only one this
  connection was granted);
- ``{"request": "jobs"}``: the job ids deployed on the switches, those granted to
  any client, and the number of job entries and groups the switches hold (``Jobs``).

An answer with ``"error"`` says why a request was refused. The connection is the
lease: when it closes (the client ended, or was killed: the kernel closes its
socket), the service tears down every job it granted on it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ina.errors import WireError

#: The environment variable that names a lab's job service socket (the torch backend
#: reads it; ``inalab ranks`` sets it).
JOB_SERVICE_ENV = "INA_JOB_SERVICE"
#: Job ids the service grants start here, away from the ids people write in job
#: files (1, 2, ...).
FIRST_JOB_ID = 0x4000
#: The largest request or answer line (a deploy of 4096 workers fits).
MAX_LINE = 1 << 20


@dataclass(frozen=True)
class Grant:
    """A job the service granted: its id, its workers and slots; ``on_hosts`` with
    ``reason`` if no switch can take it (its workers reduce among themselves); the
    seconds the service took (planning and writing the switches)."""

    job_id: int
    workers: tuple[str, ...]
    slots: int
    on_hosts: bool = False
    reason: str = ""
    seconds: float = 0.0
    vat: dict[str, list[str]] = field(default_factory=dict)  # node -> workers it covers

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "workers": list(self.workers)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Grant:
        return cls(int(data["job_id"]), tuple(str(w) for w in data["workers"]),
                   int(data["slots"]), bool(data.get("on_hosts", False)),
                   str(data.get("reason", "")), float(data.get("seconds", 0.0)),
                   {str(k): [str(w) for w in v] for k, v in data.get("vat", {}).items()})


@dataclass(frozen=True)
class Jobs:
    """What a service knows: the jobs on its switches, those it granted, and how much
    job state its switches hold (job table entries and jobs' multicast groups)."""

    deployed: tuple[int, ...]
    granted: tuple[int, ...]
    state: int = 0


def encode(message: dict[str, Any]) -> bytes:
    """One line of ``message``; an answer that would pass MAX_LINE (which no client
    would read) becomes an error that says so."""
    line = json.dumps(message, sort_keys=True).encode() + b"\n"
    if len(line) > MAX_LINE:
        what = message.get("request", "the answer")
        line = json.dumps({"error": f"{what} would be {len(line):,} bytes, over the "
                                    f"{MAX_LINE:,} a line may have"}).encode() + b"\n"
    return line


def decode(line: bytes) -> dict[str, Any]:
    """A message from one line; ValueError if it is none (nested too deeply too)."""
    try:
        data = json.loads(line)
    except RecursionError:
        raise WireError("nested too deeply") from None
    if not isinstance(data, dict):
        raise WireError(f"expected a JSON object, got {type(data).__name__}")
    return data
