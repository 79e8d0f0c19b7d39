"""No function of the package or of its tests is longer than MAX_LINES (docs/design.md,
"Layout"): one that grows past it does several things, which want names of their own.
Read from the AST of every module of controller/ina and tests/, methods and nested
functions included; a function's length runs from its ``def`` line to its last line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from inatest import ROOT

PACKAGE = ROOT / "controller" / "ina"
TESTS = ROOT / "tests"
MAX_LINES = 80


def _functions(path: Path) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function in the module at ``path``."""
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1)
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno is not None]


@pytest.mark.parametrize("tree", [PACKAGE, TESTS], ids=["package", "tests"])
def test_no_function_is_longer_than_80_lines(tree: Path) -> None:
    modules = sorted(tree.rglob("*.py"))
    assert len(modules) > 50  # the whole tree was read
    too_long = [f"{path.relative_to(ROOT)}:{line} {name}: {length} lines"
                for path in modules for name, line, length in _functions(path)
                if length > MAX_LINES]
    assert too_long == []


def test_the_length_counts_every_line_from_def_to_the_end(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("class C:\n    def f(self):\n        x = 1\n\n        return x\n"
                      "async def g():\n    pass\n")
    assert sorted(_functions(module)) == [("f", 2, 4), ("g", 6, 2)]
