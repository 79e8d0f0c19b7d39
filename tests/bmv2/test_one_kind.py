"""A round takes one kind, data or NODATA (Figure 1 on Mininet + BMv2): a
contribution of the other kind, retransmissions included, is refused and counted
(DROP_KIND_MISMATCH), as on the model. Before, a NODATA packet completing a cell of
data grew its 1,024-byte array, and BMv2, which lets a packet grow by at most 512
bytes, aborted the switch: any member could kill it. See aggregation.p4, "Widths and
NODATA"; tests/test_model_collectives.py has the same on the model. Run with
`make test`."""

from __future__ import annotations

import numpy as np

from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, nodata_payload
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import Flag, JobStat
from ina.spec.topology import Topology

from bmv2.bmv2lab import Labs
from bmv2.test_differential import Batch, _crafted_on_both, _from, _header, _job_cell, _part
from inatest import FIGURE1_SPEC, ROOT

#: s1 aggregates w1 and w2, below the root s6.
KIND_SPEC = {**FIGURE1_SPEC, "job_id": 17}
START = 1000  # the call's first seq: the first SYNC of the plan proposes it
S1, ROOT_IP = "10.0.100.1", "10.0.100.6"


def _kind_batches(topology: Topology) -> list[Batch]:
    """At s1: NODATA to a round of data (START - 2), data to a NODATA round
    (START - 1), and a NODATA retransmission for a complete round of data (START,
    the only one in the root's window: it alone reaches the root)."""
    job = 17
    w1, w2 = bit_of(1), bit_of(2)
    return [
        _from(topology, "w1", ROOT_IP, [_header(job, START, w1, Flag.SYNC)]),
        _from(topology, "w1", S1, [_part(job, START - 2, w1), nodata_payload(job, START - 1, w1, 3),
                                   _part(job, START, w1)]),
        _from(topology, "w2", S1, [nodata_payload(job, START - 2, w2, 3), _part(job, START - 1, w2),
                                   _part(job, START, w2), nodata_payload(job, START, w2, 3)]),
    ]


def test_bmv2_refuses_the_other_kind_as_the_model_does_and_stays_up(labs: Labs) -> None:
    got, counters = _crafted_on_both(labs, KIND_SPEC, _kind_batches)
    s1, s6 = counters["s1"], counters["s6"]
    assert _job_cell(s1, JobStat.DROP_KIND_MISMATCH) == 3
    assert _job_cell(s1, JobStat.ABSORBED) == 4 and _job_cell(s1, JobStat.EMITTED) == 1
    assert _job_cell(s1, JobStat.RESENT) == 0
    assert _job_cell(s6, JobStat.ABSORBED) == 1
    assert [InaHeader.unpack(p).seq for p in got["w1"]] == [START]  # the SYNC's answer
    assert not any(got[h] for h in got if h != "w1")

    # Every switch still answers: a normal AllReduce through s1, exact.
    lab = labs.get(ROOT / "topologies" / "figure1.yaml")
    with lab.deployed({**FIGURE1_SPEC, "job_id": 18}) as [(path, job)]:
        results, expected = lab.allreduce(path, job, P * 2 + 3, seed=17, timeout=3.0)
    for w in job.workers:
        assert np.array_equal(results[w], expected), w
