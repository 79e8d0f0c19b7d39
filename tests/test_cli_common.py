"""One error hierarchy with its exit codes mapped once, and what every CLI shares:
options that mean the same, --version, help with every default, shell completion,
INA_TOPOLOGY."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata
import inspect
import logging
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from ina import errors
from ina.cli import (
    baselines,
    common,
    inabench,
    inactl,
    inalab,
    inanet,
    inaroot,
    inaworker,
)

from inatest import FIGURE1, ROOT

CLIS = (inactl, inaworker, inalab, inaroot, inabench, inanet, baselines)
#: The installed commands (pyproject.toml's [project.scripts]): name -> module.
SCRIPTS = {name: target.partition(":")[0] for name, target in
           tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"].items()}
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


def _parsers(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """A parser and those of its subcommands, hidden ones included."""
    yield p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


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
        assert options["-t"] is options["--topology"]
    if "--build" in options:
        assert options["--build"].default == common.DEFAULT_BUILD


def test_every_cli_that_names_a_job_takes_it_as_job_file() -> None:
    with_job = [cli for cli in CLIS
                if any("--job" in a.option_strings for a in _actions(cli.parser()))]
    assert with_job == [inactl, inaworker, inalab, inaroot, inanet]


@pytest.mark.parametrize("flags,level", [([], logging.WARNING), (["-v"], logging.INFO),
                                         (["-vv"], logging.DEBUG)])
def test_v_is_info_and_vv_is_debug(flags: list[str], level: int) -> None:
    args = inactl.parser().parse_args([*flags, "-t", "x.yaml", "bift"])
    assert common.log_level(args.verbose) == level


# --- --version --------------------------------------------------------------------

def test_every_installed_command_is_one_of_the_clis_here() -> None:
    assert set(SCRIPTS.values()) <= {cli.__name__ for cli in CLIS}
    assert set(SCRIPTS) == {"inactl", "inaworker", "inalab", "inaroot", "inabench", "inanet"}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_version_prints_the_command_and_the_package_version(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    main = importlib.import_module(SCRIPTS[name]).main
    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    assert ended.value.code == 0
    assert capsys.readouterr().out == f"{name} {importlib.metadata.version('ina')}\n"


# --- help ---------------------------------------------------------------------------

def _shown(p: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.Action]]:
    """Every argument a person sees in the help of a parser or its subcommands, with
    the name of the parser it is in."""
    for sub in _parsers(p):
        for action in sub._actions:
            if action.help != argparse.SUPPRESS and not isinstance(
                    action, argparse._HelpAction | argparse._SubParsersAction):
                yield sub.prog, action


@pytest.mark.parametrize("cli", CLIS, ids=lambda m: m.__name__)
def test_every_argument_has_help_that_states_its_default(cli: ModuleType) -> None:
    for prog, action in _shown(cli.parser()):
        where = f"{prog} {'/'.join(action.option_strings) or action.dest}"
        assert action.help, f"{where} has no help"
        text = common.HelpFormatter(prog)._expand_help(action)
        if common.has_default(action):
            assert "default" in text, f"{where}: the help does not state the default"


@pytest.mark.parametrize("cli", CLIS, ids=lambda m: m.__name__)
def test_every_subcommand_has_a_description(cli: ModuleType) -> None:
    for p in _parsers(cli.parser()):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                listed = {a.dest: a.help for a in action._choices_actions}
                for name, sub in action.choices.items():
                    if name in listed:
                        assert listed[name] and sub.description == listed[name], name


def test_defaults_are_shown_in_the_help_beside_raw_descriptions() -> None:
    p = inactl.parser()
    text = p.format_help()
    assert "(default: 10.0)" in text  # --timeout
    assert "    inactl -t topologies/figure1.yaml init" in text  # the docstring, as written


# --- INA_TOPOLOGY -------------------------------------------------------------------

def test_the_topology_defaults_to_ina_topology(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(common.TOPOLOGY_ENV, str(FIGURE1))
    assert inactl.main(["bift"]) == 0
    assert "bfr-id   5 -> port 2 (s6)" in capsys.readouterr().out


def test_t_wins_over_ina_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(common.TOPOLOGY_ENV, "elsewhere.yaml")
    args = inactl.parser().parse_args(["-t", str(FIGURE1), "bift"])
    assert args.topology == FIGURE1


@pytest.mark.parametrize("cli,argv", [
    (inactl, ["bift"]),
    (inaworker, ["--job", "j.yaml", "--worker", "w1", "--values", "1"]),
    (inalab, ["exec", "--", "true"]),
    (inaroot, ["--job", "j.yaml", "--host", "w5"]),
], ids=lambda x: getattr(x, "__name__", ""))
def test_without_a_topology_the_error_names_t_and_ina_topology(
        cli: ModuleType, argv: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(common.TOPOLOGY_ENV, raising=False)
    with pytest.raises(SystemExit) as ended:
        cli.main(argv)
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "-t/--topology FILE" in err and common.TOPOLOGY_ENV in err


# --- shell completion ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_command_is_marked_for_global_completion(name: str) -> None:
    module = importlib.import_module(SCRIPTS[name])
    assert module.__file__ is not None
    with open(module.__file__, "rb") as f:  # argcomplete looks at the first 1024 bytes
        assert b"PYTHON_ARGCOMPLETE_OK" in f.read(1024)


@pytest.mark.parametrize("name,word,expected", [
    ("inactl", "d", {"deploy", "down"}),
    ("inabench", "d", {"deploy", "dataplane"}),
    ("inalab", "re", {"recover"}),
])
def test_completion_lists_the_subcommands_a_partial_word_starts(
        name: str, word: str, expected: set[str], tmp_path: Path) -> None:
    # What the shell function of `register-python-argcomplete NAME` does: run the
    # command with the line so far in COMP_LINE; the completions come back in a file.
    line = f"{name} {word}"
    out = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_SHELL": "bash",
           "COMP_LINE": line, "COMP_POINT": str(len(line)), "COMP_TYPE": "9",
           "_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_STDOUT_FILENAME": str(out)}
    done = subprocess.run([sys.executable, "-m", SCRIPTS[name]], env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert {w.strip() for w in out.read_text().split("\n") if w.strip()} == expected
