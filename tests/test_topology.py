"""The topology file: Figure 1 as drawn, and a clear error for each kind of mistake."""

from pathlib import Path
from typing import Any

import pytest

from ina.errors import TopologyError
from ina.protocol.constants import QUEUE_BUFFER, QUEUE_MARK
from ina.spec.topology import Failures, Queues, Topology


def _figure1_dict() -> dict[str, Any]:
    return {
        "name": "t",
        "switches": {"s1": {"device_id": 1, "grpc": "127.0.0.1:50001", "loopback": "10.0.100.1"},
                     "s2": {"device_id": 2, "grpc": "127.0.0.1:50002", "loopback": "10.0.100.2"}},
        "hosts": {"h1": {"ip": "10.0.0.1", "mac": "00:00:00:00:00:01", "bfr_id": 1},
                  "h2": {"ip": "10.0.0.2", "mac": "00:00:00:00:00:02", "bfr_id": 2}},
        "links": [["s1:1", "s2:1"], ["s1:2", "h1"], ["s2:2", "h2"]],
    }


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(TopologyError) as err:
        Topology.from_dict(data)
    return err.value.problems


def test_figure1_has_the_drawn_links(figure1: Topology) -> None:
    def neighbours(sw: str) -> set[str]:
        return {nb.node for nb in figure1.ports(sw).values()}

    assert neighbours("s7") == {"s5", "s6"}
    assert neighbours("s5") == {"s7", "s1", "s2"}
    assert neighbours("s6") == {"s7", "s3", "s4"}
    assert neighbours("s1") == {"s5", "w1", "w2"}
    assert [figure1.hosts[f"w{i}"].bfr_id for i in range(1, 9)] == list(range(1, 9))


def test_routes_follow_the_tree(figure1: Topology) -> None:
    assert figure1.path("w1", "s6") == ["w1", "s1", "s5", "s7", "s6"]
    assert figure1.path("s6", "w3") == ["s6", "s7", "s5", "s2", "w3"]
    assert figure1.path("w1", "w2") == ["w1", "s1", "w2"]


def test_a_valid_small_topology_loads() -> None:
    topo = Topology.from_dict(_figure1_dict())
    assert topo.host_attachment("h2") == ("s2", 2)
    assert topo.switches["s1"].mac == "02:00:00:00:00:01"  # derived from the device id


def test_unknown_node_in_a_link_is_named() -> None:
    data = _figure1_dict()
    data["links"].append(["s1:3", "h9"])
    assert any("unknown node 'h9'" in p for p in _problems(data))


def test_port_used_twice_is_refused() -> None:
    data = _figure1_dict()
    data["links"][1] = ["s1:1", "h1"]
    assert "s1 port 1 is used by two links" in _problems(data)


def test_host_with_two_links_is_refused() -> None:
    data = _figure1_dict()
    data["links"].append(["s2:3", "h1"])
    assert any("host h1 must have exactly one link" in p for p in _problems(data))


def test_shared_bfr_id_is_refused() -> None:
    data = _figure1_dict()
    data["hosts"]["h2"]["bfr_id"] = 1
    assert "h1 and h2 share bfr_id 1" in _problems(data)


def test_disconnected_network_is_refused() -> None:
    data = _figure1_dict()
    data["links"] = [["s1:2", "h1"], ["s2:2", "h2"]]
    assert any("not connected" in p for p in _problems(data))


def test_bad_addresses_are_named() -> None:
    data = _figure1_dict()
    data["hosts"]["h1"]["ip"] = "10.0.0.300"
    data["hosts"]["h2"]["mac"] = "zz"
    problems = _problems(data)
    assert any("h1.ip" in p for p in problems) and any("h2.mac" in p for p in problems)


def test_duplicate_yaml_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("switches:\n  s1: {device_id: 1, grpc: 'a:1', loopback: 10.0.0.1}\n"
                    "  s1: {device_id: 2, grpc: 'a:2', loopback: 10.0.0.2}\nhosts: {}\nlinks: []\n")
    with pytest.raises(TopologyError, match="duplicate key 's1'"):
        Topology.load(path)


# --- queues: every link's rate, buffer and marking threshold -----------------------------


def test_queues_are_optional_and_take_defaults_for_buffer_and_mark() -> None:
    assert Topology.from_dict(_figure1_dict()).queues is None
    data = _figure1_dict()
    data["queues"] = {"rate": 2}
    q = Topology.from_dict(data).queues
    assert q == Queues(rate=2.0, buffer=QUEUE_BUFFER, mark=QUEUE_MARK)
    assert q is not None and q.phantom_rate == 256  # bytes per 1,024 us: 2 Mbit/s
    data["queues"] = {"rate": 0.5, "buffer": 20000, "mark": 3000}
    assert Topology.from_dict(data).queues == Queues(0.5, 20000, 3000)


@pytest.mark.parametrize("queues,problem", [
    ({"buffer": 30000}, "queues: missing ['rate']"),
    ({"rate": 2, "burst": 3}, "queues: unknown attributes ['burst']"),
    ({"rate": 0}, "queues.rate: 0 Mbit/s is not a link rate: 0.1 to 100000"),
    ({"rate": 200000}, "queues.rate: 200000 Mbit/s is not a link rate: 0.1 to 100000"),
    ({"rate": "fast"}, "queues.rate: 'fast' is not a rate in Mbit/s"),
    ({"rate": True}, "queues.rate: True is not a rate in Mbit/s"),
    ({"rate": 2, "buffer": 1000}, "queues.buffer: 1000 is not an integer in 1514..2147483647"),
    ({"rate": 2, "buffer": 250000}, "queues.buffer: 250000 bytes is more than a link may queue "
     "(64000): beyond it BMv2's send blocks and the switch stops sending on every port"),
    ({"rate": 2, "mark": -1}, "queues.mark: -1 is not an integer in 0..2147483647"),
    ({"rate": 2, "buffer": 20000, "mark": 20000},
     "queues.mark: 20000 bytes is not below the buffer (20000 bytes): a queue that never "
     "holds more would never mark"),
    ([2], "queues: expected a mapping of attributes"),
])
def test_bad_queues_are_named(queues: Any, problem: str) -> None:
    data = _figure1_dict()
    data["queues"] = queues
    assert _problems(data) == [problem]


def test_with_queues_changes_only_the_queues_and_failures_keep_them() -> None:
    topo = Topology.from_dict(_figure1_dict())
    fast = topo.with_queues(Queues(rate=4.0))
    assert fast.queues == Queues(rate=4.0) and topo.queues is None
    assert fast.path("h1", "h2") == topo.path("h1", "h2") and fast.links == topo.links
    assert fast.without(Failures().with_link("s1", "s2")).queues == Queues(rate=4.0)
    assert fast.with_queues(None).queues is None


def test_queues_made_in_python_are_checked_too() -> None:
    with pytest.raises(ValueError, match="queues need a buffer"):
        Queues(rate=2.0, buffer=100_000)
    with pytest.raises(ValueError, match="queues need a buffer"):
        Queues(rate=2.0, buffer=20_000, mark=20_000)
    with pytest.raises(ValueError, match="0.01 Mbit/s is not a link rate"):
        Queues(rate=0.01)
