"""Bad job and topology files, given to every CLI: exit code 2 and one message per
problem on stderr, never a traceback (property tests over malformed documents),
and a few named cases, each reported once.

The documents: random YAML values, a valid file with keys removed, added, renamed
or given values of the wrong type or nesting, non-mapping documents, binary
garbage, empty files and duplicate keys. Each CLI's ``main()`` runs in-process.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ina.cli import inactl, inalab, inaroot, inaworker
from ina.errors import InputError, P4InfoError

from inatest import FIGURE1, FIGURE1_JOB

INVALID = InputError.exit_code
P4INFO = P4InfoError.exit_code

VALID_JOB: dict[str, Any] = yaml.safe_load(FIGURE1_JOB.read_text())
PLANNED_JOB: dict[str, Any] = {"job_id": 3, "op": "max", "workers": ["w1", "w5", "w8"]}
VALID_TOPOLOGY: dict[str, Any] = yaml.safe_load(FIGURE1.read_text())
EXAMPLES = settings(suppress_health_check=[HealthCheck.too_slow])  # profile: conftest.py

# --- documents ---------------------------------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["sum", "avg", "s1", "w1", "w9", "s6", "16", "x", "", "10.0.0.1",
                     "s1:1", "00:00:00:00:00:01", "127.0.0.1:50001"]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers(-3, 3)), inner,
                        max_size=4),
    ),
    max_leaves=12,
)


@st.composite
def _mutated(draw: st.DrawFn, valid: dict[str, Any]) -> Any:
    """``valid`` with one to three changes at random places: a key removed, added or
    renamed, a value replaced by a random one or wrapped in a list or mapping."""
    doc: Any = yaml.safe_load(yaml.safe_dump(valid))  # a deep copy
    for _ in range(draw(st.integers(1, 3))):
        parent: Any = None
        key: Any = None
        node = doc
        while isinstance(node, (dict, list)) and node and draw(st.booleans()):
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            parent, key = node, draw(st.sampled_from(keys))
            node = node[key]
        change = draw(st.sampled_from(["remove", "add", "rename", "replace", "wrap-list",
                                       "wrap-map"]))
        if parent is None:
            if change in ("wrap-list", "wrap-map"):
                doc = [doc] if change == "wrap-list" else {"job": doc}
            elif isinstance(doc, dict):
                doc[draw(st.text(min_size=1, max_size=8))] = draw(_values)
            continue
        if change == "remove":
            del parent[key]
        elif change == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(_values)
        elif change == "rename" and isinstance(parent, dict):
            parent[f"{key}x"] = parent.pop(key)
        elif change == "wrap-list":
            parent[key] = [node]
        elif change == "wrap-map":
            parent[key] = {"value": node}
        else:
            parent[key] = draw(_values)
    return doc


def _dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc, allow_unicode=True).encode()


@st.composite
def _duplicate_key(draw: st.DrawFn, valid: dict[str, Any]) -> bytes:
    """The valid document with one of its lines repeated: a key given twice."""
    lines = yaml.safe_dump(valid).splitlines()
    keyed = [i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("-")]
    i = draw(st.sampled_from(keyed))
    return "\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:]).encode() + b"\n"


def _documents(valid: dict[str, Any]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        _values.map(_dump),  # random YAML values, mappings or not
        _mutated(valid).map(_dump),
        _duplicate_key(valid),
        st.binary(max_size=64),
        st.sampled_from([b"", b"\n", b"# nothing\n", b"---\n", b"...\n", b"[", b"{a: 1",
                         b"a: [1, 2", b"\t- x", b"!!python/object:os.system {}\n",
                         b"a: &x [*x]\n", b"? [1, 2]\n: x\n", b"\xff\xfe\x00"]),
    )


# --- running a CLI -------------------------------------------------------------------

@contextlib.contextmanager
def _captured() -> Iterator[io.StringIO]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        yield err


def _run(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str]:
    with _captured() as err:
        code = main(argv)
    return code, err.getvalue()


def _assert_refused_clearly(code: int, stderr: str, allowed: set[int]) -> None:
    assert code in allowed, stderr
    assert "Traceback" not in stderr
    if code != 0:
        assert stderr.strip(), "no message on stderr"
        problems = [line for line in stderr.splitlines() if line.startswith("  - ")]
        assert len(problems) == len(set(problems)), f"a problem reported twice:\n{stderr}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Module-scoped: hypothesis runs many examples in one test call. Removed after the
    # module (pytest's retention policy keeps only function-scoped directories away).
    path = tmp_path_factory.mktemp("bad-input")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _write(workdir: Path, name: str, content: bytes) -> Path:
    path = workdir / name
    path.write_bytes(content)
    return path


def _valid_job(path: Path) -> bool:
    return inactl.main(["-t", str(FIGURE1), "check", "--job", str(path)]) == 0


def _valid_topology(path: Path) -> bool:
    return inactl.main(["-t", str(path), "bift"]) == 0


# --- job documents -------------------------------------------------------------------

@EXAMPLES
@given(_documents(VALID_JOB) | _mutated(PLANNED_JOB).map(_dump))
def test_inactl_check_and_plan_refuse_a_bad_job_with_exit_2(workdir: Path, doc: bytes) -> None:
    job = _write(workdir, "job.yaml", doc)
    for argv in (["check", "--job", str(job)],
                 ["plan", "--job", str(job), "-o", str(workdir / "plan.yaml")]):
        code, err = _run(inactl.main, ["-t", str(FIGURE1), *argv])
        _assert_refused_clearly(code, err, {0, INVALID})


@EXAMPLES
@given(_documents(VALID_JOB))
def test_inactl_deploy_refuses_a_bad_job_before_any_switch(workdir: Path, doc: bytes) -> None:
    job = _write(workdir, "job.yaml", doc)
    code, err = _run(inactl.main, ["-t", str(FIGURE1), "--p4info", str(workdir / "none"),
                                "deploy", "--job", str(job)])
    with _captured():
        valid = _valid_job(job)
    # A valid job goes on to need the P4Info, which is missing here.
    _assert_refused_clearly(code, err, {P4INFO} if valid else {INVALID})


@EXAMPLES
@given(_documents(VALID_JOB))
def test_inaworker_refuses_a_bad_job_with_exit_2(workdir: Path, doc: bytes) -> None:
    job = _write(workdir, "job.yaml", doc)
    # w9 is no host: a valid job still ends in exit 2, after the job was read.
    code, err = _run(inaworker.main, ["-t", str(FIGURE1), "--job", str(job), "--worker", "w9",
                                       "--values", "1"])
    _assert_refused_clearly(code, err, {INVALID})


@EXAMPLES
@given(_documents(VALID_JOB))
def test_inaroot_refuses_a_bad_job_with_exit_2(workdir: Path, doc: bytes) -> None:
    job = _write(workdir, "job.yaml", doc)
    code, err = _run(inaroot.main, ["-t", str(FIGURE1), "--job", str(job), "--host", "w9"])
    _assert_refused_clearly(code, err, {2})


@EXAMPLES
@given(_documents(VALID_JOB))
def test_inalab_demo_refuses_a_bad_job_with_exit_2(workdir: Path, doc: bytes) -> None:
    job = _write(workdir, "job.yaml", doc)
    code, err = _run(inalab.main, ["-t", str(FIGURE1), "demo", "--job", str(job), "--model",
                                    "--size", "1"])
    _assert_refused_clearly(code, err, {0, 2})


# --- topology documents --------------------------------------------------------------

@EXAMPLES
@given(_documents(VALID_TOPOLOGY))
def test_inactl_refuses_a_bad_topology_with_exit_2(workdir: Path, doc: bytes) -> None:
    topo = _write(workdir, "topology.yaml", doc)
    code, err = _run(inactl.main, ["-t", str(topo), "bift"])
    _assert_refused_clearly(code, err, {0, INVALID})
    valid = code == 0
    code, err = _run(inactl.main, ["-t", str(topo), "check", "--job", str(FIGURE1_JOB)])
    _assert_refused_clearly(code, err, {0, INVALID} if valid else {INVALID})
    for argv in (["init"], ["status"], ["teardown", "--job-id", "1"],
                 ["deploy", "--job", str(FIGURE1_JOB)]):
        code, err = _run(inactl.main, ["-t", str(topo), "--p4info", str(workdir / "none"), *argv])
        allowed = {INVALID, P4INFO} if valid else {INVALID}
        _assert_refused_clearly(code, err, allowed)


@EXAMPLES
@given(_documents(VALID_TOPOLOGY))
def test_inaworker_and_inaroot_refuse_a_bad_topology_with_exit_2(workdir: Path, doc: bytes) -> None:
    topo = _write(workdir, "topology.yaml", doc)
    code, err = _run(inaworker.main, ["-t", str(topo), "--job", str(FIGURE1_JOB),
                                       "--worker", "w9", "--values", "1"])
    _assert_refused_clearly(code, err, {2})
    code, err = _run(inaroot.main, ["-t", str(topo), "--job", str(FIGURE1_JOB),
                                       "--host", "w9"])
    _assert_refused_clearly(code, err, {2})


@EXAMPLES
@given(_documents(VALID_TOPOLOGY))
def test_inalab_refuses_a_bad_topology_with_exit_2(workdir: Path, doc: bytes) -> None:
    topo = _write(workdir, "topology.yaml", doc)
    # No lab runs in this run directory, and the build is missing: nothing starts.
    with mock.patch.dict(os.environ, {"INA_RUN_DIR": str(workdir / "run")}):
        for argv in (["exec", "--", "true"], ["host", "w1", "--", "true"], ["run", "--no-cli"]):
            code, err = _run(inalab.main, ["-t", str(topo), "--build", str(workdir / "none"),
                                            *argv])
            _assert_refused_clearly(code, err, {2})


# --- named cases ---------------------------------------------------------------------

def _stderr_of(workdir: Path, argv: list[str], content: str,
               capsys: pytest.CaptureFixture[str]) -> str:
    job = _write(workdir, "named.yaml", content.encode())
    assert inactl.main(["-t", str(FIGURE1), *argv, "--job", str(job)]) == INVALID
    return capsys.readouterr().err


def test_a_planned_job_with_text_slots_is_one_clear_message(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _stderr_of(workdir, ["check"], "job_id: 1\nop: sum\nworkers: [w1, w2]\nslots: x\n",
                     capsys)
    assert err.count("  - ") == 1 and "slots 'x' is not a power of two" in err


def test_an_unknown_op_is_reported_once_not_per_candidate_root(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _stderr_of(workdir, ["check"], "job_id: 1\nop: avg\nworkers: [w1, w2]\n", capsys)
    assert err.count("op 'avg'") == 1 and err.count("  - ") == 1


def test_a_duplicated_worker_is_reported_once_not_per_candidate_root(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _stderr_of(workdir, ["plan", "-o", str(workdir / "p.yaml")],
                     "job_id: 1\nop: sum\nworkers: [w1, w2, w1]\n", capsys)
    assert err.count("more than once") == 1 and err.count("  - ") == 1


def test_every_problem_of_a_job_file_is_listed_at_once(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _stderr_of(workdir, ["check"],
                     "job_id: 0\nop: 3\nworkers: w1\nslots: 3\nroots: s1\n", capsys)
    assert err.count("  - ") == 5


def test_a_duplicate_key_names_the_key(workdir: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    err = _stderr_of(workdir, ["check"], "job_id: 1\nop: sum\nop: max\nworkers: [w1, w2]\n",
                     capsys)
    assert "duplicate key 'op'" in err


def test_a_binary_file_is_not_a_traceback(workdir: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    job = _write(workdir, "binary.yaml", b"\x89PNG\r\n\x1a\n\x00\xff")
    assert inactl.main(["-t", str(job), "bift"]) == INVALID
    assert "not a text file" in capsys.readouterr().err


def _alias_bomb(levels: int) -> str:
    """A few hundred bytes of nested aliases that stand for 9**levels values."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\njob_id: 1\nop: sum\nworkers: *a{levels - 1}\n"


