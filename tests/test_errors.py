"""Every error the package raises on purpose is one of its own (ina.errors), so that a
user catches InaError, and a command exits with the code that class names: no
``raise ValueError(...)`` or ``RuntimeError(...)`` beside the hierarchy. The OS's own
errors (OSError and its kind: a socket closed, a process gone) are raised as the
OS's, where the callers handle them so. Read from the AST of every module."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import ina.errors

from inatest import ROOT

PACKAGE = ROOT / "controller" / "ina"
#: Built-in exceptions the package may raise: the OS's own kind, and the protocols
#: of Python itself (an iterator's end, an abstract method, a bug's assertion, a
#: signal handler ending its process).
ALLOWED = {name for name in dir(builtins)
           if isinstance(getattr(builtins, name), type)
           and issubclass(getattr(builtins, name), OSError | StopIteration | NotImplementedError
                          | AssertionError | KeyboardInterrupt | SystemExit)}


def _raised_builtins(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each ``raise Name(...)`` or ``raise Name`` of a built-in
    exception not in ALLOWED."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if (isinstance(target, ast.Name) and isinstance(getattr(builtins, target.id, None), type)
                and issubclass(getattr(builtins, target.id), BaseException)
                and target.id not in ALLOWED):
            found.append((node.lineno, target.id))
    return found


def test_the_package_raises_only_its_own_errors_and_the_oss() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50  # the whole package was read
    raised = [f"{path.relative_to(ROOT)}:{line} raise {name}"
              for path in modules for line, name in _raised_builtins(path)]
    assert raised == []


def test_a_raised_builtin_is_found(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f(x):\n    if x:\n        raise ValueError('no')\n"
                      "    raise OSError(5, 'io')\n")
    assert _raised_builtins(module) == [(3, "ValueError")]


def test_every_error_of_the_package_is_an_ina_error() -> None:
    classes = [c for c in vars(ina.errors).values()
               if isinstance(c, type) and issubclass(c, BaseException)
               and c.__module__ == "ina.errors"]
    assert len(classes) > 20
    assert all(issubclass(c, ina.errors.InaError) for c in classes)
