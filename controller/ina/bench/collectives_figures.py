"""``inabench collectives``' figures: its cases through JSON and back, as text
(with the goals, ina.bench.collectives_goals) and as a picture."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ina.bench.collective_rank import OWNED, OWNED_COLLECTIVES
from ina.bench.collectives_goals import cpu_goals, goals, owner_goals, unlimited_speed_goals
from ina.bench.collectives_plan import (
    ARRAY_COLLECTIVES,
    BARRIER_REPEAT,
    BIER_WIRE_PER_VALUE,
    BIER_WIRE_PER_VALUE16,
    METHODS,
    NAMES,
    CollectiveRun,
    CollectivesCase,
    CollectivesRegime,
)
from ina.bench.goals import render as render_goals
from ina.bench.onlab import (
    INA_WIRE_PER_VALUE,
)
from ina.bench.output import (
    cases_from_figures,
    describe_regime,
    pyplot,
    regime_title,
    save,
)
from ina.protocol.constants import ELEMS_PER_PACKET

# --- Figures (JSON) ----------------------------------------------------------------------


@dataclass
class CollectivesFigures:
    """What ``inabench collectives`` measured, the BMv2 build and torch's version."""

    cases: list[CollectivesCase]
    bmv2: str
    torch: str

    def figures(self) -> dict[str, Any]:
        """As JSON-ready data (docs/collectives.json); the goals are derived, for readers."""
        return {"bmv2": self.bmv2, "torch": self.torch,
                "cases": [asdict(c) for c in self.cases],
                "goals": [asdict(x) for c in self.cases
                          for x in (*goals(c), *owner_goals(c), *unlimited_speed_goals(c),
                                    *cpu_goals(c))]}

    @classmethod
    def from_figures(cls, doc: Any) -> CollectivesFigures:
        """From ``figures()``'s data (KeyError or TypeError if it is not that)."""
        cases = cases_from_figures(doc["cases"], CollectivesCase, CollectivesRegime,
                                   CollectiveRun)
        return cls(cases, str(doc["bmv2"]), str(doc["torch"]))

    # --- text ---------------------------------------------------------------------------

    def render(self) -> str:
        lines = [f"Collectives on Mininet + {self.bmv2}; gloo of torch {self.torch}. One run: "
                 "every method on the same network and the same arrays, each measurement "
                 "starting every rank at once and taking the slowest rank's time; bytes per "
                 "value of S from the switches' interface counters.", ""]
        for c in self.cases:
            n = len(c.workers)
            lines.append(f"{c.case} ({c.topology}): {n} workers ({', '.join(c.workers)}); "
                         f"S = {c.size:,} float32 values (Allgather: S/{n} from each worker; "
                         f"Reduce-scatter: S/{n} to each); Broadcast from and Reduce to rank "
                         f"0; INA VAT (planned): {c.vat}; {c.slots} slots.")
            for g in c.regimes:
                lines += self._regime(c, g)
            lines.append("")
        lines.append(f"Per value on the wire with INA: {INA_WIRE_PER_VALUE:.2f} bytes on a host "
                     f"link ({ELEMS_PER_PACKET} 32-bit values a packet), "
                     f"{BIER_WIRE_PER_VALUE:.2f} inside BIER; 16-bit elements "
                     f"{INA_WIRE_PER_VALUE / 2:.2f} and {BIER_WIRE_PER_VALUE16:.2f}. INA/x: "
                     "INA's speed over x's in the same run. hosts (ring): the ring on hosts "
                     "the fallback uses, which moves the whole array whatever the collective.")
        lines += ["", *render_goals("Goals of issue 17 (rate-limited links), against this run:",
                                    (x for c in self.cases for x in goals(c)))]
        lines += ["", *render_goals("Goals of issue 24 (one owner's chunks, rate-limited "
                                    "links; speed and CPU per value, links unlimited), "
                                    "against this run:",
                                    (x for c in self.cases
                                     for x in (*owner_goals(c), *unlimited_speed_goals(c),
                                               *cpu_goals(c))))]
        return "\n".join(lines)

    def _regime(self, c: CollectivesCase, g: CollectivesRegime) -> list[str]:
        lines = [f"  {describe_regime(g.rate_mbit)}:",
                 f"    {'collective':<15}{'method':<14}{'seconds':>8}{'values/s':>12}"
                 f"{'INA/x':>7}   {'busiest link':<18}{'B/value':>7}{'up max':>8}"
                 f"{'down max':>9}  check (every rank)"]
        for k in ARRAY_COLLECTIVES:
            for m in (*METHODS, *((OWNED,) if k in OWNED_COLLECTIVES else ())):
                r = g.run(k, m)
                if r is not None:
                    ratio = None if m == "INA" else g.ratio(g.run(k, "INA"), r)
                    lines.append(self._row(NAMES[k], r, ratio))
                else:
                    lines.append(f"    {NAMES[k]:<15}{m:<14}not run")
        lines.append("    each worker's uplink/downlink, bytes per value:")
        for r in g.runs:
            if r.collective != "barrier":
                per = " ".join(f"{w} {r.uplink_bytes_per_value[w]:.2f}/"
                               f"{r.downlink_bytes_per_value[w]:.2f}" for w in c.workers)
                what = NAMES[r.collective] + ("" if r.dtype == "float32" else f" {r.dtype}")
                lines.append(f"      {what:<20}{r.label:<14}{per}")
        sixteen = g.run("allreduce", "INA", "float16", 16)
        lines.append("    AllReduce of a float16 array:")
        for r in g.runs:
            if r.collective == "allreduce" and r.dtype == "float16":
                lines.append(self._row("float16", r,
                                       None if r is sixteen else g.ratio(sixteen, r)))
        thirty_two = g.run("allreduce", "INA", "float16", 32)
        gloo16 = g.run("allreduce", "gloo", "float16")
        lines.append(f"    ratios (same run): 16-bit/32-bit {_ratio(g.ratio(sixteen, thirty_two))}"
                     f", 16-bit/gloo float16 {_ratio(g.ratio(sixteen, gloo16))}")
        lines += self._cpu(g)
        barriers = [r for r in g.runs if r.collective == "barrier"]
        lines.append(f"    Barrier, mean of {BARRIER_REPEAT} in a row: " + ", ".join(
            f"{r.label} {r.seconds * 1000:.1f} ms" + ("" if r.ok else " (FAILED)")
            for r in barriers))
        return lines

    @staticmethod
    def _cpu(g: CollectivesRegime) -> list[str]:
        """CPU microseconds per value of S, by kind of process, INA against gloo."""
        if not any(r.cpu_us_per_value() for r in g.runs):
            return []
        lines = ["    CPU per value of S (us: BMv2 switches + ranks = total):"]
        for k in ARRAY_COLLECTIVES:
            parts = []
            for m in ("INA", "gloo"):
                r = g.run(k, m)
                us = None if r is None else r.cpu_us_per_value()
                parts.append(f"{m} " + ("not measured" if us is None else
                                        f"{us[0]:.2f} + {us[1]:.2f} = {sum(us):.2f}"))
            lines.append(f"      {NAMES[k]:<15}" + "   ".join(parts))
        return lines

    @staticmethod
    def _row(what: str, r: CollectiveRun, x: float | None) -> str:
        link = f"{r.busiest_link[0]}->{r.busiest_link[1]}"
        check = ("exact" if r.max_error == 0 else f"within bound (max error {r.max_error:.1e})"
                 ) if r.ok else r.failure()
        if r.retransmissions:
            check += f"; {r.retransmissions} retransmissions"
        return (f"    {what:<15}{r.label:<14}{r.seconds:>8.2f}{r.values_per_s:>12,.0f}"
                f"{_ratio(x):>7}   {link:<18}{r.busiest_bytes_per_value:>7.2f}"
                f"{max(r.uplink_bytes_per_value.values()):>8.2f}"
                f"{max(r.downlink_bytes_per_value.values()):>9.2f}  {check}")

    # --- picture --------------------------------------------------------------------------

    def plot(self, path: Path) -> None:
        """Per case and regime, a column: values per second of every collective by each
        method (INA's speed over the others' on their bars), bytes per value on the
        busiest link, and the float16 AllReduce three ways."""
        import numpy as np

        plt = pyplot()

        colors = {"INA": "#1b5e20", "gloo": "#b0413e", "hosts": "#2a7ab0"}
        panels = [(c, g) for c in self.cases for g in c.regimes]
        fig, axes = plt.subplots(3, len(panels), figsize=(5.2 * len(panels), 10.5),
                                 squeeze=False)
        x = np.arange(len(ARRAY_COLLECTIVES))
        bar = 0.27
        for col, (c, g) in enumerate(panels):
            top, middle, bottom = (axes[row][col] for row in range(3))
            for i, m in enumerate(METHODS):
                runs = [g.run(k, m) for k in ARRAY_COLLECTIVES]
                rates = [0.0 if r is None or not r.ok else r.values_per_s for r in runs]
                per = [0.0 if r is None else r.busiest_bytes_per_value for r in runs]
                label = "hosts (ring)" if m == "hosts" else m
                bars = top.bar(x + (i - 1) * bar, rates, bar, color=colors[m], label=label)
                for b, k, r in zip(bars, ARRAY_COLLECTIVES, runs, strict=True):
                    ratio = g.ratio(g.run(k, "INA"), r)
                    text = ("not run" if r is None else "FAILED" if not r.ok else
                            f"{b.get_height() / 1000:,.0f}k" if m == "INA" else _ratio(ratio))
                    top.annotate(text, (b.get_x() + b.get_width() / 2, b.get_height()),
                                 ha="center", va="bottom", fontsize=6, rotation=90)
                middle.bar(x + (i - 1) * bar, per, bar, color=colors[m], label=label)
            top.set_title(f"{c.case}: {len(c.workers)} workers, S = {c.size:,} float32\n"
                          f"{regime_title(g.rate_mbit)}", fontsize=9)
            top.set_ylim(0, top.get_ylim()[1] * 1.3)
            barriers = ", ".join(f"{r.label} {r.seconds * 1000:.1f} ms" for r in g.runs
                                 if r.collective == "barrier")
            top.text(0.01, 0.97, f"Barrier: {barriers}", transform=top.transAxes, fontsize=6,
                     va="top")
            for ax in (top, middle):
                ax.set_xticks(x, [NAMES[k] for k in ARRAY_COLLECTIVES], fontsize=7)
            sixteen = g.run("allreduce", "INA", "float16", 16)
            fp16 = [r for r in g.runs if r.collective == "allreduce" and r.dtype == "float16"]
            bars = bottom.bar([r.label for r in fp16],
                              [r.values_per_s if r.ok else 0.0 for r in fp16],
                              color=[colors[r.method] for r in fp16])
            for b, r in zip(bars, fp16, strict=True):
                text = "FAILED" if not r.ok else (
                    f"{r.values_per_s / 1000:,.0f}k, {r.busiest_bytes_per_value:.2f} B/value"
                    if r is sixteen else f"INA 16-bit: {_ratio(g.ratio(sixteen, r))}")
                bottom.annotate(text, (b.get_x() + b.get_width() / 2, b.get_height()),
                                ha="center", va="bottom", fontsize=7)
            bottom.set_ylim(0, bottom.get_ylim()[1] * 1.2)
            bottom.set_title("AllReduce of a float16 array", fontsize=8)
            if col == 0:
                top.set_ylabel("values per second (higher is better);\n"
                               "on a bar: INA's speed over that method's", fontsize=8)
                middle.set_ylabel("bytes on the busiest link\nper value (lower is better)",
                                  fontsize=8)
                bottom.set_ylabel("values per second", fontsize=8)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=len(METHODS), fontsize=8)
        save(fig, path, f"{self.bmv2}; torch {self.torch}", dpi=110, rect=(0, 0.02, 1, 0.965))


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"
