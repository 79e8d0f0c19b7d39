"""The embedded network: the reference model served on the loopback, one UDP port per
host; real workers reach it through their host's link (LinkTransport)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from ina.errors import LabError
from ina.host.arrays import random_array
from ina.host.config import WorkerConfig
from ina.host.link import LinkTransport
from ina.host.worker import Worker
from ina.lab.mininet import wait_until
from ina.model.embedded import EmbeddedNetwork, spawn
from ina.model.network import Impairment
from ina.protocol.constants import ELEMS_PER_PACKET, JobStat
from ina.protocol.frames import udp_frame
from ina.spec.job import JobSpec
from ina.spec.topology import Topology

from inatest import FIGURE1, FIGURE1_JOB, in_threads, serving

SPEC = JobSpec.load(FIGURE1_JOB)


@pytest.fixture
def embedded(figure1: Topology) -> Iterator[EmbeddedNetwork]:
    yield from serving(EmbeddedNetwork(figure1, [SPEC]))


def worker_on(net: EmbeddedNetwork, host: str, timeout: float = 10.0
              ) -> tuple[Worker, LinkTransport]:
    config = WorkerConfig.from_files(FIGURE1, FIGURE1_JOB, host)
    transport = LinkTransport(net.topology, host, net.endpoints, config.target)
    return Worker(config, transport, timeout=timeout), transport


def arrays(size: int) -> dict[str, npt.NDArray[np.int32]]:
    rng = np.random.default_rng(1)
    return {w: rng.integers(-(2**20), 2**20, size, dtype=np.int32) for w in SPEC.workers}


def allreduce_everywhere(net: EmbeddedNetwork, inputs: dict[str, npt.NDArray[np.int32]]
                         ) -> dict[str, npt.NDArray[Any]]:
    """Every worker's result of one call, each worker in a thread on its own link."""
    workers = {w: worker_on(net, w) for w in inputs}

    def call(w: str) -> Callable[[], npt.NDArray[Any]]:
        return lambda: workers[w][0].allreduce(inputs[w]).values

    outcomes = in_threads({w: call(w) for w in inputs})
    for _, transport in workers.values():
        transport.close()
    results = {}
    for w, outcome in outcomes.items():
        assert not isinstance(outcome, Exception), f"{w}: {outcome}"
        results[w] = outcome
    return results


def test_every_host_gets_a_port_of_its_own(embedded: EmbeddedNetwork) -> None:
    ports = embedded.endpoints.ports
    assert sorted(ports) == sorted(embedded.topology.hosts)
    assert len(set(ports.values())) == len(ports)


def test_workers_on_their_links_get_the_exact_sum(embedded: EmbeddedNetwork) -> None:
    inputs = arrays(3000)
    outcomes = allreduce_everywhere(embedded, inputs)
    expected = sum(a.astype(np.int64) for a in inputs.values())
    for w in SPEC.workers:
        assert np.array_equal(outcomes[w], expected), w


