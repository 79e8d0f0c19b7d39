"""inabench's figures, measured now or read from a file (--from-json), reported the
same way: printed as text or JSON, written, drawn."""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

from ina.bench.output import Drawn, Figures, measured_line, write_json

# --- Figures: measured now or read from a file, reported the same way ---------------------


#: The class of each benchmark's figures, MODULE.CLASS in ina.bench.
FIGURES = {"allreduce": "allreduce.AllreduceFigures", "loss": "loss.LossFigures",
           "dataplane": "dataplane.DataplaneReport", "failover": "failover.FailoverFigures",
           "train": "train.TrainFigures", "collectives": "collectives_figures.CollectivesFigures",
           "soak": "soak_figures.SoakFigures", "congestion": "congestion.CongestionRun",
           "accuracy": "accuracy.AccuracyFigures", "host": "host.HostFigures"}


def _read(cmd: str, doc: Any) -> Figures:
    """``cmd``'s figures from their JSON data (KeyError, TypeError or ValueError if
    it is not that); the benchmark's module imported only when asked for."""
    module, _, name = FIGURES[cmd].rpartition(".")
    figures: Figures = getattr(importlib.import_module(f"ina.bench.{module}"),
                               name).from_figures(doc)
    return figures


def report(args: argparse.Namespace, doc: Any) -> None:
    """Report the figures of ``args.cmd`` from their JSON data (``doc``), measured now
    or read with --from-json: the one path from figures to text and picture. Print
    them (text, or JSON with --json), write them (--json-out), draw them (--png)."""
    figures = _read(args.cmd, {k: v for k, v in doc.items() if k != "measured"}
                    if isinstance(doc, dict) else doc)
    text = "\n".join(line for line in (measured_line(doc), figures.render()) if line)
    print(json.dumps(doc, indent=2) if args.json else text)
    if args.json_out is not None:
        write_json(args.json_out, doc)
    if getattr(args, "png", None) is not None and isinstance(figures, Drawn):
        figures.plot(args.png)
