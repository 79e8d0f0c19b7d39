"""The job service against hostile or unlucky clients: a teardown while the switches
cannot be reached keeps its grant for a retry, a requester that leaves then leaves an
orphan removed later, a line nested too deeply gets an error answer, one client that
never reads holds up no other client and no frame, an answer past a line's limit is
an error, the socket is never wider than 0600, and a forked child does not keep its
parent's jobs."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ina.control.controller import Controller
from ina.control.jobservice import JobService
from ina.errors import SwitchError
from ina.host.config import WorkerConfig
from ina.host.jobclient import JobClient
from ina.host.link import LinkTransport
from ina.host.worker import Worker
from ina.lab.mininet import wait_until
from ina.model.embedded import EmbeddedNetwork
from ina.model.harness import initialised_network
from ina.protocol.constants import Op
from ina.spec.jobservice import MAX_LINE, decode, encode
from ina.spec.topology import Topology

from inatest import FIGURE1, ROOT, in_threads, serving


class _Unreachable:
    """A controller whose switches do not answer while ``down``."""

    def __init__(self, ctl: Controller):
        self.ctl, self.down = ctl, False

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Controller]:
        if self.down:
            raise SwitchError("s1", "connection refused")
        yield self.ctl


def _service(topology: Topology) -> tuple[JobService, _Unreachable]:
    _, ctl = initialised_network(topology)
    switches = _Unreachable(ctl)
    return JobService(switches.open), switches


def test_a_teardown_the_switches_miss_keeps_its_grant_for_a_retry(figure1: Topology) -> None:
    svc, switches = _service(figure1)

    async def run() -> None:
        grant = await svc.handle("a", {"request": "deploy", "workers": ["w1", "w2"]})
        switches.down = True
        refused = await svc.handle("a", {"request": "teardown", "job_id": grant["job_id"]})
        assert "could not be removed now" in refused["error"] and "ask again" in refused["error"]
        switches.down = False
        again = await svc.handle("a", {"request": "teardown", "job_id": grant["job_id"]})
        assert again == {"removed_from": ["s1"]}
        assert (await svc.jobs()).deployed == ()

    asyncio.run(run())


def test_a_job_whose_requester_left_while_the_switches_were_away_is_removed_later(
        figure1: Topology) -> None:
    svc, switches = _service(figure1)

    async def run() -> None:
        grant = await svc.handle("a", {"request": "deploy", "workers": ["w1", "w2"]})
        switches.down = True
        assert await svc.release("a") == []
        assert svc.orphans.keys() == {grant["job_id"]}
        switches.down = False
        await svc.handle("b", {"request": "jobs"})  # any request tries the orphans first
        assert svc.orphans == {} and (await svc.jobs()).deployed == ()

    asyncio.run(run())


def test_an_orphans_id_is_not_granted_again_while_its_job_stands(figure1: Topology) -> None:
    svc, switches = _service(figure1)

    async def run() -> None:
        first = await svc.handle("a", {"request": "deploy", "workers": ["w1", "w2"]})
        switches.down = True
        await svc.release("a")
        assert first["job_id"] in svc.granted()

    asyncio.run(run())


def test_a_line_nested_too_deeply_is_not_a_request() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        decode(b"[" * 100_000)


def test_an_answer_past_a_lines_limit_is_an_error_that_says_so() -> None:
    line = encode({"request": "jobs", "deployed": list(range(MAX_LINE // 4))})
    assert len(line) <= MAX_LINE and "over the" in json.loads(line)["error"]


# --- on the embedded network -----------------------------------------------------------


@pytest.fixture
def network(figure1: Topology, tmp_path: Path) -> Iterator[EmbeddedNetwork]:
    yield from serving(EmbeddedNetwork(figure1, [], jobs_socket=tmp_path / "jobs.sock"))


def _ask(sock: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
    sock.sendall(json.dumps(request).encode() + b"\n")
    answer = b""
    while not answer.endswith(b"\n"):
        answer += sock.recv(65536)
    reply: dict[str, Any] = json.loads(answer)
    return reply


def _connect(net: EmbeddedNetwork) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    assert net.jobs_socket is not None
    sock.connect(str(net.jobs_socket))
    return sock


def test_a_deeply_nested_line_gets_an_error_and_the_client_keeps_its_jobs(
        network: EmbeddedNetwork) -> None:
    with _connect(network) as sock:
        grant = _ask(sock, {"request": "deploy", "workers": ["w1", "w2"]})
        sock.sendall(b"[" * 100_000 + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            answer += sock.recv(65536)
        assert "nested too deeply" in json.loads(answer)["error"]
        assert grant["job_id"] in _ask(sock, {"request": "jobs"})["deployed"]


def test_a_client_that_never_reads_holds_up_no_other_client_and_no_frame(
        network: EmbeddedNetwork) -> None:
    hog = _connect(network)
    request = json.dumps({"request": "jobs"}).encode() + b"\n"

    def flood() -> None:  # requests for ever, never an answer read
        with contextlib.suppress(OSError):
            while True:
                hog.sendall(request * 1000)

    threading.Thread(target=flood, daemon=True).start()
    time.sleep(1.0)  # let it fill what it can (a rate, not a condition to wait for)
    with _connect(network) as other:
        began = time.monotonic()
        grant = _ask(other, {"request": "deploy", "workers": ["w1", "w2"]})
        assert time.monotonic() - began < 5.0 and "job_id" in grant
        workers = {w: _worker(network, w, grant["job_id"], grant["slots"])
                   for w in ("w1", "w2")}
        outcomes = in_threads({w: functools.partial(workers[w][0].allreduce, np.arange(700))
                               for w in workers})
        for w, (_, link) in workers.items():
            link.close()
            outcome = outcomes[w]
            assert not isinstance(outcome, Exception), (w, outcome)
            assert np.array_equal(outcome.values, 2 * np.arange(700)), w
    hog.shutdown(socket.SHUT_RDWR)
    hog.close()


def _worker(net: EmbeddedNetwork, host: str, job_id: int, slots: int
            ) -> tuple[Worker, LinkTransport]:
    config = WorkerConfig.of(job_id, Op.SUM, ["w1", "w2"], slots, net.topology, host)
    link = LinkTransport(net.topology, host, net.endpoints, config.target)
    return Worker(config, link, timeout=10.0), link


def test_the_job_socket_is_born_0600_whatever_the_umask(
        figure1: Topology, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No chmod after the bind: a socket made wider and narrowed later was reachable
    # in between.
    monkeypatch.setattr(Path, "chmod", lambda *a, **k: None)
    old = os.umask(0)
    try:
        with EmbeddedNetwork(figure1, [], jobs_socket=tmp_path / "jobs.sock") as net:
            assert net.jobs_socket is not None
            assert net.jobs_socket.stat().st_mode & 0o777 == 0o600

        svc, _ = _service(figure1)

        async def serve() -> int:
            stop = asyncio.Event()
            path = tmp_path / "lab.sock"
            modes: list[int] = []

            def ready() -> None:
                modes.append(path.stat().st_mode & 0o777)
                stop.set()

            await svc.serve_unix(path, ready, stop)
            return modes[0]

        assert asyncio.run(serve()) == 0o600
    finally:
        os.umask(old)


def test_a_forked_child_does_not_keep_its_dead_parents_jobs(tmp_path: Path) -> None:
    # The parent holds a job and forks a child that lives on; the parent is killed.
    # The child closed its copy of the lease as it started: the job goes.
    script = tmp_path / "fork.py"
    script.write_text(f"""
import os, sys, time
sys.path.insert(0, {str(ROOT / 'controller')!r})
from ina.host.jobclient import JobClient
client = JobClient(sys.argv[1])
print(client.deploy(["w1", "w2"]).job_id, flush=True)
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
""")
    ports = tmp_path / "ports.json"
    sock = tmp_path / "jobs.sock"
    net = subprocess.Popen([sys.executable, "-m", "ina.cli.inanet", "-t", str(FIGURE1),
                            "--jobs-socket", str(sock), "--endpoints", str(ports)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert net.stdout is not None and net.stdout.readline()
        parent = subprocess.Popen([sys.executable, str(script), str(sock)],
                                  stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert parent.stdout is not None
        job_id, child = int(parent.stdout.readline()), int(parent.stdout.readline())
        with JobClient(sock) as watcher:
            assert job_id in watcher.jobs().deployed
            parent.kill()
            parent.wait()
            wait_until(lambda: job_id not in watcher.jobs().deployed, 10,
                       "the dead parent's job to go")
            os.kill(child, 0)  # the child lives on: it did not hold the lease
        os.kill(child, signal.SIGKILL)
    finally:
        net.terminate()
        net.communicate(timeout=20)

