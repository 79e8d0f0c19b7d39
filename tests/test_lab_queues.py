"""The lab's links and queues as commands (no emulation; tests/bmv2/test_marks.py
runs them): an htb class at the link's rate, a byte FIFO of the topology's buffer
under it, the controller's probes in a class of their own served first; the
switches started with the egress priority queues the probes use."""

from __future__ import annotations

import pytest

from ina.lab.mininet import Lab, bmv2_command, parse_backlog, queue_command
from ina.protocol.constants import CPU_PORT, ETHERTYPE_PROBE, PRIORITY_QUEUES
from ina.spec.topology import Queues, Topology


def test_a_link_gets_its_rate_a_byte_fifo_and_a_class_for_the_probes() -> None:
    cmd = queue_command("s1-eth2", Queues(rate=2.0, buffer=30000, mark=7500))
    steps = cmd.split(" && ")
    assert steps[0] == "tc qdisc del dev s1-eth2 root 2>/dev/null; true"
    assert "tc qdisc add dev s1-eth2 root handle 1: htb default 20" in steps
    assert "tc class add dev s1-eth2 parent 1: classid 1:1 htb rate 2000kbit ceil 2000kbit" \
        in steps
    assert ("tc class add dev s1-eth2 parent 1:1 classid 1:10 htb rate 20kbit ceil 2000kbit "
            "prio 0 quantum 1514") in steps  # the probes' class: served first
    assert ("tc class add dev s1-eth2 parent 1:1 classid 1:20 htb rate 1980kbit ceil 2000kbit "
            "prio 1 quantum 1514") in steps
    assert "tc qdisc add dev s1-eth2 parent 1:20 handle 20: bfifo limit 30000" in steps
    assert (f"tc filter add dev s1-eth2 parent 1: protocol {ETHERTYPE_PROBE:#06x} prio 1 u32 "
            "match u32 0 0 flowid 1:10") in steps


@pytest.mark.parametrize("rate,probes", [(0.1, 8), (1.0, 10), (2.5, 25), (1000.0, 10000)])
def test_the_probes_class_is_a_small_part_of_any_rate(rate: float, probes: int) -> None:
    cmd = queue_command("h1-eth0", Queues(rate=rate))
    assert f"classid 1:10 htb rate {probes}kbit ceil {round(rate * 1000)}kbit" in cmd
    assert f"classid 1:20 htb rate {round(rate * 1000) - probes}kbit" in cmd


def test_no_queues_gives_the_interface_its_own_queue_back() -> None:
    assert queue_command("s1-eth1", None) == "tc qdisc del dev s1-eth1 root 2>/dev/null; true"


def test_switches_start_with_the_probes_priority_queue() -> None:
    cmd = bmv2_command(3, "127.0.0.1:50003", {1: "s3-eth1"})
    target = cmd[cmd.index("--") + 1:]
    assert target[target.index("--priority-queues") + 1] == str(PRIORITY_QUEUES)
    assert target[target.index("--cpu-port") + 1] == str(CPU_PORT)


def test_limit_links_sets_the_topologys_queues_at_another_rate(figure1: Topology,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """The benchmarks' call: a rate, with the topology's buffer and marking threshold
    (the defaults without them); None: no limit."""
    got: list[Queues | None] = []
    lab = Lab(figure1.with_queues(Queues(rate=8.0, buffer=20000, mark=5000)))
    monkeypatch.setattr(lab, "set_queues", got.append)
    lab.limit_links(2.0)
    lab.limit_links(None)
    assert got == [Queues(rate=2.0, buffer=20000, mark=5000), None]
    plain = Lab(figure1)
    monkeypatch.setattr(plain, "set_queues", got.append)
    plain.limit_links(4.0)
    assert got[-1] == Queues(rate=4.0)


@pytest.mark.parametrize("output,backlog", [
    ("qdisc bfifo 20: parent 1:20 limit 30000b\n Sent 761000 bytes 761 pkt (dropped 0, "
     "overlimits 0 requeues 0)\n backlog 29098b 30p requeues 0\n", (29098, 30)),
    (" backlog 87Kb 90p requeues 0", (87000, 90)),  # tc's own rounding
    ("", (0, 0)),
])
def test_a_links_backlog_is_read_from_tc(output: str, backlog: tuple[int, int]) -> None:
    assert parse_backlog(output) == backlog