def test_a_job_file_of_nested_aliases_is_refused_at_once(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _write(workdir, "bomb.yaml", _alias_bomb(8).encode())
    assert len(job.read_bytes()) < 1000
    assert inactl.main(["-t", str(FIGURE1), "check", "--job", str(job)]) == INVALID
    assert "once its aliases are expanded" in capsys.readouterr().err


def test_a_topology_file_of_nested_aliases_is_refused_at_once(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology = _write(workdir, "bomb-topology.yaml", _alias_bomb(8).encode())
    assert inactl.main(["-t", str(topology), "bift"]) == INVALID
    assert "once its aliases are expanded" in capsys.readouterr().err


def test_a_value_of_nested_aliases_is_shown_cut_short(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Below the limit, the workers are lists of lists: the message shows a few.
    job = _write(workdir, "small-bomb.yaml", _alias_bomb(5).encode())
    assert inactl.main(["-t", str(FIGURE1), "check", "--job", str(job)]) == INVALID
    err = capsys.readouterr().err
    assert "workers" in err and len(err) < 2000


def test_a_recursive_alias_is_refused(workdir: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    job = _write(workdir, "recursive.yaml", b"job_id: 1\nop: sum\nworkers: &w [w1, *w]\n")
    assert inactl.main(["-t", str(FIGURE1), "check", "--job", str(job)]) == INVALID
    assert "recursive alias" in capsys.readouterr().err
