"""The job service (jobs deployed on request, gone with their requester's connection)
and the transport several jobs of one process share: on in-memory switches and on
the embedded network."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from ina.control.jobservice import JobService, lasting
from ina.host.config import WorkerConfig
from ina.host.jobclient import JobClient
from ina.host.link import LinkTransport
from ina.host.transport import SharedTransport
from ina.host.worker import Worker
from ina.model.embedded import EmbeddedNetwork
from ina.model.harness import initialised_network
from ina.protocol.codec import InaHeader
from ina.protocol.constants import Op
from ina.spec.jobservice import FIRST_JOB_ID, Jobs
from ina.spec.topology import Topology

from inatest import in_threads, serving


def service(topology: Topology) -> JobService:
    _, ctl = initialised_network(topology)
    return JobService(lambda: lasting(ctl))


def test_a_job_is_planned_deployed_and_torn_down(figure1: Topology) -> None:
    svc = service(figure1)

    async def run() -> None:
        grant = await svc.deploy(svc.leases.setdefault("a", _lease("a")), ["w3", "w4"], 16)
        assert grant.job_id == FIRST_JOB_ID and not grant.on_hosts
        assert grant.vat == {"s2": ["w3", "w4"]}
        jobs = await svc.jobs()
        assert jobs.deployed == jobs.granted == (grant.job_id,) and jobs.state > 0
        assert await svc.teardown(svc.leases["a"], grant.job_id) == ["s2"]
        assert await svc.jobs() == Jobs((), (), 0)

    asyncio.run(run())


def test_fresh_ids_keep_their_ring_ports_apart(figure1: Topology) -> None:
    svc = service(figure1)

    async def run() -> list[int]:
        return [(await svc.handle("a", {"request": "deploy", "workers": ["w1", "w2"]}))
                ["job_id"] for _ in range(3)]

    ids = asyncio.run(run())
    assert len({j % 256 for j in ids}) == 3


def test_a_job_no_switch_can_take_is_granted_on_hosts_and_writes_nothing(
        figure1: Topology) -> None:
    svc = service(figure1)

    async def run() -> None:
        for _ in range(64):  # s1, w1's and w2's edge switch, holds 64 jobs at most
            assert not (await svc.handle("filler", {"request": "deploy",
                                                   "workers": ["w1", "w2"]}))["on_hosts"]
        state = (await svc.jobs()).state
        answer = await svc.handle("late", {"request": "deploy", "workers": ["w1", "w3"]})
        assert answer["on_hosts"] and "s1 already holds 64 jobs" in answer["reason"]
        assert (await svc.jobs()).state == state
        assert await svc.release("filler")
        assert (await svc.jobs()).deployed == ()
        assert (await svc.jobs()).granted == (answer["job_id"],)  # its ring's id, kept
        assert await svc.handle("late", {"request": "teardown",
                                         "job_id": answer["job_id"]}) == {"removed_from": []}

    asyncio.run(run())


def test_requests_that_are_wrong_are_answered_with_an_error(figure1: Topology) -> None:
    svc = service(figure1)

    async def run() -> None:
        assert "error" in await svc.handle("a", {"request": "deploy", "workers": "w1"})
        assert "error" in await svc.handle("a", {"request": "teardown", "job_id": 7})
        assert "error" in await svc.handle("a", {"request": "fly"})
        g = await svc.handle("a", {"request": "deploy", "workers": ["w1", "w2"]})
        assert "error" in await svc.handle("b", {"request": "teardown",
                                                "job_id": g["job_id"]})  # not b's

    asyncio.run(run())


def _lease(name: str):  # type: ignore[no-untyped-def]
    from ina.control.jobservice import Lease

    return Lease(name)


# --- On the embedded network -----------------------------------------------------------


@pytest.fixture
def network(figure1: Topology, tmp_path: Path) -> Iterator[EmbeddedNetwork]:
    yield from serving(EmbeddedNetwork(figure1, jobs_socket=tmp_path / "jobs.sock"))


def test_a_clients_jobs_go_when_its_connection_closes(network: EmbeddedNetwork) -> None:
    assert network.endpoints.jobs is not None
    client = JobClient(network.endpoints.jobs)
    granted = [client.deploy(ws).job_id for ws in (["w1", "w2"], ["w3", "w4", "w5"])]
    with JobClient(network.endpoints.jobs) as other:
        assert other.jobs().deployed == tuple(granted)
        client.close()  # as a killed process's socket closes
        deadline = 50
        while other.jobs() != Jobs((), (), 0) and deadline:
            deadline -= 1
            threading.Event().wait(0.05)
        assert other.jobs() == Jobs((), (), 0)


def test_one_host_in_two_jobs_at_once_through_one_shared_transport(
        network: EmbeddedNetwork) -> None:
    assert network.endpoints.jobs is not None
    topo = network.topology
    with JobClient(network.endpoints.jobs) as client:
        a, b = client.deploy(["w1", "w2"]), client.deploy(["w1", "w3", "w4"])

        def worker(job_id: int, workers: tuple[str, ...], host: str,
                   transport: object) -> Worker:
            config = WorkerConfig.of(job_id, Op.SUM, workers, 16, topo, host)
            return Worker(config, transport, timeout=10)  # type: ignore[arg-type]

        def link(host: str) -> LinkTransport:
            edge = topo.address(topo.host_attachment(host)[0])
            return LinkTransport(topo, host, network.endpoints, edge)

        shared = SharedTransport(link("w1"))
        own = {h: link(h) for h in ("w2", "w3", "w4")}
        workers = [(worker(a.job_id, a.workers, "w1", shared.view(a.job_id)), 1),
                   (worker(a.job_id, a.workers, "w2", own["w2"]), 2),
                   (worker(b.job_id, b.workers, "w1", shared.view(b.job_id)), 10),
                   (worker(b.job_id, b.workers, "w3", own["w3"]), 20),
                   (worker(b.job_id, b.workers, "w4", own["w4"]), 30)]

        def calls(w: Worker, v: int) -> list[npt.NDArray[Any]]:
            return [w.allreduce(np.full(3000 + i, v + i, dtype=np.int32)).values
                    for i in range(3)]

        try:
            results = in_threads({str(k): (lambda w=w, v=v: calls(w, v))  # type: ignore[misc]
                                  for k, (w, v) in enumerate(workers)})
        finally:
            shared.close()
            for t in own.values():
                t.close()
    for k, (w, _) in enumerate(workers):
        got = results[str(k)]
        assert not isinstance(got, Exception), got
        total = 3 if w.config.job_id == a.job_id else 60
        for i, values in enumerate(got):
            assert np.all(values == total + i * w.config.workers)
    assert shared.strays == 0


class FakeRaw:
    """A transport that receives what a test puts in its queue."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self.sent: list[bytes] = []

    def send(self, payload: bytes, dst: str | None = None) -> None:
        self.sent.append(payload)

    def recv(self, timeout: float) -> bytes | None:
        try:
            return self.inbox.get(timeout=timeout) if timeout > 0 else self.inbox.get_nowait()
        except queue.Empty:
            return None

    def close(self) -> None:
        pass


