"""`inalab run` as a service: it ends every process it started (every
simple_switch_grpc, every host) and removes its state files on SIGTERM, SIGHUP and
SIGINT;
after a SIGKILL its sandbox ends by itself and the files it left block nothing; a
second run of a running topology is refused; exec and host reach the lab.

Each test starts `inalab run --no-cli` as a subprocess, with its own run directory
and the session's compiled program. Under `make test` its sandbox is nested in the
test run's. Run with `make test`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ina.errors import LabError
from ina.lab import sandbox
from ina.lab.labstate import LabRecord, SandboxProcess
from ina.lab.mininet import Lab, LabOptions, port_free, wait_until
from ina.spec.topology import Topology

from bmv2.bmv2lab import Labs
from inatest import FIGURE1, ROOT, pid_namespace, processes_in

STARTUP = 180.0  # seconds for seven switches to come up on two busy cores


@dataclass
class RunningLab:
    proc: subprocess.Popen[bytes]  # `inalab run`
    record: LabRecord
    sandbox: SandboxProcess
    namespace: str  # the sandbox's PID namespace
    output: Path

    def processes(self) -> list[int]:
        return processes_in(self.namespace)

    def switches(self) -> list[int]:
        return [p for p in self.processes() if _argv0(p) == "simple_switch_grpc"]


def _argv0(pid: int) -> str:
    try:
        return Path(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()).name
    except OSError:
        return ""


def _inalab(compiled: Path, run_dir: Path, *args: str, **popen: Any
            ) -> subprocess.Popen[bytes]:
    env = dict(os.environ, INA_RUN_DIR=str(run_dir))
    return subprocess.Popen(
        [sys.executable, "-m", "ina.cli.inalab", "-t", str(FIGURE1), "--build", str(compiled),
         *args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL, **popen)


def _start(compiled: Path, run_dir: Path) -> RunningLab:
    output = run_dir.parent / "inalab-run.out"
    with output.open("wb") as out:
        proc = _inalab(compiled, run_dir, "run", "--no-cli", stdout=out,
                       stderr=subprocess.STDOUT)
    record = LabRecord("figure1", run_dir)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"inalab run exited with {proc.returncode}:\n"
                                 + output.read_text())
        return record.hosts() is not None

    wait_until(up, STARTUP, "inalab run to record its lab as up")
    recorded = record.sandbox()
    assert recorded is not None
    namespace = pid_namespace(sandbox.init_pid(recorded.pid))
    assert namespace is not None
    lab = RunningLab(proc, record, recorded, namespace, output)
    assert len(lab.switches()) == 7, lab.output.read_text()
    return lab


@pytest.fixture
def compiled_alone(labs: Labs, compiled: Path) -> Path:
    """The compiled program, with the session's lab stopped: two cores, one lab."""
    labs.stop()
    return compiled


@pytest.fixture
def running(compiled_alone: Path, tmp_path: Path) -> Iterator[RunningLab]:
    lab = _start(compiled_alone, tmp_path / "run")
    yield lab
    if lab.proc.poll() is None:
        lab.proc.terminate()
        lab.proc.wait(timeout=120)


def _assert_all_gone(lab: RunningLab) -> None:
    wait_until(lambda: not lab.processes(), 60.0, "every process of the lab to end")
    assert not lab.record.pid_file.exists() and not lab.record.state_file.exists()
    assert not lab.record.tls_dir.exists()  # its private keys with it


# A SIGINT that no terminal sent reaches the lab as SIGTERM (see sandbox_init.py).
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                           (signal.SIGINT, 143)],
                         ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_signal_ends_every_process_of_the_lab_and_removes_its_state(
        running: RunningLab, sig: signal.Signals, code: int) -> None:
    running.proc.send_signal(sig)
    assert running.proc.wait(timeout=120) == code, running.output.read_text()
    _assert_all_gone(running)
    assert "Traceback" not in running.output.read_text()


def test_sigkill_of_inalab_run_ends_its_lab_by_itself_and_blocks_nothing(
        running: RunningLab, compiled_alone: Path, tmp_path: Path) -> None:
    running.proc.kill()
    running.proc.wait()
    wait_until(lambda: not running.processes(), 60.0, "every process of the lab to end")
    assert running.record.pid_file.exists()  # nobody was left to remove it ...
    # ... and nothing takes it for a running lab: exec says so and removes it.
    done = _inalab(compiled_alone, running.record.directory, "exec", "--", "true",
                   stderr=subprocess.PIPE)
    _, err = done.communicate(timeout=30)
    assert done.returncode == 2 and b"no lab of figure1 is running" in err
    assert not running.record.pid_file.exists() and not running.record.tls_dir.exists()


