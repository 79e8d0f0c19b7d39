"""One error hierarchy with its exit codes mapped once, and options that mean the same
in every CLI."""

from __future__ import annotations

import argparse
import ast
import inspect
import logging
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from ina import errors
from ina.cli import baselines, common, inabench, inactl, inalab, inaroot, inaworker

from inatest import ROOT

CLIS = (inactl, inaworker, inalab, inaroot, inabench, baselines)
ERRORS = [c for _, c in inspect.getmembers(errors, inspect.isclass)
          if c.__module__ == errors.__name__]


def test_every_error_class_is_an_ina_error_with_an_exit_code_the_clis_explain() -> None:
    assert len(ERRORS) > 10
    for cls in ERRORS:
        assert issubclass(cls, errors.InaError), cls
        assert cls.exit_code in errors.EXIT_MEANINGS and cls.exit_code != 0, cls


def test_input_errors_exit_2_failures_3_and_a_p4info_mismatch_4() -> None:
    for invalid in (errors.TopologyError, errors.JobError, errors.PlanError,
                    errors.CapacityError, errors.UsageError):
        assert invalid.exit_code == 2, invalid
    for cls in (errors.SwitchError, errors.ControllerError, errors.DeployError,
                errors.AllreduceError, errors.AllreduceTimeout, errors.CallMismatch,
                errors.LabError):
        assert cls.exit_code == 3, cls
    assert errors.P4InfoError.exit_code == 4


def test_no_exception_class_is_defined_outside_ina_errors() -> None:
    package = ROOT / "controller" / "ina"
    for path in package.rglob("*.py"):
        if path.name == "errors.py" and path.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b) for b in node.bases}
                assert not any(b.endswith(("Error", "Exception", "Timeout", "Mismatch"))
                               for b in bases), f"{path}: class {node.name}({bases})"


@pytest.mark.parametrize("error", [
    errors.JobError(["worker 'w9' is not a host"], "job.yaml"),
    errors.SwitchError("s1", "no P4Runtime answer"),
    errors.P4InfoError("the P4Info does not match this controller"),
    errors.CallMismatch("the workers do not make the same call"),
])
def test_run_prints_the_message_and_returns_the_class_exit_code(
        error: errors.InaError, capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> int:
        raise error

    assert common.run("inatest", body) == type(error).exit_code
    assert capsys.readouterr().err == f"inatest: {error}\n"


def _actions(p: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """Every option of a parser and of its subcommands."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _actions(sub)
        else:
            yield action


@pytest.mark.parametrize("cli", CLIS, ids=lambda m: m.__name__)
def test_shared_options_mean_the_same_in_every_cli(cli: ModuleType) -> None:
    p = cli.parser()
    options = {o: a for a in _actions(p) for o in a.option_strings}
    assert isinstance(options["-v"], argparse._CountAction)
    assert options["-v"] is options["--verbose"]
    for name in ("--job", "--topology", "--build"):
        if name in options:
            assert options[name].type is Path, (name, options[name])
    if "--topology" in options:
        assert options["-t"] is options["--topology"] and options["-t"].required
    if "--build" in options:
        assert options["--build"].default == common.DEFAULT_BUILD


def test_every_cli_that_names_a_job_takes_it_as_job_file() -> None:
    with_job = [cli for cli in CLIS
                if any("--job" in a.option_strings for a in _actions(cli.parser()))]
    assert with_job == [inactl, inaworker, inalab, inaroot]


@pytest.mark.parametrize("flags,level", [([], logging.WARNING), (["-v"], logging.INFO),
                                         (["-vv"], logging.DEBUG)])
def test_v_is_info_and_vv_is_debug(flags: list[str], level: int) -> None:
    args = inactl.parser().parse_args([*flags, "-t", "x.yaml", "bift"])
    assert common.log_level(args.verbose) == level
