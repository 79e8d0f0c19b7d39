"""The failure commands refuse what does not name a switch or link of the topology,
with exit code 2, before anything is recorded or touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from ina.cli import inactl, inalab
from ina.errors import UsageError
from ina.lab.labstate import LabRecord

from inatest import ROOT

LEAF_SPINE = str(ROOT / "topologies" / "leaf-spine-2x4.yaml")


@pytest.fixture(autouse=True)
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INA_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


@pytest.mark.parametrize("fail", [["switch", "nope"], ["link", "leaf1", "leaf2"],
                                  ["router", "spine1"], ["switch"], ["link", "leaf1"]])
def test_a_demo_failure_that_is_no_element_of_the_topology_exits_2(
        fail: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-t", LEAF_SPINE, "demo", "--job", str(ROOT / "jobs" / "leaf-spine-sum.yaml"),
            "--fail", *fail]
    assert inalab.main(argv) == UsageError.exit_code
    assert "--fail takes 'switch NAME' or 'link A B'" in capsys.readouterr().err


@pytest.mark.parametrize("words", [["switch", "nope"], ["switch", "spine1", "spine2"],
                                   ["link", "leaf1"], ["link", "leaf1", "leaf1"]])
def test_inalab_fail_of_no_element_exits_2(words: list[str]) -> None:
    assert inalab.main(["-t", LEAF_SPINE, "fail", *words]) == UsageError.exit_code


def test_inalab_fail_without_a_running_lab_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert inalab.main(["-t", LEAF_SPINE, "fail", "switch", "spine1"]) == UsageError.exit_code
    assert "no lab of leaf-spine-2x4 is running" in capsys.readouterr().err


@pytest.mark.parametrize("words", [["switch", "nope"], ["link", "leaf1", "leaf2"],
                                   ["link", "leaf1"], ["switch", "spine1", "spine2"]])
def test_inactl_down_of_no_element_exits_2_and_records_nothing(
        words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert inactl.main(["-t", LEAF_SPINE, "down", *words]) == UsageError.exit_code
    assert capsys.readouterr().err.strip()
    assert not LabRecord("leaf-spine-2x4").failures_file.exists()


def test_inactl_down_of_an_unknown_switch_names_it_and_lists_the_switches(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert inactl.main(["-t", LEAF_SPINE, "down", "switch", "spine9"]) == UsageError.exit_code
    err = capsys.readouterr().err
    assert ("spine9 is no switch in topology leaf-spine-2x4; its switches: leaf1, leaf2, "
            "leaf3, leaf4, spine1, spine2") in err
    assert "invalid topology" not in err


def test_inactl_up_of_a_link_that_does_not_exist_names_where_its_end_leads(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert inactl.main(["-t", LEAF_SPINE, "up", "link", "leaf1", "leaf2"]) == UsageError.exit_code
    assert ("no link joins leaf1 and leaf2 in topology leaf-spine-2x4; leaf1's links go to "
            "h1_1, h1_2, spine1, spine2") in capsys.readouterr().err
