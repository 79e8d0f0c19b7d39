"""The compiled window (ina.host/_window.c) under AddressSanitizer and
UndefinedBehaviorSanitizer: built again with both, loaded in place of the package's
build into a Python that preloads ASan's runtime, and run through the window's own
tests and its fuzzing (tests/test_window_fuzz.py). An overread, a use after free or
undefined behaviour aborts that run and leaves the sanitizer's report, which the
test shows. (Checked once by hand: the window's length check on a result made two
bytes instead of a header's, the fuzzing's first short payload aborted the run with
a heap-buffer-overflow report in accept_payload.)

Needs gcc with its sanitizer runtimes (Debian: gcc, which brings libasan and
libubsan) and Python's headers (python3-dev); skips naming what is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import ina.host

SOURCE = Path(ina.host.__file__).with_name("_window.c")
TESTS = Path(__file__).parent
#: The window's tests that drive the compiled code hardest, fuzzing first.
SUITES = ["test_window_fuzz.py", "test_worker.py", "test_query.py", "test_congestion.py",
          "test_owned_window.py", "test_collectives.py"]
#: Loads the sanitized build as ina.host._window, then runs pytest on argv.
RUNNER = """
import importlib.machinery, importlib.util, sys
path = sys.argv[1]
loader = importlib.machinery.ExtensionFileLoader("ina.host._window", path)
spec = importlib.util.spec_from_file_location("ina.host._window", path, loader=loader)
module = importlib.util.module_from_spec(spec)
sys.modules["ina.host._window"] = module
loader.exec_module(module)
import ina.host.window
assert ina.host.window._window.__file__ == path, ina.host.window._window.__file__
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[2:]]))
"""


def _runtime(name: str) -> Path | None:
    found = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                           text=True, check=False).stdout.strip()
    return Path(found) if found and Path(found).is_absolute() and Path(found).exists() else None


def _missing() -> str | None:
    if shutil.which("gcc") is None:
        return "gcc (apt-get install gcc)"
    for lib in ("libasan.so", "libubsan.so"):
        if _runtime(lib) is None:
            return f"gcc's {lib} (apt-get install gcc: libasan and libubsan come with it)"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "Python's headers (apt-get install python3-dev)"
    return None


@pytest.mark.skipif(_missing() is not None, reason=f"needs {_missing()}")
def test_the_compiled_window_passes_its_tests_under_asan_and_ubsan(tmp_path: Path) -> None:
    built = tmp_path / ("_window" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
         f"-I{sysconfig.get_paths()['include']}", str(SOURCE), "-o", str(built)],
        check=True, capture_output=True, text=True)
    asan = _runtime("libasan.so")
    assert asan is not None
    logs = tmp_path / "reports"
    logs.mkdir()
    env = dict(os.environ, LD_PRELOAD=str(asan),
               # Every object its own malloc'd block: a read past a payload's bytes is
               # past a block that ASan guards (pymalloc's arenas would hide it).
               PYTHONMALLOC="malloc",
               # Python frees little at exit, by design: leaks are not this test's.
               # Reports go to files: pytest captures the tests' stderr.
               ASAN_OPTIONS=f"detect_leaks=0:abort_on_error=1:log_path={logs}/asan",
               UBSAN_OPTIONS=f"print_stacktrace=1:halt_on_error=1:log_path={logs}/ubsan")
    run = subprocess.run([sys.executable, "-c", RUNNER, str(built),
                          *(str(TESTS / s) for s in SUITES)],
                         cwd=TESTS.parent, env=env, capture_output=True, text=True,
                         timeout=900, check=False)
    reports = "".join(f.read_text(errors="replace")[:4000] for f in sorted(logs.iterdir()))
    assert not reports, reports
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout, run.stdout[-3000:]