def test_the_switches_aggregate_what_the_links_carry(embedded: EmbeddedNetwork) -> None:
    size = 2560
    allreduce_everywhere(embedded, arrays(size))
    status = asyncio.run(embedded.controller.status())
    # Figure 1: s1 aggregates w1 and w2, s7 w3 and w4, s6 (the root) s1's and s7's
    # results: two contributions each per packet of the call (its descriptor, its array).
    packets = 1 + -(-size // ELEMS_PER_PACKET)
    for switch in ("s1", "s7", "s6"):
        assert status[switch].job_stats[1][JobStat.ABSORBED].packets == 2 * packets, switch


def test_a_restarted_worker_takes_its_link_over(embedded: EmbeddedNetwork) -> None:
    _, first = worker_on(embedded, "w1")
    first.close()  # its process ended
    inputs = arrays(600)
    outcomes = allreduce_everywhere(embedded, inputs)
    expected = sum(a.astype(np.int64) for a in inputs.values())
    assert np.array_equal(outcomes["w1"], expected)


def test_frames_for_a_host_nobody_listens_on_are_dropped_and_counted(
        embedded: EmbeddedNetwork) -> None:
    topo = embedded.topology
    w1, w5 = topo.hosts["w1"], topo.hosts["w5"]
    edge, _ = topo.host_attachment("w1")
    frame = udp_frame(w1.mac, topo.switches[edge].mac, w1.ip, w5.ip, 4000, 4000, b"hello")
    _, link = worker_on(embedded, "w1")
    with link:
        link.sock.send(frame)
        wait_until(lambda: embedded.stats.undelivered == 1, 10, "the frame to reach w5")
    assert embedded.stats.frames_out == 0


def test_a_second_process_claiming_a_held_link_is_refused(embedded: EmbeddedNetwork) -> None:
    _, first = worker_on(embedded, "w1")
    with first, pytest.raises(LabError, match="w1's link is held by another process"):
        worker_on(embedded, "w1")
    assert embedded.stats.refused_claims == 1


def test_a_stranger_on_a_held_link_is_dropped_and_gets_nothing(
        embedded: EmbeddedNetwork) -> None:
    topo = embedded.topology
    w1 = topo.hosts["w1"]
    edge, _ = topo.host_attachment("w1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.setblocking(False)
        frame = udp_frame(w1.mac, topo.switches[edge].mac, w1.ip, topo.hosts["w2"].ip,
                          4000, 4000, b"as w1")
        stranger.sendto(frame, embedded.endpoints.of("w1"))
        inputs = arrays(3000)
        outcomes = allreduce_everywhere(embedded, inputs)  # w1 claimed while it ran
        stranger.sendto(frame, embedded.endpoints.of("w1"))
        wait_until(lambda: embedded.stats.strangers == 2, 10, "the stranger's frames")
        with pytest.raises(BlockingIOError):
            stranger.recv(65535)  # not one of w1's results
    expected = sum(a.astype(np.int64) for a in inputs.values())
    assert np.array_equal(outcomes["w1"], expected)


def test_lost_frames_are_recovered_on_the_embedded_network(figure1: Topology) -> None:
    for net in serving(EmbeddedNetwork(figure1, [SPEC], impairment=Impairment(loss=0.02,
                                                                               seed=3))):
        inputs = arrays(5000)
        outcomes = allreduce_everywhere(net, inputs)
        expected = sum(a.astype(np.int64) for a in inputs.values())
        for w in SPEC.workers:
            assert np.array_equal(outcomes[w], expected), w


def test_a_spawned_network_ends_with_its_parent_pipe() -> None:
    net = spawn(FIGURE1, [FIGURE1_JOB])
    assert sorted(net.endpoints.ports) == sorted(Topology.load(FIGURE1).hosts)
    net.close()
    assert net.process.returncode == 0


def test_inanet_prints_its_ports_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "ina.cli.inanet", "-t", str(FIGURE1),
                             "--job", str(FIGURE1_JOB)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ports = json.loads(proc.stdout.readline())["ports"]
    assert sorted(ports) == sorted(Topology.load(FIGURE1).hosts)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["jobs"] == [1]


def test_inanet_refuses_a_bad_job_file_with_one_message(tmp_path: Path) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("job_id: 1\nop: sum\nworkers: [w1, w99]\n")
    proc = subprocess.run([sys.executable, "-m", "ina.cli.inanet", "-t", str(FIGURE1),
                           "--job", str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "w99" in proc.stderr and "Traceback" not in proc.stderr


def test_inaworker_runs_on_the_embedded_network(tmp_path: Path) -> None:
    ports = tmp_path / "ports.json"
    net = subprocess.Popen([sys.executable, "-m", "ina.cli.inanet", "-t", str(FIGURE1),
                            "--job", str(FIGURE1_JOB), "--endpoints", str(ports)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert net.stdout is not None and net.stdout.readline()  # up: the ports are written
        workers = {w: subprocess.Popen(
            [sys.executable, "-m", "ina.cli.inaworker", "-t", str(FIGURE1), "--job",
             str(FIGURE1_JOB), "--worker", w, "--values", f"{i},{10 * i}", "--embedded",
             str(ports)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i, w in enumerate(SPEC.workers, start=1)}
        for w, proc in workers.items():
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, (w, err)
            assert json.loads(out.splitlines()[-1])["values"] == 2
    finally:
        net.send_signal(signal.SIGTERM)
        net.communicate(timeout=20)
    assert not ports.exists()  # removed when inanet ends


def test_inaworker_makes_the_collective_it_is_told_with_its_root_and_width(
        tmp_path: Path) -> None:
    ports = tmp_path / "ports.json"
    net = subprocess.Popen([sys.executable, "-m", "ina.cli.inanet", "-t", str(FIGURE1),
                            "--job", str(FIGURE1_JOB), "--endpoints", str(ports)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    calls = [("reduce-scatter", ["--random", "1000", "--width", "16"]),
             ("broadcast", ["--random", "300", "--root", "2"])]
    try:
        assert net.stdout is not None and net.stdout.readline()
        for collective, extra in calls:
            workers = {w: subprocess.Popen(
                [sys.executable, "-m", "ina.cli.inaworker", "-t", str(FIGURE1), "--job",
                 str(FIGURE1_JOB), "--worker", w, "--collective", collective, "--seed", str(i),
                 "--embedded", str(ports), "--output", str(tmp_path / f"{w}.npy"), *extra],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i, w in enumerate(SPEC.workers)}
            for w, proc in workers.items():
                out, err = proc.communicate(timeout=60)
                assert proc.returncode == 0, (collective, w, err)
                assert json.loads(out.splitlines()[-1])["collective"] == collective
            results = [np.load(tmp_path / f"{w}.npy") for w in SPEC.workers]
            if collective == "reduce-scatter":  # 16-bit elements: sums of 16-bit values
                whole = sum(random_array(1000, i, 16).astype(np.int64) for i in range(4))
                assert [r.dtype for r in results] == [np.int16] * 4
                assert np.array_equal(np.concatenate(results), whole)
            elif collective == "broadcast":
                assert all(np.array_equal(r, random_array(300, 2)) for r in results)
    finally:
        net.send_signal(signal.SIGTERM)
        net.communicate(timeout=20)


def test_inaworker_as_a_host_another_process_holds_exits_saying_so(
        embedded: EmbeddedNetwork, tmp_path: Path) -> None:
    # The held link is taken here, not by a first inaworker: one that finished would
    # have let it go, and the second would rightly run (and wait for peers long gone).
    ports = tmp_path / "ports.json"
    ports.write_text(embedded.endpoints.to_json())
    _, first = worker_on(embedded, "w1")
    with first:
        proc = subprocess.run(
            [sys.executable, "-m", "ina.cli.inaworker", "-t", str(FIGURE1), "--job",
             str(FIGURE1_JOB), "--worker", "w1", "--values", "1", "--embedded", str(ports),
             "--output", str(tmp_path / "w1.npy")],
            capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "w1's link is held by another process" in proc.stderr
    assert not (tmp_path / "w1.npy").exists()
    assert embedded.stats.refused_claims == 1


def test_inaworker_off_its_host_says_how_to_run_it_on_the_embedded_network() -> None:
    proc = subprocess.run([sys.executable, "-m", "ina.cli.inaworker", "-t", str(FIGURE1),
                           "--job", str(FIGURE1_JOB), "--worker", "w1", "--values", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "inalab" in proc.stderr and "--embedded ports.json" in proc.stderr
