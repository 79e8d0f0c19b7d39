"""One packet from a member does not freeze its job (Figure 1 on Mininet + BMv2): a
call of every worker (``inaworker``), raw frames from w1 that once froze the job,
then the next call, exact. See aggregation.p4, "The window"; tests/test_window.py
has the same on the model. Run with `make test`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from ina.protocol.bitmaps import bit_of
from ina.protocol.codec import InaHeader, InaPacket
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import Flag, JobStat, Op
from ina.protocol.frames import ina_frame
from ina.spec.job import Job

from bmv2.bmv2lab import NetLab
from inatest import FIGURE1_SPEC

ROOT_IP = "10.0.100.6"  # s6
SIZE = P * 2 + 3  # three packets a worker
#: Fresh workers start the first call at 0: the descriptor, then the array.
PROGRESS = 3  # the root's progress after the first call
W = 16  # the jobs' slots
NEXT_START = PROGRESS + 2 * W + 1
#: w1 and w2 send to the root s6 directly (s7 aggregates w3, w4).
ROOT_PARENT_SPEC = {**FIGURE1_SPEC, "job_id": 3, "aggregators": {"s7": ["w3", "w4"]}}


def _call_exact(lab: NetLab, path: Path, job: Job, seed: int) -> None:
    results, expected = lab.allreduce(path, job, SIZE, seed=seed, timeout=3.0)
    for w in job.workers:
        assert np.array_equal(results[w], expected), w


def _stat(lab: NetLab, switch: str, job_id: int, stat: JobStat) -> int:
    status = lab.controller_call(lambda ctl: ctl.status())
    return status[switch].job_stats[job_id][stat].packets


def _wait_for(lab: NetLab, switch: str, job_id: int, stat: JobStat, count: int) -> None:
    """Until the switch has counted ``count`` of ``stat`` for the job (the frames are
    through), or 10 s."""
    deadline = time.monotonic() + 10
    while _stat(lab, switch, job_id, stat) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def _send(lab: NetLab, host: str, dst: str, header: InaHeader,
          values: tuple[int, ...] = ()) -> None:
    h = lab.topology.hosts[host]
    edge, _ = lab.topology.host_attachment(host)
    payload = InaPacket(header, values).pack() if values else header.pack()
    lab.send_frames(host, [ina_frame(h.mac, lab.topology.switches[edge].mac, h.ip, dst,
                                     payload)])


def _deployed(lab: NetLab, spec: dict[str, Any]) -> tuple[Path, Job]:
    path = lab.write_job(**spec)
    return path, lab.deploy(path)


def test_an_abort_far_ahead_is_dropped_and_the_next_call_is_exact(figure1_lab: NetLab) -> None:
    path, job = _deployed(figure1_lab, FIGURE1_SPEC)
    try:
        _call_exact(figure1_lab, path, job, seed=1)
        _send(figure1_lab, "w1", ROOT_IP, InaHeader(
            job_id=job.job_id, seq=PROGRESS + 2**31 - 1, pbm=bit_of(1), count=0,
            flags=Flag.SYNC | Flag.ABORT))
        _wait_for(figure1_lab, "s6", job.job_id, JobStat.DROP_ABORT_AHEAD, 1)
        _call_exact(figure1_lab, path, job, seed=2)
        assert _stat(figure1_lab, "s6", job.job_id, JobStat.DROP_ABORT_AHEAD) == 1
    finally:
        figure1_lab.teardown(job.job_id)


def test_a_contribution_far_ahead_is_dropped_at_the_root_and_the_next_call_is_exact(
        figure1_lab: NetLab) -> None:
    path, job = _deployed(figure1_lab, ROOT_PARENT_SPEC)
    try:
        _call_exact(figure1_lab, path, job, seed=3)
        # In the cell of the next call's first packet, many laps ahead.
        _send(figure1_lab, "w1", ROOT_IP, InaHeader(
            job_id=job.job_id, seq=NEXT_START + 2 * W * 2**20, pbm=bit_of(1), count=1), (7,))
        _wait_for(figure1_lab, "s6", job.job_id, JobStat.DROP_AHEAD, 1)
        _call_exact(figure1_lab, path, job, seed=4)
        assert _stat(figure1_lab, "s6", job.job_id, JobStat.DROP_AHEAD) == 1
    finally:
        figure1_lab.teardown(job.job_id)


def test_a_round_far_ahead_below_the_root_gives_way_to_the_next_call(
        figure1_lab: NetLab) -> None:
    # s1 aggregates w1 and w2; it cannot know the root's progress.
    path, job = _deployed(figure1_lab, FIGURE1_SPEC)
    try:
        _call_exact(figure1_lab, path, job, seed=5)
        absorbed = _stat(figure1_lab, "s1", job.job_id, JobStat.ABSORBED)
        _send(figure1_lab, "w1", "10.0.100.1", InaHeader(
            job_id=job.job_id, seq=NEXT_START + 2 * W * 2**20, pbm=bit_of(1), count=1), (7,))
        _wait_for(figure1_lab, "s1", job.job_id, JobStat.ABSORBED, absorbed + 1)
        _call_exact(figure1_lab, path, job, seed=6)
        assert _stat(figure1_lab, "s1", job.job_id, JobStat.DROP_STALE) == 0
    finally:
        figure1_lab.teardown(job.job_id)


def test_a_foreign_count_or_op_in_an_incomplete_cell_is_dropped_and_the_next_call_is_exact(
        figure1_lab: NetLab) -> None:
    path, job = _deployed(figure1_lab, ROOT_PARENT_SPEC)
    try:
        _call_exact(figure1_lab, path, job, seed=7)
        seq = PROGRESS + 1  # w2 starts a round there, which stays incomplete
        _send(figure1_lab, "w2", ROOT_IP, InaHeader(
            job_id=job.job_id, seq=seq, pbm=bit_of(2), count=2), (1, 2))
        _send(figure1_lab, "w1", ROOT_IP, InaHeader(
            job_id=job.job_id, seq=seq, pbm=bit_of(1), count=3), (1, 2, 3))
        _send(figure1_lab, "w1", ROOT_IP, InaHeader(
            job_id=job.job_id, seq=seq, pbm=bit_of(1), count=2, op=Op.MAX), (1, 2))
        _wait_for(figure1_lab, "s6", job.job_id, JobStat.DROP_OP_MISMATCH, 1)
        _call_exact(figure1_lab, path, job, seed=8)
        assert _stat(figure1_lab, "s6", job.job_id, JobStat.DROP_COUNT_MISMATCH) == 1
        assert _stat(figure1_lab, "s6", job.job_id, JobStat.DROP_OP_MISMATCH) == 1
    finally:
        figure1_lab.teardown(job.job_id)
