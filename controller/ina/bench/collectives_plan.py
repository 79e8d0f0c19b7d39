"""What ``inabench collectives`` measures (ina.bench.collectives): the collectives
and methods, each regime's plan of commands, and the records of what was measured
(a run per command, a regime's runs, a case's regimes), which its goals
(ina.bench.collectives_goals) and figures (ina.bench.collectives_figures) read."""

from __future__ import annotations

from dataclasses import dataclass, field

from ina.bench.collective_rank import OWNED, OWNED_COLLECTIVES, Command
from ina.bench.onlab import INA_WIRE_PER_VALUE
from ina.bench.timing import Link
from ina.protocol.constants import BIER_HEADER_BYTES, ELEMS16_PER_PACKET, ELEMS_PER_PACKET

#: The collectives with an array, in the order they are run and shown.
ARRAY_COLLECTIVES = ("broadcast", "reduce", "reduce_scatter", "allgather", "allreduce")
METHODS = ("INA", "gloo", "hosts")
NAMES = {"broadcast": "Broadcast", "reduce": "Reduce", "reduce_scatter": "Reduce-scatter",
         "allgather": "Allgather", "allreduce": "AllReduce", "barrier": "Barrier"}
#: Barriers in a row per measurement (their mean is the latency).
BARRIER_REPEAT = 10
#: A 32-bit data packet inside BIER, per value (a host link's is INA_WIRE_PER_VALUE).
BIER_WIRE_PER_VALUE = INA_WIRE_PER_VALUE + BIER_HEADER_BYTES / ELEMS_PER_PACKET
#: The same with 16-bit elements.
BIER_WIRE_PER_VALUE16 = BIER_WIRE_PER_VALUE * ELEMS_PER_PACKET / ELEMS16_PER_PACKET


@dataclass
class CollectiveRun:
    """One collective by one method, measured: ``seconds`` is the slowest rank's (a
    Barrier's: per barrier), bytes are per value of S on the interface counters."""

    collective: str
    method: str  # INA, gloo or hosts
    dtype: str  # float32 or float16
    width: int | None  # INA's elements (bits); None: the type's default / not INA
    seconds: float
    values_per_s: float  # S / seconds (0 for a Barrier)
    busiest_link: Link
    busiest_bytes_per_value: float
    all_links_bytes_per_value: float
    uplink_bytes_per_value: dict[str, float]  # per worker: worker -> its edge switch
    downlink_bytes_per_value: dict[str, float]  # its edge switch -> worker
    correct: bool  # at every rank
    max_error: float  # largest difference from the exact result, of every rank
    retransmissions: int = 0
    on_hosts: int = 0  # ranks whose call through the switches ran on hosts instead
    errors: list[str] = field(default_factory=list)
    #: CPU seconds over the measurement: every BMv2 switch's process, every rank's.
    switch_cpu_s: float = 0.0
    rank_cpu_s: float = 0.0
    values: int = 0  # values the measurement moved: S per repetition

    @property
    def label(self) -> str:
        if self.method == "INA" and self.width is not None:
            return f"INA {self.width}-bit"
        if self.method == "gloo" and self.dtype != "float32":
            return f"gloo {self.dtype}"
        return "hosts (ring)" if self.method == "hosts" else self.method

    @property
    def ok(self) -> bool:
        return self.correct and not self.errors and self.on_hosts == 0

    def failure(self) -> str:
        """What went wrong (for a run not ``ok``)."""
        if self.errors:
            return "FAILED: " + self.errors[0][:120]
        if self.on_hosts:
            return f"ran on hosts at {self.on_hosts} ranks (not through the switches)"
        return f"WRONG (max error {self.max_error:.1e})"

    def cpu_us_per_value(self) -> tuple[float, float] | None:
        """(BMv2 switches, ranks) CPU microseconds per value of S (None: not measured)."""
        if not self.values or not (self.switch_cpu_s or self.rank_cpu_s):
            return None
        return (self.switch_cpu_s / self.values * 1e6, self.rank_cpu_s / self.values * 1e6)

    def busiest_line_rate(self, rate_mbit: float) -> float:
        """The busiest link's bytes per second over its line rate."""
        return self.busiest_bytes_per_value * self.values_per_s / (rate_mbit * 1e6 / 8)


@dataclass
class CollectivesRegime:
    regime: str  # "cpu" (links unlimited) or "link" (every link rate-limited)
    rate_mbit: float | None
    runs: list[CollectiveRun]

    def run(self, collective: str, method: str, dtype: str = "float32",
            width: int | None = None) -> CollectiveRun | None:
        return next((r for r in self.runs if (r.collective, r.method, r.dtype, r.width)
                     == (collective, method, dtype, width)), None)

    def ratio(self, a: CollectiveRun | None, b: CollectiveRun | None) -> float | None:
        """``a``'s speed over ``b``'s (None if either is missing or failed)."""
        if a is None or b is None or not a.ok or not b.ok:
            return None
        return b.seconds / a.seconds


@dataclass
class CollectivesCase:
    case: str
    topology: str
    workers: list[str]
    vat: str
    size: int  # S: values per collective
    slots: int
    regimes: list[CollectivesRegime] = field(default_factory=list)


# --- The plan of one regime ------------------------------------------------------------


def commands(size: int) -> list[Command]:
    """What one regime measures, in order."""
    plan = [Command(m, c, size) for c in ARRAY_COLLECTIVES
            for m in (*METHODS, *((OWNED,) if c in OWNED_COLLECTIVES else ()))]
    plan += [Command(m, "barrier", 1, repeat=BARRIER_REPEAT) for m in METHODS]
    plan += [Command("INA", "allreduce", size, "float16", 16),
             Command("INA", "allreduce", size, "float16", 32),
             Command("gloo", "allreduce", size, "float16")]
    return plan


