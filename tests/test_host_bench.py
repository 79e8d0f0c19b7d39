"""inabench host: the worker beside a plain C loop against a compiled reflector, no
switch (ina.bench.host, ina.bench.hostloop)."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ina.bench import host, hostloop
from ina.bench.allreduce import HostRate, host_rate
from ina.cli import inabench
from ina.errors import UsageError
from ina.lab.mininet import wait_until
from ina.protocol.codec import ina_payload
from ina.protocol.constants import ELEMS_PER_PACKET, INA_UDP_PORT, Flag

pytestmark = pytest.mark.skipif(shutil.which("cc") is None,
                                reason="the C loop needs a C compiler: apt-get install gcc")


def test_the_reflector_answers_a_sync_with_reply_and_a_contribution_with_result() -> None:
    sync = bytearray(ina_payload(1, 0, 1, [0] * 4))
    sync[1] |= int(Flag.SYNC)
    contribution = ina_payload(1, 1, 1, [5] * 4)
    with hostloop.reflector(address="127.0.0.9") as address, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        for packet, flag in ((bytes(sync), Flag.REPLY), (contribution, Flag.RESULT)):
            sock.sendto(packet, (address, INA_UDP_PORT))
            answer, _ = sock.recvfrom(65535)
            assert answer[1] == packet[1] | int(flag)
            assert answer[2:] == packet[2:]


def test_the_c_loop_counts_every_result_and_its_cpu() -> None:
    rate = host.c_loop(500)
    assert rate.packets_per_s > 0
    assert rate.values_per_s == pytest.approx(rate.packets_per_s * ELEMS_PER_PACKET)
    assert rate.cpu_us_per_packet is not None and rate.cpu_us_per_packet > 0
    assert rate.kernel_us_per_packet is not None
    assert rate.kernel_us_per_packet <= rate.cpu_us_per_packet


def test_the_worker_reduces_against_the_reflector() -> None:
    rate = host_rate(20 * ELEMS_PER_PACKET)
    assert rate.packets_per_s > 0 and rate.cpu_us_per_packet is not None


def test_no_c_compiler_is_a_usage_error_saying_how_to_get_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(UsageError, match="apt-get install gcc"):
        hostloop.binary()


def _round(worker_pps: float, c_pps: float, worker_cpu: float, c_cpu: float
           ) -> dict[str, HostRate]:
    return {host.WORKER: HostRate(worker_pps, 1.0, 20.0), host.SHARED: HostRate(1.0, 1.0, 1.0),
            host.C_LOOP: HostRate(c_pps, 1.0, 4.0),
            host.PACED_WORKER: HostRate(1.0, 1.0, worker_cpu),
            host.PY_FLOOR: HostRate(1.0, 1.0, 30.0), host.PACED_C: HostRate(1.0, 1.0, c_cpu)}


def test_the_ratios_are_taken_round_by_round_with_the_worst_beside_the_median() -> None:
    figures = host.HostFigures([_round(100, 200, 30, 10), _round(150, 200, 20, 10),
                                _round(60, 100, 25, 10)], "cc 12")
    share = figures.ratio(lambda h: h.packets_per_s, host.WORKER, host.C_LOOP, higher=True)
    assert share == host.Spread(0.6, 0.5)
    batched, paced = figures.goals()
    assert batched.passed and "0.60x (worst 0.50x)" in batched.measured
    assert not paced.passed and "2.50x (worst 3.00x)" in paced.measured


def test_host_figures_read_back_are_the_figures_written() -> None:
    figures = host.HostFigures([_round(100, 200, 30, 10)], "cc 12")
    again = host.HostFigures.from_figures(json.loads(json.dumps(figures.figures())))
    assert again == figures
    assert again.render() == figures.render()


def test_inabench_host_runs_without_bmv2_and_writes_its_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "host.json"
    assert inabench.main(["host", "--rounds", "1", "--json-out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Measured: INA version")
    assert "worker vs C loop:" in text and "Goals of issue 48" in text
    doc = json.loads(out.read_text())
    assert set(doc["rounds"][0]) == {*host.BATCHED, *host.PACED}


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_inabench_host_stopped_by_sigterm_leaves_no_reflector_behind() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "ina.cli.inabench", "host", "--rounds", "3"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: bool(_children(proc.pid)), 60, "inabench host's first child")
        children = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_until(lambda: not any(_running(c) for c in children), 10, "its children to end")


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (ended, not yet reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
