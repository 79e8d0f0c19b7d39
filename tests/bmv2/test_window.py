"""One packet from a member does not freeze its job (Figure 1 on Mininet + BMv2): a
call of every worker (``inaworker``), raw frames from w1 that once froze the job,
then the next call, exact. See aggregation.p4, "The window"; tests/test_window.py
has the same on the model. Run with `make test`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from ina.host.arrays import random_array
from ina.protocol.codec import InaHeader, InaPacket
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import Flag, JobStat, Op
from ina.protocol.frames import ina_frame
from ina.spec.job import DEFAULT_SLOTS, Job

from bmv2.bmv2lab import Deployed, NetLab
from inatest import FIGURE1_SPEC

ROOT_IP = "10.0.100.6"  # s6
SIZE = P * 2 + 3  # three packets a worker
#: Fresh workers start the first call at 0: the descriptor, then the array.
PROGRESS = 3  # the root's progress after the first call
W = DEFAULT_SLOTS  # the jobs' slots
NEXT_START = PROGRESS + 2 * W + 1
#: w1 and w2 send to the root s6 directly (s7 aggregates w3, w4).
ROOT_PARENT_SPEC = {**FIGURE1_SPEC, "job_id": 3, "aggregators": {"s7": ["w3", "w4"]}}


class Frame(NamedTuple):
    """An INA packet a worker of the job sends by hand: its own P-BM, ``values``
    (their count in the header), to ``dst``."""

    host: str
    dst: str
    seq: int
    values: tuple[int, ...] = ()
    op: Op = Op.SUM
    flags: Flag = Flag.NONE


@dataclass
class Crafted:
    """A job deployed on Figure 1 (conftest's ``deployed``), and frames crafted by
    hand between two calls of every worker."""

    lab: NetLab
    path: Path
    job: Job

    def between_calls(self, seeds: tuple[int, int], frames: list[Frame],
                      until: tuple[str, JobStat], counts: dict[Frame, int] | None = None
                      ) -> None:
        """A call of every worker, exact; ``frames`` (``counts``: a header count other
        than the values'); once the switch ``until`` names has counted one more of
        its counter (the frames are through), or after 10 s, the next call, exact."""
        self._call_exact(seeds[0])
        switch, stat = until
        before = self.stat(switch, stat)
        for f in frames:
            self._send(f, (counts or {}).get(f))
        deadline = time.monotonic() + 10
        while self.stat(switch, stat) <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        self._call_exact(seeds[1])

    def stat(self, switch: str, stat: JobStat) -> int:
        status = self.lab.controller_call(lambda ctl: ctl.status())
        return status[switch].job_stats[self.job.job_id][stat].packets

    def _call_exact(self, seed: int) -> None:
        results, expected = self.lab.allreduce(self.path, self.job, SIZE, seed=seed,
                                               timeout=3.0)
        for w in self.job.workers:
            assert np.array_equal(results[w], expected), w

    def _send(self, f: Frame, count: int | None = None) -> None:
        topology = self.lab.topology
        h = topology.hosts[f.host]
        edge, _ = topology.host_attachment(f.host)
        header = InaHeader(job_id=self.job.job_id, seq=f.seq, pbm=h.bit,
                           count=len(f.values) if count is None else count,
                           op=f.op, flags=f.flags)
        payload = InaPacket(header, f.values).pack() if f.values else header.pack()
        self.lab.send_frames(f.host, [ina_frame(h.mac, topology.switches[edge].mac, h.ip, f.dst,
                                                payload)])


@pytest.fixture
def crafted(figure1_lab: NetLab, deployed: Deployed) -> Crafted:
    ((path, job),) = deployed
    return Crafted(figure1_lab, path, job)


def test_an_abort_far_ahead_is_dropped_and_the_next_call_is_exact(crafted: Crafted) -> None:
    crafted.between_calls((1, 2), [Frame("w1", ROOT_IP, PROGRESS + 2**31 - 1,
                                         flags=Flag.SYNC | Flag.ABORT)],
                          until=("s6", JobStat.DROP_ABORT_AHEAD))
    assert crafted.stat("s6", JobStat.DROP_ABORT_AHEAD) == 1


@pytest.mark.parametrize("deployed", [[ROOT_PARENT_SPEC]], indirect=True)
def test_a_contribution_far_ahead_is_dropped_at_the_root_and_the_next_call_is_exact(
        crafted: Crafted) -> None:
    # In the cell of the next call's first packet, many laps ahead.
    ahead = Frame("w1", ROOT_IP, NEXT_START + 2 * W * 2**20, (7,))
    crafted.between_calls((3, 4), [ahead], until=("s6", JobStat.DROP_AHEAD))
    assert crafted.stat("s6", JobStat.DROP_AHEAD) == 1


def test_a_round_far_ahead_below_the_root_gives_way_to_the_next_call(
        crafted: Crafted) -> None:
    # s1 aggregates w1 and w2; it cannot know the root's progress.
    ahead = Frame("w1", "10.0.100.1", NEXT_START + 2 * W * 2**20, (7,))
    crafted.between_calls((5, 6), [ahead], until=("s1", JobStat.ABSORBED))
    assert crafted.stat("s1", JobStat.DROP_STALE) == 0


@pytest.mark.parametrize("deployed", [[ROOT_PARENT_SPEC]], indirect=True)
def test_a_foreign_op_in_an_incomplete_cell_is_dropped_and_the_next_call_is_exact(
        crafted: Crafted) -> None:
    seq = PROGRESS + 1  # w2 starts a round there, which stays incomplete
    crafted.between_calls((7, 8), [Frame("w2", ROOT_IP, seq, (1, 2)),
                                   Frame("w1", ROOT_IP, seq, (1, 2), Op.MAX)],
                          until=("s6", JobStat.DROP_OP_MISMATCH))
    assert crafted.stat("s6", JobStat.DROP_OP_MISMATCH) == 1


def test_a_members_frame_with_a_corrupted_count_does_not_hold_up_the_call(
        crafted: Crafted) -> None:
    # w1's first chunk of the next call (the call's array follows its descriptor at
    # NEXT_START), its count byte corrupted, reaches s1 first: the round it starts
    # takes w2's chunk (a round takes no count) and the call completes exact.
    own = tuple(int(v) for v in random_array(SIZE, 6)[:P])  # w1's, the seeds' first
    corrupted = Frame("w1", "10.0.100.1", NEXT_START + 1, own)
    crafted.between_calls((5, 6), [corrupted], until=("s1", JobStat.ABSORBED),
                          counts={corrupted: 7})