def _packet(job_id: int, seq: int) -> bytes:
    return InaHeader(job_id=job_id, seq=seq, pbm=1, count=0, op=Op.SUM).pack()


def test_a_shared_transport_gives_each_job_its_own_packets() -> None:
    raw = FakeRaw()
    shared = SharedTransport(raw)
    views = {j: shared.view(j) for j in (5, 6)}
    for seq in range(200):
        raw.inbox.put(_packet(5 if seq % 3 else 6, seq))
    raw.inbox.put(_packet(9, 0))  # a job without a view: dropped

    def drain(job: int) -> list[int]:
        got = []
        while (p := views[job].recv(0.5)) is not None:
            got.append(InaHeader.unpack(p).seq)
        return got

    got = in_threads({"5": lambda: drain(5), "6": lambda: drain(6)})
    assert got["5"] == [s for s in range(200) if s % 3]
    assert got["6"] == [s for s in range(200) if not s % 3]
    assert shared.strays == 1
    with pytest.raises(ValueError, match="has a view"):
        shared.view(5)
    views[5].close()
    assert views[5].recv(0.1) is None and shared.jobs == [6]


def test_an_id_given_back_is_not_granted_again_at_once(figure1: Topology) -> None:
    # A late packet of the old job must not be taken for the new one's.
    svc = service(figure1)

    async def run() -> list[int]:
        ids = []
        for _ in range(3):
            g = await svc.handle("a", {"request": "deploy", "workers": ["w1", "w2"]})
            ids.append(g["job_id"])
            await svc.handle("a", {"request": "teardown", "job_id": g["job_id"]})
        return ids

    assert len(set(asyncio.run(run()))) == 3
