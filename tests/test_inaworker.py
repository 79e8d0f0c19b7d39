"""inaworker off the worker's host: refused at once, with the command that runs it
there (on a lab's host it runs: tests/bmv2)."""

from __future__ import annotations

from typing import Any

import pytest

from ina.cli import inaworker
from ina.errors import UsageError
from ina.host.transport import is_local_address

from inatest import FIGURE1, FIGURE1_JOB


def test_an_address_of_this_machine_is_local() -> None:
    assert is_local_address("127.0.0.1")


def test_an_address_of_no_interface_here_is_not_local() -> None:
    assert not is_local_address("192.0.2.1")  # TEST-NET-1: nobody's


def test_inaworker_off_its_host_exits_2_before_sending_and_says_where_to_run_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert not is_local_address("10.0.0.1"), "this machine has w1's address of Figure 1"

    def no_socket(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("inaworker opened its socket")

    monkeypatch.setattr(inaworker, "UdpTransport", no_socket)
    argv = ["-t", str(FIGURE1), "--job", str(FIGURE1_JOB), "--worker", "w1", "--random", "8"]
    assert inaworker.main(argv) == UsageError.exit_code
    err = capsys.readouterr().err
    assert "w1 is not on this machine: no interface here has its address 10.0.0.1" in err
    lab_line = next(line for line in err.splitlines() if "inalab" in line)
    assert lab_line.strip().startswith(f"inalab -t {FIGURE1} host w1 -- ")
    assert lab_line.rstrip().endswith(" ".join(argv))
    assert err.rstrip().endswith(" ".join([*argv, "--embedded", "ports.json"]))


_BASE = ["-t", str(FIGURE1), "--job", str(FIGURE1_JOB), "--worker", "w1"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--collective", "barrier", "--random", "8"], "a barrier takes no array"),
    (["--collective", "broadcast"], "broadcast needs an array"),
    (["--collective", "allgather", "--root", "1", "--random", "8"],
     "--root is for reduce and broadcast, not allgather"),
    (["--collective", "reduce", "--root", "4", "--random", "8"],
     "--root 4 is not a rank of the job (0..3)"),
    (["--collective", "broadcast", "--width", "16", "--random", "8"],
     "--width is for the reductions"),
    (["--collective", "allgather", "--op", "max", "--random", "8"],
     "--op is for the reductions"),
])
def test_inaworker_refuses_options_its_collective_has_no_use_for(
        extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert inaworker.main([*_BASE, *extra]) == UsageError.exit_code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_inaworker_refuses_a_width_it_cannot_carry(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        inaworker.main([*_BASE, "--random", "8", "--width", "8"])
    assert exc.value.code == 2
    assert "invalid choice: 8" in capsys.readouterr().err
