"""What every benchmark's figures become: JSON (written by ``--json-out``, read
back by ``--from-json``), the words of a report, and pictures (PNG, matplotlib).

A benchmark's figures are one object (``Figures``) that gives its JSON-ready data,
is made again from that data alone, and renders its text; ``Drawn`` figures also
draw a picture. ``inabench`` reports figures measured now and figures read from a
file by the same path.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ina.control.watch import WatchOptions
from ina.errors import UsageError
from ina.protocol.constants import INA_VERSION

if TYPE_CHECKING:
    from matplotlib.figure import Figure

C = TypeVar("C")
G = TypeVar("G")
R = TypeVar("R")
#: The colour of the small print under a picture (the BMv2 build, versions).
FOOTNOTE_COLOR = "#555555"


class Figures(Protocol):
    def figures(self) -> Any:
        """As JSON-ready data."""

    def render(self) -> str:
        """As text for people."""


@runtime_checkable
class Drawn(Protocol):
    def plot(self, path: Path) -> None:
        """Draw the figures as a PNG file at ``path``."""


# --- JSON --------------------------------------------------------------------------------


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def stamped(doc: Any) -> Any:
    """Figures measured now (``doc``, a benchmark's JSON-ready data) with when and on
    which INA version ("measured"), so that every page quoting them can say so; figures
    already stamped (read back with --from-json) keep theirs."""
    if not isinstance(doc, dict) or "measured" in doc:
        return doc
    return {**doc, "measured": {"ina_version": INA_VERSION,
                                "date": datetime.datetime.now(datetime.UTC).date().isoformat()}}


def measured_line(doc: Any) -> str | None:
    """"Measured: INA version N, date, BMv2 build" for stamped figures, else None
    (figures written before the stamp)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("measured"), dict):
        return None
    when = doc["measured"]
    line = f"Measured: INA version {when.get('ina_version', '?')}, {when.get('date', '?')}"
    return line + (f", BMv2 {doc['bmv2']}" if doc.get("bmv2") else "")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read figures from {path}: {exc}") from exc


def cases_from_figures(cases: list[dict[str, Any]], case: Callable[..., C],
                       regime: Callable[[str, float | None, list[R]], G],
                       run: Callable[..., R]) -> list[C]:
    """Cases, each with its regimes, each with its runs (each with its busiest link),
    from their JSON data: what ``inabench allreduce`` and ``collectives`` write."""
    return [case(**{**c, "regimes": [
        regime(g["regime"], g["rate_mbit"],
               [run(**{**r, "busiest_link": tuple(r["busiest_link"])}) for r in g["runs"]])
        for g in c["regimes"]]}) for c in cases]


def watch_figures(options: WatchOptions) -> dict[str, float]:
    """The watcher's options a benchmark ran with, as JSON-ready data."""
    return {"interval": options.interval, "detect_after": options.detect_after,
            "hang_after": options.hang_after}


# --- Words -------------------------------------------------------------------------------


def describe_regime(rate_mbit: float | None) -> str:
    """A benchmark's regime in words: links unlimited, or every link's rate."""
    return ("links unlimited (CPU-bound)" if rate_mbit is None
            else f"every link limited to {rate_mbit:g} Mbit/s (htb)")


def regime_title(rate_mbit: float | None) -> str:
    """The same, shorter, in a picture's title."""
    return ("links unlimited (CPU-bound)" if rate_mbit is None
            else f"every link {rate_mbit:g} Mbit/s")


# --- Pictures ----------------------------------------------------------------------------


def pyplot() -> Any:
    """matplotlib.pyplot, drawing to files only (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Figure, path: Path, footnote: str, *, dpi: int = 120,
         rect: tuple[float, float, float, float] = (0, 0.02, 1, 1),
         footnote_y: float = 0.005) -> None:
    """Write ``fig`` to ``path`` (its directory made), the footnote in small print at
    the bottom left, the panels laid out within ``rect`` (left, bottom, right, top,
    as fractions of the figure); then close it."""
    import matplotlib.pyplot as plt

    fig.text(0.01, footnote_y, footnote, fontsize=6, color=FOOTNOTE_COLOR)
    fig.tight_layout(rect=rect)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
