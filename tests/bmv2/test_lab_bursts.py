"""The lab's links lose nothing a switch can forward: a burst put on a host's link at
once reaches the next switch whole (BMv2 reads its ports through libpcap, whose ring
held 31 packets while the ports had veth's offloads on; ina.lab.mininet.OFFLOADS).
Run with `make test`."""

from __future__ import annotations

import pytest

from ina.errors import LabError
from ina.lab.mininet import wait_until

from bmv2.bmv2lab import NetLab

#: Frames in the burst: twice what a libpcap ring of 64 KB frames held, and no more
#: than BMv2's egress queue toward w2 holds (64 packets, which drops the rest when the
#: switch's egress falls behind its ingress: 263 to 285 of 300 frames left in 4 of 11
#: runs of a 300-frame burst; docs/limits.md).
BURST = 60
S1_TO_W2 = 3


def test_a_burst_of_frames_at_line_speed_leaves_the_switch_whole(figure1_lab: NetLab) -> None:
    lab = figure1_lab
    sent, _ = lab.port_counters("s1")
    before = sent[S1_TO_W2].packets
    lab.send_frames("w1", [lab.udp("w1", "w2", 1000, 0)] * BURST)

    def forwarded() -> int:
        return lab.port_counters("s1")[0][S1_TO_W2].packets - before

    try:
        wait_until(lambda: forwarded() >= BURST, 20, f"s1 to forward {BURST} frames")
    except LabError:
        pytest.fail(f"s1 forwarded {forwarded()} of a burst of {BURST} frames")
    assert forwarded() == BURST