def test_a_second_run_of_a_running_topology_is_refused(
        running: RunningLab, compiled_alone: Path) -> None:
    second = _inalab(compiled_alone, running.record.directory, "run", "--no-cli",
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 2
    assert b"a lab of figure1 is already running" in err
    assert running.proc.poll() is None and running.record.sandbox() == running.sandbox


def test_exec_and_host_reach_the_running_lab(running: RunningLab,
                                             compiled_alone: Path) -> None:
    ping = _inalab(compiled_alone, running.record.directory, "host", "w1", "--",
                   "ping", "-c", "1", "-W", "5", "10.0.0.8", stdout=subprocess.PIPE)
    out, _ = ping.communicate(timeout=60)
    assert ping.returncode == 0 and b" 0% packet loss" in out, out
    status = _inalab(compiled_alone, running.record.directory, "exec", "--",
                     sys.executable, "-m", "ina.cli.inactl", "-t", str(FIGURE1),
                     "--p4info", str(compiled_alone / "ina.p4info.txtpb"), "status",
                     stdout=subprocess.PIPE)
    out, _ = status.communicate(timeout=60)
    assert status.returncode == 0 and b"s7 (" in out, out


def test_a_lab_that_fails_to_start_ends_its_switches_and_removes_its_credentials(
        compiled_alone: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Start fails at its last step, once every simple_switch_grpc runs and the
    # credentials' directory exists (CI: the next lab met those switches' keys).
    def no_job_service(lab: Lab) -> None:
        assert _switch_processes(), "the failure should come after the switches start"
        raise LabError("no job service")

    monkeypatch.setattr(Lab, "_start_job_service", no_job_service)
    _start_fails_leaving_nothing(
        Lab(Topology.load(FIGURE1), LabOptions(build_dir=compiled_alone,
                                               run_dir=tmp_path / "run")), "no job service")


def _start_fails_leaving_nothing(lab: Lab, match: str) -> None:
    """``lab.start()`` fails saying ``match``, with no switch of its own left running
    and its credentials removed."""
    before = set(_switch_processes())
    try:
        with pytest.raises(LabError, match=match):
            lab.start()
        assert set(_switch_processes()) <= before
        assert not lab.record.tls_dir.exists()
    finally:
        lab.stop()


def test_a_lab_whose_grpc_address_stays_taken_says_which_and_starts_nothing(
        compiled_alone: Path, tmp_path: Path) -> None:
    topology = Topology.load(FIGURE1)
    s3 = topology.switches["s3"]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", s3.grpc_port))
        holder.listen()
        _start_fails_leaving_nothing(
            Lab(topology, LabOptions(build_dir=compiled_alone, run_dir=tmp_path / "run",
                                     startup_timeout=3)),
            rf"still in use.*: s3 \({s3.grpc}\)")


def test_a_lab_waits_for_a_connection_that_holds_a_grpc_port_to_end(
        compiled_alone: Path, tmp_path: Path) -> None:
    # CI: a connection whose local port happened to be 50013 kept that switch of the
    # next lab from listening (simple_switch_grpc runs on without its gRPC server).
    topology = Topology.load(FIGURE1)
    s3 = topology.switches["s3"]
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.socket()
    client.bind(("127.0.0.1", s3.grpc_port))
    client.connect(server.getsockname())
    accepted, _ = server.accept()

    def end_the_connection() -> None:  # the server's end first: no TIME_WAIT on the port
        accepted.close()
        client.recv(1)
        client.close()
        server.close()

    timer = threading.Timer(1.0, end_the_connection)
    timer.start()
    lab = Lab(topology, LabOptions(build_dir=compiled_alone, run_dir=tmp_path / "run"))
    try:
        lab.start()
        assert not port_free(s3.grpc)  # s3's server listens there
        lab.init_switches_sync()  # and answers
    finally:
        timer.join()
        lab.stop()


def test_connections_in_the_lab_never_take_a_switchs_grpc_port(
        compiled_alone: Path, tmp_path: Path) -> None:
    # With the ephemeral range narrowed to the switches' ports and a few others, every
    # connection takes one of the others.
    topology = Topology.load(FIGURE1)
    grpc_ports = {spec.grpc_port for spec in topology.switches.values()}
    port_range = Path("/proc/sys/net/ipv4/ip_local_port_range")
    saved = port_range.read_text()
    lab = Lab(topology, LabOptions(build_dir=compiled_alone, run_dir=tmp_path / "run"))
    used = set()
    try:
        lab.start()
        lab.stop()  # the ports are free again, and still the switches'
        # Others: the next few ports no lab of this run has reserved.
        reserved = _reserved_ports()
        others = [p for p in range(max(grpc_ports) + 1, max(grpc_ports) + 200)
                  if p not in reserved][:8]
        with socket.create_server(("127.0.0.1", 0)) as server:
            port_range.write_text(f"{min(grpc_ports)} {max(others)}")
            for _ in range(16):
                with socket.create_connection(server.getsockname()) as client:
                    used.add(client.getsockname()[1])
                    server.accept()[0].close()  # first: no TIME_WAIT left on the ports
                    client.recv(1)
    finally:
        port_range.write_text(saved)
        lab.stop()
    assert used and not used & grpc_ports


def _reserved_ports() -> set[int]:
    ports: set[int] = set()
    for part in Path("/proc/sys/net/ipv4/ip_local_reserved_ports").read_text().split(","):
        if part.strip():
            low, _, high = part.strip().partition("-")
            ports.update(range(int(low), int(high or low) + 1))
    return ports


def _switch_processes() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and _argv0(int(p.name)) == "simple_switch_grpc"]
