"""The benchmarks' CPU accounting (ina.bench.timing.CpuTime): what processes used
from /proc, by group."""

from __future__ import annotations

import subprocess
import sys

from ina.bench.timing import CpuTime, cpu_seconds

#: Waits for a line, then burns 0.3 s of CPU, says so, and waits again.
BUSY = ("import sys, time\nsys.stdin.readline()\nend = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\nprint('done', flush=True)\nsys.stdin.readline()")
IDLE = "import sys\nsys.stdin.readline()\nsys.stdin.readline()"


def test_a_busy_process_is_counted_in_its_group_and_an_idle_one_is_not() -> None:
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE) for code in (BUSY, IDLE)]
    busy, idle = procs
    try:
        counted = CpuTime({"busy": [busy.pid], "idle": [idle.pid]})
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        assert busy.stdout is not None and busy.stdout.readline() == b"done\n"
        used = counted.since()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert used["busy"] >= 0.25
    assert used["idle"] < 0.05


def test_a_process_that_is_gone_counts_nothing() -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()  # reaped: its /proc entry is gone
    assert cpu_seconds(done.pid) == 0.0
