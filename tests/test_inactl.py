"""inactl's offline commands and exit codes (the switch commands run in tests/bmv2)."""

import asyncio
from pathlib import Path

import pytest

from ina.cli import inactl
from ina.errors import InputError
from ina.protocol.constants import AGG_SLOTS, Op
from ina.spec.job import JobSpec

from inatest import FIGURE1, FIGURE1_JOB, ModelLab


def test_check_prints_the_vat(capsys: pytest.CaptureFixture[str]) -> None:
    assert inactl.main(["-t", str(FIGURE1), "check", "--job", str(FIGURE1_JOB)]) == 0
    out = capsys.readouterr().out
    assert "s6 A-BM 11110000 (w1, w2, w3, w4) root" in out
    assert "s1 A-BM 11000000" in out and "w3 -> steered to 10.0.100.7" in out


def test_invalid_job_exits_2_with_the_problem(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("job_id: 1\nop: sum\nworkers: [w1, w9]\nroot: s6\n")
    assert inactl.main(["-t", str(FIGURE1), "check", "--job", str(job)]) == InputError.exit_code
    assert "worker 'w9' is not a host" in capsys.readouterr().err


def test_deploy_refuses_an_invalid_job_before_anything_else(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("job_id: 1\nop: sum\nworkers: [w1]\nroot: s9\n")
    # Neither a P4Info nor a switch exists: the job is refused before either is needed.
    assert inactl.main(["-t", str(FIGURE1), "--p4info", str(tmp_path / "none"), "deploy",
                     "--job", str(job)]) == InputError.exit_code
    assert "root 's9' is neither a switch nor a host" in capsys.readouterr().err


def test_bift_lists_a_row_per_bfer(capsys: pytest.CaptureFixture[str]) -> None:
    assert inactl.main(["-t", str(FIGURE1), "bift"]) == 0
    out = capsys.readouterr().out
    assert "bfr-id   5 -> port 2 (s6) F-BM 00001111" in out


def test_deploy_says_loudly_when_a_job_lands_on_its_hosts(
        model_lab: ModelLab, capsys: pytest.CaptureFixture[str]) -> None:
    for i, sw in enumerate(sorted(model_lab.topology.switches)):  # every slot taken
        asyncio.run(model_lab.ctl.deploy(JobSpec(100 + i, Op.SUM, ("w1", "w2"), sw, {},
                                                 AGG_SLOTS)))
    spec = JobSpec.load(FIGURE1_JOB)
    assert asyncio.run(inactl._deploy(model_lab.ctl, spec, None, fallback=True)) == 0
    out, err = capsys.readouterr()
    assert out.startswith("WARNING: job 1 runs on its hosts, not in the network")
    assert "WARNING: job 1 runs on its hosts" in err
