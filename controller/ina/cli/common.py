"""What every CLI shares: the options that mean the same in each (``-t/--topology``,
``--job FILE``, ``-v/--verbose`` counted, ``--build``), logging, and the one place
that turns an ``InaError`` into a message on stderr and its class's exit code."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from ina.errors import EXIT_MEANINGS, InaError, UsageError

#: Where the compiled program is, unless --build says otherwise.
DEFAULT_BUILD = Path(os.environ.get("INA_BUILD_DIR", "build"))
EXIT_CODES = "exit codes:\n" + "\n".join(f"  {code}  {meaning}"
                                          for code, meaning in EXIT_MEANINGS.items())


def parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A CLI's parser, with ``-v/--verbose`` and the exit codes in its help."""
    p = argparse.ArgumentParser(prog=prog, description=description, epilog=EXIT_CODES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log more: -v at INFO level, -vv at DEBUG")
    return p


def add_topology(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topology", required=True, type=Path, metavar="FILE",
                   help="the topology file")


def add_job(p: argparse.ArgumentParser, text: str = "the job file") -> None:
    p.add_argument("--job", required=True, type=Path, metavar="FILE", help=text)


def add_element(p: argparse.ArgumentParser) -> None:
    """``switch NAME`` or ``link A B``: what fails or recovers (``element_of``)."""
    p.add_argument("element", choices=("switch", "link"))
    p.add_argument("names", nargs="+", metavar="NAME",
                   help="the switch, or the two nodes the link joins")


def element_of(args: argparse.Namespace) -> tuple[str, ...]:
    """("switch", NAME) or ("link", A, B), from ``add_element``'s arguments."""
    if args.element == "switch" and len(args.names) != 1:
        raise UsageError("give one switch: switch NAME")
    if args.element == "link" and (len(args.names) != 2 or args.names[0] == args.names[1]):
        raise UsageError("give the two nodes a link joins: link A B")
    return (args.element, *args.names)


def add_build(p: argparse.ArgumentParser) -> None:
    p.add_argument("--build", type=Path, default=DEFAULT_BUILD, metavar="DIR",
                   help="directory with ina.json and ina.p4info.txtpb "
                        "(default: $INA_BUILD_DIR or build; now %(default)s)")


def log_level(verbose: int) -> int:
    """WARNING, or INFO with -v, or DEBUG with -vv."""
    return logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG


def setup_logging(verbose: int) -> None:
    logging.basicConfig(level=log_level(verbose), format="%(levelname)s %(name)s: %(message)s")


def fail(prog: str, exc: InaError) -> int:
    """Say what went wrong; the exit code its class has."""
    print(f"{prog}: {exc}", file=sys.stderr)
    return exc.exit_code


def run(prog: str, body: Callable[[], int]) -> int:
    """``body()``'s exit code, or, if it raises an InaError, that error's."""
    try:
        return body()
    except InaError as exc:
        return fail(prog, exc)


def wait_for_go() -> None:
    """Say ``ready`` on stdout and wait for a line on stdin: the benchmark starts every
    worker's clock at once, after each is set up (no start-up skew in the figures)."""
    print("ready", flush=True)
    sys.stdin.readline()
