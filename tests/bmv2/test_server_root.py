"""A server as the VAT root on Figure 1 (Mininet + BMv2): w5 finishes the
aggregation of s1's and s7's partial results and starts the BIER delivery."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from ina.lab.mininet import wait_until
from ina.protocol.codec import ina_payload
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import Flag, JobStat, SwitchStat
from ina.protocol.frames import Bier, bier_frame

from bmv2.bmv2lab import NetLab
from inatest import FIGURE1

SPEC = {"job_id": 21, "op": "sum", "workers": ["w1", "w2", "w3", "w4"], "root": "w5",
        "aggregators": {"s1": ["w1", "w2"], "s7": ["w3", "w4"]}}


def test_a_server_rooted_job_is_exact_at_every_worker(figure1_lab: NetLab) -> None:
    lab = figure1_lab
    path = lab.write_job(**SPEC)
    job = lab.deploy(path)
    root = lab.lab.host("w5").popen(
        [sys.executable, "-m", "ina.cli.inaroot", "-t", str(FIGURE1), "--job", str(path),
         "--host", "w5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert root.stderr is not None
        assert b"root on w5" in root.stderr.readline()  # listening
        listeners = {h: lab.listen(h) for h in ("w6", "w7", "w8")}
        size = P * 10 + 1
        results, expected = lab.allreduce(path, job, size, seed=1100, extra=["--min-rto", "10"])
        for w in job.workers:
            assert np.array_equal(results[w], expected), w
        assert {h: lab.stop_listening(p) for h, p in listeners.items()} == {
            "w6": 0, "w7": 0, "w8": 0}
        status = lab.controller_call(lambda ctl: ctl.status())
        # s3 takes the server's BIER packets in and passes one copy on per round
        # (11 packets of the array and the call's descriptor).
        assert status["s3"].job_stats[21][JobStat.BIER_RECEIVED].packets == 12
        assert status["s1"].job_stats[21][JobStat.DELIVERED].packets == 24
    finally:
        root.send_signal(signal.SIGTERM)
        out, _ = root.communicate(timeout=10)
        lab.teardown(21)
    stats = json.loads(out.decode().strip().splitlines()[-1])
    assert stats["multicast"] == 12 and stats["absorbed"] == 24 and stats["synced"] == 4


def test_a_result_cut_short_is_dropped_and_a_whole_one_arrives_byte_for_byte(
        figure1_lab: NetLab, tmp_path: Path) -> None:
    lab = figure1_lab
    path = lab.write_job(**SPEC)
    job = lab.deploy(path)
    w5, s3 = lab.topology.hosts["w5"], lab.topology.switches["s3"]
    payload = ina_payload(21, 7, job.abm, list(range(-P // 2, P // 2)), flags=Flag.RESULT)
    whole = bier_frame(w5.mac, s3.mac, w5.ip, Bier(bitstring=job.abm), payload)

    def delivered() -> int:
        status = lab.controller_call(lambda ctl: ctl.status())
        return sum(s.job_stats[21][JobStat.DELIVERED].packets for s in status.values()
                   if 21 in s.job_stats)

    def parser_errors() -> int:
        status = lab.controller_call(lambda ctl: ctl.status())
        return status["s3"].switch_stats[SwitchStat.DROP_PARSER_ERROR].packets

    record = tmp_path / "w1.hex"
    listener = lab.listen("w1", record)
    try:
        before, errors = delivered(), parser_errors()
        lab.send_frames("w5", [whole[:-4], whole])
        wait_until(lambda: delivered() >= before + 4, 10, "the result at every worker")
    finally:
        got = lab.stop_listening(listener)
        lab.teardown(21)
    assert parser_errors() == errors + 1
    assert got == 1
    assert bytes.fromhex(record.read_text()) == payload
