"""``inactl watch``: detect failed switches and links until stopped (SIGINT or SIGTERM).

inactl wires it with two lines: ``inactl_watch.add_parser(sub)`` in its parser, and
``inactl_watch.run(args, topology, on_change, access)`` for the command (outside the
one-shot connections of the other commands: the watcher keeps its own). ``args``
carries inactl's ``p4info`` and ``p4blob`` (the watcher installs the pipeline on a
switch that comes back empty) besides the options below.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path

from ina.cli import common
from ina.control.access import Access
from ina.control.watch import OnChange, Watcher, WatchOptions
from ina.errors import UsageError
from ina.spec.topology import Topology

DEFAULTS = WatchOptions()


def add_parser(subparsers: common.SubParsers) -> None:
    w = common.command(subparsers, "watch",
                       "detect failed switches and links (P4Runtime liveness, link probes) "
                       "until stopped; repair on each change (a repair that fails is made again, "
                       "with backoff, while the verdict holds)")
    w.add_argument("--interval", type=float, default=DEFAULTS.interval, metavar="S",
                   help="seconds between link probes and liveness reads (default %(default)s)")
    w.add_argument("--detect-after", type=float, default=DEFAULTS.detect_after, metavar="S",
                   help="seconds without an answer (switch) or a probe (link) before it is "
                        "reported down (default %(default)s)")
    w.add_argument("--hang-after", type=float, default=DEFAULTS.hang_after, metavar="S",
                   help="seconds a connected switch may answer nothing before it is reported "
                        "down (default %(default)s; a dead switch's connection is lost, which "
                        "--detect-after times)")
    w.add_argument("--events", type=Path, metavar="FILE",
                   help="append each detected change as a JSON line (time, event, switch or "
                        "link) (default: none written)")
    w.add_argument("--election-id", type=int, default=DEFAULTS.election_id, metavar="N",
                   help="P4Runtime election id, below one-shot commands' so that they can "
                        "write while the watcher runs (default %(default)s)")


def options(args: argparse.Namespace) -> WatchOptions:
    try:
        return WatchOptions(interval=args.interval, detect_after=args.detect_after,
                            hang_after=args.hang_after, election_id=args.election_id,
                            events=args.events)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


async def run(args: argparse.Namespace, topology: Topology, on_change: OnChange,
              access: Access) -> int:
    """Watch until SIGINT or SIGTERM; 0. The connections are closed on the way out."""
    watcher = Watcher(topology, args.p4info, args.p4blob, on_change, options(args),
                      access=access)
    task = asyncio.create_task(watcher.run(), name="watch")
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, task.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    return 0
