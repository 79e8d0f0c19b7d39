"""The reference model mirrors p4src/ file by file (docs/design.md, "Layout"): every
P4 file of p4src/include that declares a control has a module of the same stem in
ina.model.pipeline, which defines a class named as the control; every other file
has one too, or a reason here why the model needs none; and the package holds no
module without its P4 file but those the model alone needs."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from inatest import ROOT

INCLUDE = ROOT / "p4src" / "include"
PIPELINE = ROOT / "controller" / "ina" / "model" / "pipeline"
CONTROL = re.compile(r"^\s*control\s+(\w+)\s*\(", re.MULTILINE)
#: The P4 files no module mirrors, and why.
NO_MIRROR = {
    "parser": "the packet's formats: ina.protocol.frames parses them",
    "deparser": "the packet's formats: ina.protocol.frames packs them (Frame.pack)",
    "headers": "the packet's formats are ina.protocol.frames; metadata_t is metadata.py",
    "bier_push": "one action on the formats: ina.protocol.frames's Bier.for_set",
    "defs": "constants: ina.protocol.constants",
    "generated": "generated from ina.protocol.constants (a cell's fields: cells.CellState)",
    "lanes": "generated: the lanes' registers (cells.REG_LANES), ina.protocol.lanes",
    "lane_math": "the lanes' arithmetic: ina.protocol.lanes",
    "verify_checksum": "the IPv4 checksum: ina.protocol.frames (Ipv4.checksum_ok)",
    "compute_checksum": "the IPv4 checksum: ina.protocol.frames packs a header with it",
}
#: The modules the model alone needs: what the controls share.
MODEL_ONLY = {
    "metadata": "headers.p4's metadata_t, which headers.p4 declares with the formats",
    "tables": "the store of every control's tables (each P4 control declares its own)",
}


def _controls(path: Path) -> list[str]:
    return CONTROL.findall(path.read_text())


P4_FILES = sorted(INCLUDE.glob("*.p4"))
CONTROL_FILES = [p for p in P4_FILES if _controls(p)]


def test_the_regex_finds_the_controls() -> None:
    assert len(CONTROL_FILES) >= 10
    assert _controls(INCLUDE / "ingress.p4") == ["InaIngress"]


@pytest.mark.parametrize("p4", CONTROL_FILES, ids=[p.stem for p in CONTROL_FILES])
def test_every_control_has_a_model_class_of_its_name(p4: Path) -> None:
    if p4.stem in NO_MIRROR:
        return
    module = importlib.import_module(f"ina.model.pipeline.{p4.stem}")
    for control in _controls(p4):
        assert isinstance(getattr(module, control, None), type), f"{p4.name}: {control}"


def test_every_p4_file_has_its_module_or_a_reason() -> None:
    modules = {p.stem for p in PIPELINE.glob("*.py")} - {"__init__"}
    stems = {p.stem for p in P4_FILES}
    assert sorted(s for s in stems if (s in modules) == (s in NO_MIRROR)) == []
    assert sorted(set(NO_MIRROR) - stems) == []
    assert sorted(modules - stems) == sorted(MODEL_ONLY)
