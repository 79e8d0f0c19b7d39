"""The P4 program compiles, and its P4Info has every name the controller uses."""

from pathlib import Path

from ina.control import p4names


def test_p4info_has_every_name_the_controller_uses(compiled: Path) -> None:
    assert p4names.check_p4info(compiled / "ina.p4info.txtpb") == []
