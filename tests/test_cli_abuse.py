"""Every CLI against hostile input: exit 2 with a message, nothing allocated, sent or
half done first, no file of the user's deleted or overwritten, and no other
network's socket taken over."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ina.cli import inactl, inalab, inaworker
from ina.host.jobclient import JobClient

from inatest import FIGURE1, FIGURE1_JOB

WORKER = ["-t", str(FIGURE1), "--job", str(FIGURE1_JOB), "--worker", "w1"]


def _refused(main: object, argv: list[str]) -> str:
    """``main(argv)``'s stderr, once it exited 2 without a traceback."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)  # type: ignore[operator]
    text = err.getvalue()
    assert code == 2, text
    assert "Traceback" not in text and text.strip()
    return text


@pytest.mark.parametrize(("extra", "says"), [
    (["--random", "-5"], "--random -5: give a size from 1"),
    (["--random", "3000000000"], "--random 3000000000: give a size from 1"),
    (["--random", "10", "--timeout", "0"], "--timeout 0: give a positive number"),
    (["--random", "10", "--timeout", "-1"], "--timeout -1: give a positive number"),
    (["--random", "10", "--rto", "nan"], "--rto nan: give a positive number"),
])
def test_inaworker_refuses_an_option_no_call_can_take(extra: list[str], says: str) -> None:
    began = time.monotonic()
    assert says in _refused(inaworker.main, [*WORKER, *extra, "--embedded", "/nonexistent"])
    assert time.monotonic() - began < 5.0  # nothing allocated: 12 GB would take longer


def test_inaworker_refuses_an_output_into_a_missing_folder_before_the_call(
        tmp_path: Path) -> None:
    out = tmp_path / "missing" / "result.npy"
    says = _refused(inaworker.main, [*WORKER, "--random", "10", "--output", str(out),
                                     "--embedded", "/nonexistent"])
    assert f"no folder {out.parent}" in says


def test_inaworker_refuses_a_float64_input_to_a_reduction(tmp_path: Path) -> None:
    array = tmp_path / "x.npy"
    np.save(array, np.arange(5, dtype=np.float64))
    says = _refused(inaworker.main, [*WORKER, "--input", str(array), "--embedded",
                                     "/nonexistent"])
    assert "float64" in says and "convert it first" in says


def test_a_grpc_port_past_65535_is_refused(tmp_path: Path) -> None:
    topology = tmp_path / "t.yaml"
    topology.write_text(FIGURE1.read_text().replace("127.0.0.1:50001", "127.0.0.1:70001"))
    assert "port 70001 is not from 1 to 65535" in _refused(inactl.main,
                                                            ["-t", str(topology), "bift"])


def test_a_run_directory_that_is_a_file_is_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    afile = tmp_path / "run"
    afile.write_text("mine\n")
    monkeypatch.setenv("INA_RUN_DIR", str(afile))
    assert "is not a folder" in _refused(inalab.main, ["-t", str(FIGURE1), "fail", "switch",
                                                       "s1"])
    assert afile.read_text() == "mine\n"


# --- inanet -----------------------------------------------------------------------------


def _inanet(*extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ina.cli.inanet", "-t", str(FIGURE1),
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _refused_inanet(*extra: str) -> str:
    proc = _inanet(*extra)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    assert "Traceback" not in err
    return err


@contextlib.contextmanager
def _serving(*extra: str) -> Iterator[subprocess.Popen[str]]:
    proc = _inanet(*extra)
    try:
        assert proc.stdout is not None and proc.stdout.readline()
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


def test_inanet_does_not_replace_a_file_given_as_its_jobs_socket(tmp_path: Path) -> None:
    mine = tmp_path / "notes.txt"
    mine.write_text("keep me\n")
    assert "is not a socket: it is not replaced" in _refused_inanet("--jobs-socket", str(mine))
    assert mine.read_text() == "keep me\n"


def test_a_second_inanet_does_not_take_over_a_served_socket(tmp_path: Path) -> None:
    sock = tmp_path / "jobs.sock"
    with _serving("--jobs-socket", str(sock)):
        assert "another process serves" in _refused_inanet("--jobs-socket", str(sock))
        with JobClient(sock) as client:  # the first still answers
            assert client.jobs().deployed == ()


def test_inanet_takes_the_socket_a_dead_network_left(tmp_path: Path) -> None:
    sock = tmp_path / "jobs.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock))
    stale.close()  # a socket file nobody serves
    with _serving("--jobs-socket", str(sock)), JobClient(sock) as client:
        assert client.jobs().deployed == ()


def test_inanet_does_not_overwrite_an_endpoints_file(tmp_path: Path) -> None:
    mine = tmp_path / "ports.json"
    mine.write_text("{}\n")
    assert "exists: it is not overwritten" in _refused_inanet("--endpoints", str(mine))
    assert mine.read_text() == "{}\n"


def test_inanet_removes_at_exit_only_the_endpoints_file_it_wrote(tmp_path: Path) -> None:
    ports = tmp_path / "ports.json"
    with _serving("--endpoints", str(ports)):
        assert json.loads(ports.read_text())["ports"]
    assert not ports.exists()


@pytest.mark.parametrize("option", ["--jobs-socket", "--endpoints"])
def test_inanet_refuses_a_path_in_a_missing_folder(tmp_path: Path, option: str) -> None:
    path = tmp_path / "missing" / "x"
    assert f"no folder {path.parent}" in _refused_inanet(option, str(path))


def test_inanet_refuses_an_address_it_cannot_bind() -> None:
    assert "cannot bind the hosts' ports on --address 203.0.113.7" in _refused_inanet(
        "--address", "203.0.113.7")
