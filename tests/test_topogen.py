"""Generated topologies: the files in topologies/ are what the generator writes, and
their BIER tables satisfy RFC 8279 (disjoint F-BMs covering every BFER)."""

from typing import Any

import pytest
import yaml

from ina.spec import topogen
from ina.spec.bier import port_fbms
from ina.spec.topology import Topology

from inatest import ROOT


@pytest.mark.parametrize("name,data", [
    ("leaf-spine-2x4", topogen.leaf_spine(2, 4, 2)),
    ("fat-tree-4", topogen.fat_tree(4)),
    ("leaf-spine-2x4-sets", topogen.leaf_spine(2, 4, 2, hosts_per_set=2)),
])
def test_committed_topology_files_are_current(name: str, data: dict[str, Any]) -> None:
    on_disk = yaml.safe_load((ROOT / "topologies" / f"{name}.yaml").read_text())
    assert on_disk == data, f"regenerate topologies/{name}.yaml with python -m ina.spec.topogen"


def test_fat_tree_has_the_textbook_sizes() -> None:
    topo = Topology.from_dict(topogen.fat_tree(8))
    assert (len(topo.switches), len(topo.hosts)) == (80, 128)


@pytest.mark.parametrize("data", [
    topogen.leaf_spine(2, 4, 2), topogen.leaf_spine(4, 6, 3), topogen.fat_tree(4),
    topogen.fat_tree(6), topogen.fat_tree(8), topogen.fat_tree(16),
    topogen.leaf_spine(2, 4, 2, hosts_per_set=2),
], ids=["ls-2x4", "ls-4x6", "ft-4", "ft-6", "ft-8", "ft-16", "ls-2x4-sets"])
def test_fbms_are_disjoint_and_cover_every_bfer(data: dict[str, Any]) -> None:
    topo = Topology.from_dict(data)
    everyone = sum(1 << (h.bfr_id - 1) for h in topo.hosts.values())
    for sw in topo.switches:
        union = 0
        for fbm in port_fbms(topo, sw).values():
            assert union & fbm == 0, sw
            union |= fbm
        assert union == everyone, sw
