"""A long call on slow links sends each packet about once (Figure 1 on Mininet + BMv2,
every link at 1 Mbit/s): the cause of the stalls of issue 22. s5's uplink carries
three packets a chunk (s1's partial result, w3's and w4's contributions, which s7
aggregates), so its queue grows under a long call. Workers whose retransmission
timer or probe fell below the queue's wait sent their windows into it again and
again: 1,330 to 2,370 copies of a 301-packet call from one worker whose first
RTO was never measured, 200 to 480 probes from each of the others, the call 18 to
45 s where the link allows 8.4 (ina/host/window.py: RtoEstimator). Run with
`make test`."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from ina.protocol.constants import ELEMS_PER_PACKET as P

from bmv2.bmv2lab import Deployed, NetLab

CHUNKS = 300
#: Packets each worker sends once: the call's descriptor, then the array.
PACKETS = CHUNKS + 1
#: s5's port toward s7 (topologies/figure1.yaml), and the packets it carries a chunk.
S5_UP, UP_PER_CHUNK = 1, 3
#: Copies allowed, as a share of what the call needs: a queue that the marks keep
#: near its threshold still drops now and then (the lab's buffer, 30 kB).
SPARE = 0.1


@pytest.fixture
def slow_links(figure1_lab: NetLab) -> Iterator[NetLab]:
    figure1_lab.lab.limit_links(1.0)
    try:
        yield figure1_lab
    finally:
        figure1_lab.lab.limit_links(None)


def test_a_long_call_on_slow_links_sends_each_packet_about_once(
        slow_links: NetLab, deployed: Deployed) -> None:
    lab = slow_links
    (path, job), = deployed
    before = lab.port_counters("s5")[0][S5_UP].packets
    results, expected = lab.allreduce(path, job, P * CHUNKS, seed=1, timeout=60)
    up = lab.port_counters("s5")[0][S5_UP].packets - before
    for w in job.workers:
        assert np.array_equal(results[w], expected), w
    copies = {w: lab.reports[w]["retransmissions"] for w in job.workers}
    assert sum(copies.values()) <= SPARE * PACKETS * len(job.workers), copies
    assert up <= (1 + SPARE) * UP_PER_CHUNK * PACKETS, (up, copies)
