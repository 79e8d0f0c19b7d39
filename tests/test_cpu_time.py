"""The benchmarks' CPU accounting (ina.bench.timing.CpuTime): what processes used
from /proc, by group."""

from __future__ import annotations

import subprocess
import sys

from ina.bench.timing import CpuSampler, CpuTime, cpu_seconds

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


def test_a_samplers_cpu_between_two_instants_is_interpolated_from_its_samples() -> None:
    sampler = CpuSampler({"switches": [], "ranks": []})
    sampler.samples = [(10.0, {"switches": 0.0, "ranks": 1.0}),
                       (11.0, {"switches": 2.0, "ranks": 1.0}),
                       (12.0, {"switches": 2.0, "ranks": 3.0})]
    assert sampler.between(10.5, 11.75) == {"switches": 1.0, "ranks": 1.5}


def test_a_sampler_says_nothing_of_instants_its_samples_do_not_span() -> None:
    sampler = CpuSampler({"ranks": []})
    sampler.samples = [(10.0, {"ranks": 0.0}), (11.0, {"ranks": 1.0})]
    assert sampler.between(9.5, 10.5) is None
    assert sampler.between(10.5, 11.5) is None


def test_a_sampler_samples_a_busy_process_while_it_runs() -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        with CpuSampler({"busy": [busy.pid]}, interval=0.05) as sampler:
            assert busy.stdin is not None and busy.stdout is not None
            busy.stdin.write(b"go\n")
            busy.stdin.flush()
            assert busy.stdout.readline() == b"done\n"
    finally:
        busy.kill()
        busy.wait()
    first, last = sampler.samples[0][0], sampler.samples[-1][0]
    used = sampler.between(first, last)
    assert used is not None and used["busy"] >= 0.25
