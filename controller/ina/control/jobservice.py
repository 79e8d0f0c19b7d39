"""The job service: jobs deployed on request, for as long as the requester holds its
connection (the messages: ina.spec.jobservice).

A torch program makes a process group of some of its ranks, and wants the group's
collectives in the switches: its job's workers are the ranks' hosts, its VAT is the
controller's plan, and it must be gone when the group is destroyed, when the program
ends, and when the program is killed. ``JobService`` does this over any controller:

- ``deploy``: a fresh job id (from FIRST_JOB_ID on, the next none holds after the last
  granted, preferring one whose ring ports (``job_id mod 256``) no other job of this
  service uses), the job
  planned with the switches' free capacity and written as the controller writes any
  job; no room or no VAT (PlanError, CapacityError), or the switches unreachable, and
  the grant says ``on_hosts`` with the reason: the group's workers reduce among
  themselves, and creating the group does not fail.
- ``teardown``: a job the requester was granted, removed; the grant ends only with
  its job gone, so a teardown that could not reach the switches is an error the
  requester may send again.
- ``release``: when a requester's connection closes, every job granted on it removed;
  the kernel closes a killed process's sockets, so a killed rank's jobs go too. A job
  that could not be removed then is kept as an orphan and removed again before every
  later request and every ORPHAN_RETRY seconds on a Unix socket, until it is gone.

Requests run one at a time. ``serve_unix`` serves the protocol on a Unix socket (a
lab's service, ``Lab``); the embedded network calls ``handle`` and ``release`` from
its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ina.control.controller import Controller
from ina.control.entities import TableEntry
from ina.errors import CapacityError, ControllerError, InaError, JobError, PlanError
from ina.protocol.constants import Op
from ina.spec.job import DEFAULT_SLOTS, MAX_JOB_ID, JobSpec
from ina.spec.jobservice import FIRST_JOB_ID, MAX_LINE, Grant, Jobs, decode, encode
from ina.spec.yamlfile import show

LOG = logging.getLogger(__name__)
#: Tries of a fresh job id that another controller deployed meanwhile.
ID_TRIES = 8
#: Ring ports repeat every this many job ids (ina.host.config.RING_JOBS).
RING_PERIOD = 256
#: Seconds between tries to remove the jobs of requesters that left while the switches
#: could not be reached (serve_unix; the embedded network tries at every request).
ORPHAN_RETRY = 5.0


@dataclass
class Lease:
    """What one requester (one connection) was granted."""

    name: str
    grants: dict[int, Grant] = field(default_factory=dict)


class JobService:
    """Jobs for process groups over the controller that ``open_controller`` gives (a
    context manager: a lasting one for the embedded network, fresh P4Runtime
    connections per request on a lab)."""

    def __init__(self, open_controller: Callable[[], AbstractAsyncContextManager[Controller]],
                 first_id: int = FIRST_JOB_ID):
        self.open_controller = open_controller
        self.first_id = first_id
        self.leases: dict[object, Lease] = {}
        #: Jobs of requesters that left, not removed yet (the switches unreachable).
        self.orphans: dict[int, Grant] = {}
        self._lock = asyncio.Lock()
        self._releasing = True  # a closed connection's jobs are torn down
        self._cursor = first_id  # where the search for a fresh id starts

    def granted(self) -> set[int]:
        """Every job id granted and not yet removed (orphans included)."""
        return {j for lease in self.leases.values() for j in lease.grants} | set(self.orphans)

    async def handle(self, client: object, message: dict[str, Any]) -> dict[str, Any]:
        """One request from ``client`` (any key: its connection), its answer."""
        await self.remove_orphans()
        lease = self.leases.setdefault(client, Lease(str(client)))
        kind = message.get("request")
        try:
            if kind == "deploy":
                workers = message.get("workers")
                slots = message.get("slots", DEFAULT_SLOTS)
                if not isinstance(workers, list) or not all(isinstance(w, str) for w in workers):
                    return {"error": "deploy needs workers: a list of host names"}
                if not isinstance(slots, int):
                    return {"error": "slots must be an integer"}
                return (await self.deploy(lease, workers, slots)).to_json()
            if kind == "teardown":
                job_id = message.get("job_id")
                if not isinstance(job_id, int) or job_id not in lease.grants:
                    return {"error": f"job {show(job_id)} was not granted on this "
                                     "connection"}
                return {"removed_from": await self.teardown(lease, job_id)}
            if kind == "jobs":
                jobs = await self.jobs()
                return {"deployed": list(jobs.deployed), "granted": list(jobs.granted),
                        "state": jobs.state}
        except InaError as exc:
            return {"error": str(exc)}
        return {"error": f"unknown request {show(kind)} (deploy, teardown, jobs)"}

    async def deploy(self, lease: Lease, workers: Sequence[str], slots: int) -> Grant:
        """A job over ``workers``, planned and written; or, if no switch can take it,
        granted on hosts with the reason. JobError if the request itself is wrong
        (unknown hosts, a worker twice)."""
        async with self._lock:
            started = time.monotonic()
            taken = self.granted()
            try:
                async with self.open_controller() as ctl, ctl.writing():
                    held = set(await _held_job_ids(ctl))
                    for _ in range(ID_TRIES):
                        job_id = self._fresh_id(held | taken)
                        spec = JobSpec(job_id, Op.SUM, tuple(workers), slots=slots)
                        try:
                            deployment = await ctl.deploy(spec)
                        except (PlanError, CapacityError) as exc:
                            grant = Grant(job_id, tuple(workers), slots, True,
                                          "; ".join(exc.problems), time.monotonic() - started)
                            break
                        except JobError:
                            if job_id not in await _held_job_ids(ctl):
                                raise  # the request is wrong, not the id
                            held.add(job_id)  # another controller took it meanwhile
                            continue
                        job = deployment.job
                        assert job is not None
                        grant = Grant(job_id, tuple(workers), slots,
                                      seconds=time.monotonic() - started,
                                      vat={sw: list(node.covers)
                                           for sw, node in sorted(job.nodes.items())})
                        break
                    else:
                        raise JobError([f"no free job id after {ID_TRIES} tries"])
            except JobError:
                raise
            except InaError as exc:  # the switches unreachable, a write refused
                grant = Grant(self._fresh_id(taken), tuple(workers), slots, True,
                              f"the controller could not deploy it: {exc}",
                              time.monotonic() - started)
            lease.grants[grant.job_id] = grant
            LOG.info("job %d for %s: %s (%.3fs)", grant.job_id, ", ".join(workers),
                     f"on hosts: {grant.reason}" if grant.on_hosts else "deployed",
                     grant.seconds)
            return grant

    def _fresh_id(self, taken: set[int]) -> int:
        """The next free id after the last one granted (round the range from
        ``first_id``: an id just given back is not granted again at once, so a late
        packet of the old job cannot be taken for the new one's), one whose ring ports
        no taken id shares if there is one."""
        span = MAX_JOB_ID + 1 - self.first_id
        order = [self.first_id + (self._cursor - self.first_id + k) % span
                 for k in range(span)]
        free = [j for j in order if j not in taken]
        if not free:
            raise JobError(["every job id is taken"])
        residues = {j % RING_PERIOD for j in taken}
        chosen = next((j for j in free if j % RING_PERIOD not in residues), free[0])
        self._cursor = chosen + 1 if chosen < MAX_JOB_ID else self.first_id
        return chosen

    async def teardown(self, lease: Lease, job_id: int) -> list[str]:
        """Remove a job ``lease`` was granted; the switches it was removed from. The
        grant ends only once the job is gone: if the switches cannot be reached
        (InaError), it stays, and the requester may ask again."""
        async with self._lock:
            removed = await self._remove(lease.grants[job_id])
            del lease.grants[job_id]
            return removed

    async def _remove(self, grant: Grant) -> list[str]:
        if grant.on_hosts:
            return []
        try:
            async with self.open_controller() as ctl:
                removed = await ctl.teardown(grant.job_id)
        except JobError:  # gone already (removed by hand)
            return []
        except InaError as exc:
            raise ControllerError(f"job {grant.job_id} could not be removed now ({exc}); "
                                  "it is still granted: ask again") from exc
        LOG.info("job %d removed from %s", grant.job_id, ", ".join(removed))
        return removed

    async def release(self, client: object) -> list[int]:
        """Every job granted to ``client``, removed (its connection closed); the ids.
        One that cannot be removed now becomes an orphan (``remove_orphans``)."""
        lease = self.leases.pop(client, None)
        if lease is None:
            return []
        released = []
        for job_id, grant in list(lease.grants.items()):
            try:
                async with self._lock:
                    await self._remove(grant)
                released.append(job_id)
            except InaError as exc:
                LOG.warning("job %d: could not remove it after its requester left (%s): "
                            "tried again later", job_id, exc)
                self.orphans[job_id] = grant
        if released:
            LOG.info("requester gone: jobs %s removed", released)
        return released

    async def remove_orphans(self) -> list[int]:
        """The jobs of requesters that left, removed where the switches answer now."""
        removed = []
        for job_id, grant in list(self.orphans.items()):
            try:
                async with self._lock:
                    await self._remove(grant)
            except InaError as exc:
                LOG.debug("job %d: still not removed: %s", job_id, exc)
                continue
            del self.orphans[job_id]
            removed.append(job_id)
        return removed

    async def close(self) -> None:
        """Release every lease, and try the orphans once more."""
        for client in list(self.leases):
            await self.release(client)
        await self.remove_orphans()
        if self.orphans:
            LOG.warning("jobs %s of requesters that left could not be removed: remove "
                        "them with inactl teardown", sorted(self.orphans))

    async def jobs(self) -> Jobs:
        async with self.open_controller() as ctl:
            entries, groups = await ctl.read_job_state()
        held = _job_ids(entries)
        state = sum(len(es) for es in entries.values()) + sum(len(gs) for gs in groups.values())
        return Jobs(tuple(sorted(held)), tuple(sorted(self.granted())), state)

    # --- on a Unix socket ----------------------------------------------------------

    async def serve_unix(self, path: Path, ready: Callable[[], None] | None = None,
                         stop: asyncio.Event | None = None, release: bool = True) -> None:
        """Serve the protocol on a Unix socket at ``path`` until ``stop`` is set (or
        the task is cancelled); then, with ``release``, tear down every job still
        granted (not when the switches go with the service)."""
        path.unlink(missing_ok=True)
        old = os.umask(0o177)  # the socket is made 0600: never reachable wider
        try:
            server = await asyncio.start_unix_server(self._connection, str(path),
                                                     limit=MAX_LINE)
        finally:
            os.umask(old)
        retrying = asyncio.create_task(self._retry_orphans())
        try:
            if ready is not None:
                ready()
            await (stop or asyncio.Event()).wait()
        finally:
            retrying.cancel()
            self._releasing = release
            server.close()
            if release:
                await self.close()
            path.unlink(missing_ok=True)

    async def _retry_orphans(self) -> None:
        while True:
            await asyncio.sleep(ORPHAN_RETRY)
            await self.remove_orphans()

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        client = object()
        try:
            while line := await reader.readline():
                try:
                    answer = await self.handle(client, decode(line))
                except ValueError as exc:
                    answer = {"error": f"not a request: {exc}"}
                writer.write(encode(answer))
                await writer.drain()
        except (ConnectionError, asyncio.LimitOverrunError, ValueError) as exc:
            LOG.debug("job service client gone: %s", exc)
        finally:
            if self._releasing:
                await self.release(client)
            with contextlib.suppress(ConnectionError):
                writer.close()


async def _held_job_ids(ctl: Controller) -> set[int]:
    """Every job id some job entry of some switch holds."""
    entries, _ = await ctl.read_job_state()
    return _job_ids(entries)


def _job_ids(entries: Mapping[str, Sequence[TableEntry]]) -> set[int]:
    return {int(v) for es in entries.values() for e in es
            for k, v in e.match if k == "job_id" and isinstance(v, int)}


@contextlib.asynccontextmanager
async def lasting(controller: Controller) -> AsyncIterator[Controller]:
    """``open_controller`` for a controller that stays connected."""
    yield controller
