"""Timing methods side by side: processes on a lab's hosts started at once, their
reports collected, and the bytes every link carried meanwhile.

A measured process says ``ready`` on stdout once it is set up (imports done,
connections up) and waits for ``go`` on stdin (``inaworker --wait-go`` and the
benchmarks' own rank processes), so that no process's time includes waiting for
another one to start; its last line on stdout is its JSON report.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ina.bench.hostprocess import HostProcess, stop_all
from ina.errors import LabError, UsageError
from ina.spec.topology import Topology

Link = tuple[str, str]  # (from node, to node)
Procs = dict[str, HostProcess]


def wait_for_go() -> None:
    """The measured process's half of ``start_together``: say ``ready`` on stdout and
    wait for a line on stdin, so that its clock starts with every other's."""
    print("ready", flush=True)
    sys.stdin.readline()


def start_together(workers: Procs, timeout: float = 120.0,
                   on_ready: Callable[[], None] = lambda: None) -> None:
    """Once every worker says it is set up (``ready``: its imports done, its
    connections up; all within ``timeout`` seconds), tell them all to go at once, so
    that no worker's time includes waiting for another process to start;
    ``on_ready`` is called just before (what is counted from the start: the
    processes' CPU time)."""
    deadline = time.monotonic() + timeout
    for proc in workers.values():
        proc.ready(b"ready", deadline - time.monotonic())
    on_ready()
    for proc in workers.values():
        proc.go()


def wait_all(workers: Procs, others: Procs, timeout: float) -> dict[str, Any]:
    """Wait (each at most ``timeout`` seconds) for every process to end; the
    workers' last output line is their JSON report. Every process is stopped after."""
    results = {}
    try:
        for name, proc in {**workers, **others}.items():
            lines = [line for line in proc.finish(timeout) if line.strip()]
            if name in workers:
                if not lines:
                    raise LabError(f"{name}: {proc.what} ended without a report")
                results[name] = json.loads(lines[-1])
    finally:
        stop_all({**workers, **others}.values(), grace=0)
    return results


def link_bytes(topology: Topology) -> dict[Link, int]:
    """Bytes sent on each link direction, read from the switch-side interfaces
    (/proc/net/dev: /sys still shows the machine's own namespace in the sandbox)."""
    counters: dict[str, tuple[int, int]] = {}
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, fields = line.partition(":")
        values = fields.split()
        counters[name.strip()] = (int(values[0]), int(values[8]))  # rx, tx bytes
    out: dict[Link, int] = {}
    for sw in topology.switches:
        for port, nb in topology.ports(sw).items():
            rx, tx = counters[f"{sw}-eth{port}"]
            out[(sw, nb.node)] = tx  # the switch sends toward the neighbour
            out[(nb.node, sw)] = rx
    return out


class Traffic:
    """The bytes on every link direction of a lab from when it is made."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.before = link_bytes(topology)

    def since(self) -> dict[Link, int]:
        """Bytes on each link direction since then."""
        after = link_bytes(self.topology)
        return {k: after[k] - self.before.get(k, 0) for k in after}


#: The kernel's clock ticks per second, the unit of /proc/PID/stat's CPU times.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system, every thread) process ``pid`` has used so far;
    0 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rpartition(")")[2].split()  # after the command's name: field 3 on
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime: 14, 15


def cpu_by_kind(pids: dict[str, list[int]]) -> dict[str, float]:
    """The CPU seconds each group of processes has used so far."""
    return {kind: sum(map(cpu_seconds, group)) for kind, group in pids.items()}


class CpuTime:
    """The CPU seconds groups of processes used from when it is made, by group (a
    lab's BMv2 switches, the measured processes on its hosts). Kernel work done in no
    process's name (softirqs between other processes' packets) is in no group."""

    def __init__(self, pids: dict[str, Sequence[int]]):
        self.pids = {kind: list(group) for kind, group in pids.items()}
        self.before = cpu_by_kind(self.pids)

    def since(self) -> dict[str, float]:
        """CPU seconds of each group since then."""
        now = cpu_by_kind(self.pids)
        return {kind: now[kind] - self.before[kind] for kind in now}


class CpuSampler:
    """The CPU seconds groups of processes have used, sampled every ``interval``
    seconds on a thread of its own with the wall clock (``time.time``), so that what
    they used between two instants another process reported (a training run's first
    and last step) can be read afterwards (``between``, interpolated)."""

    def __init__(self, pids: dict[str, Sequence[int]], interval: float = 0.25):
        self.pids = {kind: list(group) for kind, group in pids.items()}
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def _sample(self) -> None:
        self.samples.append((time.time(), cpu_by_kind(self.pids)))

    def _run(self) -> None:
        self._sample()
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> dict[str, float] | None:
        """CPU seconds of each group from ``start`` to ``end`` (wall clock), or None if
        the samples do not span them."""
        if len(self.samples) < 2 or not self.samples[0][0] <= start < end <= self.samples[-1][0]:
            return None
        return {kind: self._at(end, kind) - self._at(start, kind) for kind in self.pids}

    def _at(self, when: float, kind: str) -> float:
        for (t0, c0), (t1, c1) in itertools.pairwise(self.samples):
            if t0 <= when <= t1:
                share = (when - t0) / (t1 - t0) if t1 > t0 else 1.0
                return c0[kind] + share * (c1[kind] - c0[kind])
        raise UsageError(f"{when} is outside the samples")


def busiest(bytes_by_link: dict[Link, int]) -> Link:
    """The link direction that carried the most."""
    return max(bytes_by_link, key=lambda k: bytes_by_link[k])


#: A step (or a call) counts as a stall when it takes more than this many medians.
STALL_MEDIANS = 3.0


@dataclass(frozen=True)
class Tail:
    """Times of a run's steps (or calls): the median, the tail, and the stalls (steps
    over STALL_MEDIANS medians): a training step waits for its slowest call, so a
    median alone hides what a run costs."""

    median: float
    p90: float
    p99: float
    largest: float
    stalls: int
    total: float

    @classmethod
    def of(cls, times: Sequence[float]) -> Tail:
        """Of ``times`` (percentiles by nearest rank); ValueError if there are none."""
        if not times:
            raise UsageError("no times to summarise")
        ordered = sorted(times)

        def rank(p: float) -> float:
            return ordered[max(0, math.ceil(p * len(ordered)) - 1)]

        median = statistics.median(ordered)
        return cls(median, rank(0.90), rank(0.99), ordered[-1],
                   sum(1 for t in ordered if t > STALL_MEDIANS * median), sum(ordered))

    @classmethod
    def of_clock(cls, clock: Sequence[float]) -> Tail:
        """Of the steps whose ends ``clock`` gives, in seconds since the first began."""
        return cls.of([b - a for a, b in zip([0.0, *clock[:-1]], clock, strict=True)])
