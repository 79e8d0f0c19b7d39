"""A lab's job service: jobs deployed on request for the programs on its hosts.

A torch program's process groups are jobs (ina.torch.member), which the lab deploys
when a group is made and tears down when it ends, or when the rank that asked for
it is gone (ina.control.jobservice). The ranks run on the lab's hosts, in network
namespaces that cannot reach the switches' gRPC ports (ina.lab.mininet): they ask
over a Unix socket in the lab's run directory (``LabRecord.jobs_socket``), which a
host's process reaches through the file system, and this service, in the lab's own
network beside the switches, deploys with the lab's credentials: the hosts never
hold them. ``inalab ranks`` (and the benchmarks and tests) tell the ranks where it
listens (INA_JOB_SERVICE).

Each request connects to the live switches (the topology without what the lab or
``inactl down`` failed), taking turns with every other writer of the machine
(ina.control.p4runtime.connect), and disconnects again: the service holds no
switch between requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from ina.control.access import Access
from ina.control.controller import Controller
from ina.control.jobservice import JobService
from ina.control.localstate import load_failures
from ina.errors import LabError
from ina.spec.topology import Failures, Topology

LOG = logging.getLogger(__name__)
#: Seconds the service gets to start listening.
START_TIMEOUT = 10.0


class LabJobService:
    """The job service of a lab's switches on a Unix socket at ``path``, on a thread
    of its own (its own event loop), from ``start`` until ``stop``."""

    def __init__(self, topology: Topology, p4info: Path, access: Access, path: Path,
                 failures: Callable[[], Failures], failures_file: Path | None = None):
        self.topology, self.p4info, self.access, self.path = topology, p4info, access, path
        self.failures, self.failures_file = failures, failures_file
        self.service = JobService(self._controller)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ina-job-service", daemon=True)

    @contextlib.asynccontextmanager
    async def _controller(self) -> AsyncIterator[Controller]:
        from ina.control.p4runtime import connect  # grpc is slow to import

        down = self.failures()
        if self.failures_file is not None:
            down = down | load_failures(self.failures_file).all
        topology = self.topology.without(down) if down else self.topology
        async with connect(topology, self.p4info, access=self.access, write=True) as clients:
            yield Controller(topology, clients)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            # The lab ends with its switches: nothing to tear down then.
            await self.service.serve_unix(self.path, self._ready.set, self._stop,
                                          release=False)

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 (reported by start)
            self._error = exc
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT) or self._error is not None:
            raise LabError(f"the lab's job service did not start on {self.path}: "
                           f"{self._error or 'timed out'}")
        LOG.info("job service on %s", self.path)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10.0)
