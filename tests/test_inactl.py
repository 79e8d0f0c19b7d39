"""inactl's offline commands and exit codes, and its switch commands on in-memory
switches (over P4Runtime they run in tests/bmv2)."""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ina.cli import inactl
from ina.errors import InputError, UsageError
from ina.lab.labstate import LabRecord
from ina.protocol.constants import AGG_SLOTS, Op
from ina.spec.job import JobSpec

from inatest import FIGURE1, FIGURE1_JOB, FIGURE1_SPEC, ModelLab


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


# --- the switch commands, on in-memory switches ---------------------------------------

@pytest.fixture
def deployed(model_lab: ModelLab, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModelLab:
    """Figure 1 on the reference model's in-memory switches with job 1 deployed, and
    inactl's switch commands talking to them (no P4Runtime, no compiled program)."""
    asyncio.run(model_lab.ctl.deploy(JobSpec.load(FIGURE1_JOB)))

    @contextlib.asynccontextmanager
    async def in_memory(args: Any, topology: Any, push: bool, access: Any
                        ) -> AsyncIterator[Any]:
        yield model_lab.stores

    monkeypatch.setattr(inactl, "_switches", in_memory)
    monkeypatch.setattr(inactl, "_check_program", lambda args: None)
    monkeypatch.setattr(LabRecord, "access", lambda self, insecure: None)  # no TLS
    monkeypatch.setenv("INA_RUN_DIR", str(tmp_path / "run"))  # no failures recorded
    return model_lab


def _jobs(lab: ModelLab) -> set[int]:
    return set(asyncio.run(lab.ctl.jobs()))


def test_teardown_takes_the_job_id_from_the_job_file(
        deployed: ModelLab, capsys: pytest.CaptureFixture[str]) -> None:
    assert _jobs(deployed) == {1}
    assert inactl.main(["-t", str(FIGURE1), "teardown", "--job", str(FIGURE1_JOB)]) == 0
    assert capsys.readouterr().out.startswith("job 1 removed from ")
    assert _jobs(deployed) == set()


def test_teardown_takes_a_job_id(deployed: ModelLab) -> None:
    assert inactl.main(["-t", str(FIGURE1), "teardown", "--job-id", "1"]) == 0
    assert _jobs(deployed) == set()


@pytest.mark.parametrize("argv", [[], ["--job", str(FIGURE1_JOB), "--job-id", "1"]],
                         ids=["neither", "both"])
def test_teardown_needs_a_job_file_or_a_job_id(argv: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        inactl.main(["-t", str(FIGURE1), "teardown", *argv])
    assert ended.value.code == 2
    assert "--job" in capsys.readouterr().err


def test_status_json_is_json_with_every_switch_and_the_job(
        deployed: ModelLab, capsys: pytest.CaptureFixture[str]) -> None:
    assert inactl.main(["-t", str(FIGURE1), "status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= set(deployed.topology.switches)
    assert doc["_jobs"] == {"1": {"on": "switches"}}
    assert doc["s6"]["jobs"]["1"]["role"] == "root"


def test_status_of_a_job_file_shows_only_its_job(
        deployed: ModelLab, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(deployed.ctl.deploy(JobSpec.from_dict({**FIGURE1_SPEC, "job_id": 2})))
    assert inactl.main(["-t", str(FIGURE1), "status", "--json", "--job",
                        str(FIGURE1_JOB)]) == 0
    assert set(json.loads(capsys.readouterr().out)["s6"]["jobs"]) == {"1"}


# --- JSON and -o - of the offline commands --------------------------------------------

def test_check_json_is_the_vat(capsys: pytest.CaptureFixture[str]) -> None:
    assert inactl.main(["-t", str(FIGURE1), "check", "--job", str(FIGURE1_JOB), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["root"] == "s6" and doc["planned"] is False
    assert doc["nodes"]["s6"]["abm"] == "11110000" and doc["nodes"]["s6"]["parent"] is None
    assert doc["nodes"]["s1"]["covers"] == ["w1", "w2"]
    assert doc["steered_to"]["w3"] == {"parent": "s7", "address": "10.0.100.7"}


def test_plan_json_is_the_planned_vat(capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("job_id: 3\nop: max\nworkers: [w1, w2, w3, w4]\n")
    assert inactl.main(["-t", str(FIGURE1), "plan", "--job", str(job), "--json",
                        "-o", str(tmp_path / "plan.yaml")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["planned"] is True and doc["link_crossings"] < doc["link_crossings_all_to_root"]
    assert yaml.safe_load((tmp_path / "plan.yaml").read_text()) == doc["explicit_job"]


def test_plan_o_dash_writes_the_job_file_on_stdout_and_the_summary_on_stderr(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert inactl.main(["-t", str(FIGURE1), "plan", "--job", str(FIGURE1_JOB), "-o", "-"]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["aggregators"] == {"s1": ["w1", "w2"], "s7": ["w3", "w4"]}
    assert "s6 A-BM 11110000" in err
    assert not (tmp_path / "-").exists()


def test_plan_refuses_json_and_the_job_file_both_on_stdout(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-t", str(FIGURE1), "plan", "--job", str(FIGURE1_JOB), "-o", "-", "--json"]
    assert inactl.main(argv) == UsageError.exit_code
    assert "both write to stdout" in capsys.readouterr().err


def test_bift_json_has_a_row_per_bfer(capsys: pytest.CaptureFixture[str]) -> None:
    assert inactl.main(["-t", str(FIGURE1), "bift", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["s7"]
    assert [r for r in rows if r["bfr_id"] == 5] == [
        {"bfr_id": 5, "port": 2, "neighbor": "s6", "fbm": "00001111", "fbm_hex": "0xf0"}]


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
