"""The subpackages depend on each other one way (docs/design.md, "Layering"):
protocol <- spec <- control <- model; host uses protocol and spec; lab (emulation)
on them, bench (measurements) on lab, cli on top. Checked on every import statement,
those inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from inatest import ROOT

PACKAGE = ROOT / "controller" / "ina"
#: What each subpackage may import from ina (errors: everyone).
ALLOWED = {
    "protocol": {"protocol"},
    "spec": {"protocol", "spec"},
    "control": {"protocol", "spec", "control"},
    "host": {"protocol", "spec", "host"},
    "model": {"protocol", "spec", "control", "model", "host"},
    # The emulation: never the measurements on it.
    "lab": {"protocol", "spec", "control", "model", "host", "lab"},
    "bench": {"protocol", "spec", "control", "model", "host", "torch", "lab", "bench"},
    # The torch backend: the host side, and the embedded network it may start.
    "torch": {"protocol", "spec", "host", "model", "torch"},
    "cli": {"protocol", "spec", "control", "model", "host", "torch", "lab", "bench", "cli"},
}
#: The reference data plane itself (its pipeline package included): the controller and
#: the host side only through the harness.
MODEL_CORE = {"switch.py", "network.py"}
MODEL_PIPELINE = "pipeline"
NOT_IN_MODEL_CORE = ("ina.control.controller", "ina.host")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            if node.module == "ina":
                found.update(f"ina.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == "ina" or m.startswith("ina.")}


@pytest.mark.parametrize("subpackage", sorted(ALLOWED))
def test_a_subpackage_imports_only_what_lies_below_it(subpackage: str) -> None:
    for path in sorted((PACKAGE / subpackage).rglob("*.py")):
        for module in _imports(path):
            parts = module.split(".")
            if len(parts) < 2 or parts[1] == "errors":
                continue
            assert parts[1] in ALLOWED[subpackage], f"{path.name} imports {module}"
            core = path.name in MODEL_CORE or MODEL_PIPELINE in path.parts
            if subpackage == "model" and core:
                assert not module.startswith(NOT_IN_MODEL_CORE), f"{path.name}: {module}"


def test_every_module_lives_in_a_subpackage() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "errors.py"]
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and
                  (p / "__init__.py").exists()) == sorted(ALLOWED)
