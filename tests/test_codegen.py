"""P4 and Python share their constants through generated files, and so do the Wireshark
dissector and Python."""

import re
from pathlib import Path

from ina.control import p4names
from ina.protocol import luagen, p4gen

P4SRC = Path(__file__).resolve().parents[1] / "p4src"


def test_generated_p4_is_current() -> None:
    for name, render in p4gen.FILES.items():
        assert (P4SRC / "include" / name).read_text() == render(), \
            "run: python -m ina.protocol.p4gen"


def test_every_table_and_action_named_in_python_is_declared_in_p4() -> None:
    source = "\n".join(p.read_text() for p in (P4SRC / "include").glob("*.p4"))
    declared = set(re.findall(r"\b(?:table|action)\s+(\w+)", source))
    for spec in p4names.TABLES:
        for name in (spec.name, *(a.name for a in spec.actions), spec.default.name):
            assert name.rsplit(".", 1)[1] in declared, name


def test_the_wireshark_dissectors_generated_tables_are_current() -> None:
    current = luagen.DISSECTOR.read_text()
    assert current == luagen.render(current), "run: python -m ina.protocol.luagen"
