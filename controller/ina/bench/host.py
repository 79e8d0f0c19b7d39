"""The host side against the machine's limit (``inabench host``, ``make bench-host``):
no switch, no lab, no BMv2.

The worker library (ina.host.worker: the Python window) and a plain C loop
(ina.bench.hostloop: its sendmmsg/recvmmsg calls and nothing else, no window, no
timers, no parsing) each run against the same compiled reflector on the loopback,
which answers every packet as a root would; alternating, ``rounds``
times in one run, so that both meet the same machine. Two regimes:

- batched: the reflector answers at once, in batches; the rate (packets/s) and the
  CPU each spends per packet. The worker's rate over the C loop's is the share of
  what the machine allows that the worker reaches (issue 48's goal: >= 0.5x).
- one at a time: the reflector answers a packet at least PACED_GAP apart, as a
  CPU-bound switch sends results; the rate is then the reflector's, and what counts
  is the CPU per result, each a wake of its own (issue 48's goal: <= 2x the C
  loop's). A Python loop that only waits, receives and answers (wake_floor) is
  measured too: what any Python worker pays a wake.

Every figure is the median of the rounds, with the worst round beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ina.bench import hostloop
from ina.bench.allreduce import (
    HOST_WINDOW,
    PACED_GAP,
    PACED_PACKETS,
    HostRate,
    host_rate,
    wake_floor,
)
from ina.bench.goals import Goal
from ina.bench.goals import render as render_goals
from ina.bench.output import pyplot, save
from ina.protocol.constants import ARRAY_BYTES, ELEMS_PER_PACKET, INA_HEADER_BYTES

#: The batched regime's array (values) and the packets of the paced one.
BATCHED_VALUES = 1 << 20
PACKET_BYTES = INA_HEADER_BYTES + ARRAY_BYTES
#: Issue 48's goals: the worker's packets/s over the C loop's, batched; its CPU per
#: result one at a time over the C loop's.
GOAL_RATE_SHARE = 0.5
GOAL_PACED_CPU = 2.0
#: The measurements of a round, as the report and the picture name them.
WORKER, SHARED, C_LOOP = "worker", "worker, shared socket", "C loop"
PACED_WORKER, PY_FLOOR, PACED_C = ("worker, one at a time", "Python loop, one at a time",
                                   "C loop, one at a time")
BATCHED = (WORKER, SHARED, C_LOOP)
PACED = (PACED_WORKER, PY_FLOOR, PACED_C)


def c_loop(packets: int, gap: float = 0.0, inflight: int = HOST_WINDOW) -> HostRate:
    """The C loop's rate and CPU per packet, with the worker's packets and window."""
    r = hostloop.loop(packets, PACKET_BYTES, inflight, gap)
    return HostRate(r["packets"] / r["seconds"], r["packets"] * ELEMS_PER_PACKET / r["seconds"],
                    r["cpu_us_per_packet"], r["kernel_us_per_packet"])


def one_round() -> dict[str, HostRate]:
    """Every measurement once, in turn, each against the reflector."""
    batched_packets = -(-BATCHED_VALUES // ELEMS_PER_PACKET)
    return {
        WORKER: host_rate(BATCHED_VALUES),
        C_LOOP: c_loop(batched_packets),
        SHARED: host_rate(BATCHED_VALUES, shared=True),
        PACED_WORKER: host_rate(PACED_PACKETS * ELEMS_PER_PACKET, gap=PACED_GAP),
        PY_FLOOR: wake_floor(),
        PACED_C: c_loop(PACED_PACKETS, gap=PACED_GAP),
    }


@dataclass(frozen=True)
class Spread:
    """A figure over the rounds: its median and its worst round."""

    median: float
    worst: float

    @classmethod
    def of(cls, values: list[float], higher_is_better: bool) -> Spread:
        return cls(statistics.median(values), min(values) if higher_is_better else max(values))

    def show(self, fmt: str, unit: str = "") -> str:
        return f"{self.median:{fmt}}{unit} (worst {self.worst:{fmt}}{unit})"


@dataclass
class HostFigures:
    """Per round, every measurement; the compiler that built the C loop."""

    rounds: list[dict[str, HostRate]]
    compiler: str
    window: int = HOST_WINDOW
    gap: float = PACED_GAP

    def figures(self) -> dict[str, Any]:
        return {"compiler": self.compiler, "window": self.window, "gap": self.gap,
                "packet_bytes": PACKET_BYTES,
                "rounds": [{k: asdict(v) for k, v in r.items()} for r in self.rounds]}

    @classmethod
    def from_figures(cls, doc: Any) -> HostFigures:
        return cls([{k: HostRate(**v) for k, v in r.items()} for r in doc["rounds"]],
                   str(doc["compiler"]), int(doc["window"]), float(doc["gap"]))

    def rate(self, name: str) -> Spread:
        return Spread.of([r[name].packets_per_s for r in self.rounds], higher_is_better=True)

    def cpu(self, name: str) -> Spread:
        return Spread.of([r[name].cpu_us_per_packet or 0.0 for r in self.rounds],
                         higher_is_better=False)

    def ratio(self, of: Callable[[HostRate], float], a: str, b: str, higher: bool) -> Spread:
        """``of(a) / of(b)`` round by round: the two met the same machine."""
        return Spread.of([of(r[a]) / of(r[b]) for r in self.rounds], higher_is_better=higher)

    def goals(self) -> list[Goal]:
        share = self.ratio(lambda h: h.packets_per_s, WORKER, C_LOOP, higher=True)
        paced = self.ratio(lambda h: h.cpu_us_per_packet or 0.0, PACED_WORKER, PACED_C,
                           higher=False)
        return [Goal("batched", f"the worker's packets/s >= {GOAL_RATE_SHARE:g}x the C loop's",
                     share.show(".2f", "x"), share.median >= GOAL_RATE_SHARE),
                Goal("one at a time", f"the worker's CPU per result <= {GOAL_PACED_CPU:g}x "
                                      "the C loop's", paced.show(".2f", "x"),
                     paced.median <= GOAL_PACED_CPU)]

    def render(self) -> str:
        lines = [f"The host side alone: against a compiled reflector on the loopback, "
                 f"{self.window} packets in flight, {PACKET_BYTES}-byte packets, "
                 f"{len(self.rounds)} round(s) alternating (median, worst round); C loop "
                 f"built by {self.compiler}",
                 "", "batched (answers at once)"]
        for name in BATCHED:
            lines.append(f"  {name:<28} {self.rate(name).show(',.0f')} packets/s, "
                         f"{self.cpu(name).show('.1f')} us CPU/packet")
        lines += ["", f"one at a time (answers >= {self.gap * 1e3:g} ms apart)"]
        for name in PACED:
            lines.append(f"  {name:<28} {self.cpu(name).show('.1f')} us CPU/result")
        share = self.ratio(lambda h: h.packets_per_s, WORKER, C_LOOP, higher=True)
        paced = self.ratio(lambda h: h.cpu_us_per_packet or 0.0, PACED_WORKER, PACED_C,
                           higher=False)
        lines += ["", f"worker vs C loop: {share.show('.2f', 'x')} packets/s batched; "
                      f"{paced.show('.2f', 'x')} CPU per result one at a time"]
        lines += render_goals("\nGoals of issue 48 (the worker against the C loop):",
                              self.goals())
        return "\n".join(lines)

    def plot(self, path: Path) -> None:
        plt = pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        for ax, names, spread, unit in (
                (left, BATCHED, self.rate, "packets/s (batched)"),
                (right, PACED, self.cpu, "us of CPU per result (one at a time)")):
            spreads = [spread(n) for n in names]
            x = range(len(names))
            ax.bar(x, [s.median for s in spreads], 0.6, label="median")
            ax.scatter(x, [s.worst for s in spreads], marker="_", s=200, color="black",
                       label="worst round")
            ax.set_xticks(list(x), [n.replace(", ", "\n") for n in names], fontsize=8)
            ax.set_ylabel(unit)
            ax.legend(fontsize=7)
        left.set_title("one worker against a compiled reflector: the rate", fontsize=9)
        right.set_title("results one at a time: what a wake costs", fontsize=9)
        save(fig, path, f"{len(self.rounds)} rounds alternating on this machine; "
                        f"C loop: {self.compiler}; no switch")


def run(rounds: int = 5) -> HostFigures:
    hostloop.binary()  # built before anything is timed
    return HostFigures([one_round() for _ in range(rounds)], hostloop.compiler_version())
