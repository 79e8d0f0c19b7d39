"""What every CLI shares: the options that mean the same in each (``-t/--topology``,
``--job FILE``, ``--job-id N``, ``-o FILE`` with ``-`` for stdout, ``--json`` for JSON on
stdout, ``-v/--verbose`` counted, ``--build``, ``--version``), the help's layout (every
option's default shown), shell completion, logging, and the one place that turns an
``InaError`` into a message on stderr and its class's exit code."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypeAlias

from ina.errors import EXIT_MEANINGS, InaError, UsageError
from ina.spec.topology import Topology

#: Where the compiled program is, unless --build says otherwise.
DEFAULT_BUILD = Path(os.environ.get("INA_BUILD_DIR", "build"))
#: The topology file, unless -t/--topology says otherwise.
TOPOLOGY_ENV = "INA_TOPOLOGY"
#: ``-o -``: standard output.
STDOUT = Path("-")
EXIT_CODES = "exit codes:\n" + "\n".join(f"  {code}  {meaning}"
                                          for code, meaning in EXIT_MEANINGS.items())
#: What ``commands`` returns: add a subcommand to it with ``command``.
SubParsers: TypeAlias = "argparse._SubParsersAction[Parser]"  # noqa: SLF001 (argparse names it so)


def version(prog: str) -> str:
    """``PROG VERSION``, the version of the installed package (pyproject.toml's)."""
    try:
        number = importlib.metadata.version("ina")
    except importlib.metadata.PackageNotFoundError:
        number = "unknown (the package is not installed: pip install -e .)"
    return f"{prog} {number}"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written (the modules' docstrings keep their examples), and
    every option's default in its help, unless the help says it in words."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if text is None or text == argparse.SUPPRESS or not has_default(action):
            return text
        return text if "default" in text else f"{text} (default: %(default)s)"


def has_default(action: argparse.Action) -> bool:
    """Whether an option has a default worth stating (not nothing, not a flag's off)."""
    return (action.default not in (None, False, argparse.SUPPRESS)
            # argparse's own classes of --version and --help, which have no public names
            and not isinstance(action, argparse._VersionAction | argparse._HelpAction))  # noqa: SLF001


class Parser(argparse.ArgumentParser):
    """An ArgumentParser with the shared help layout; its subcommands' parsers are
    Parsers too (add_subparsers makes them of the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def parser(prog: str, description: str | None) -> Parser:
    """A CLI's parser, with ``--version``, ``-v/--verbose`` and the exit codes in its
    help."""
    p = Parser(prog=prog, description=description, epilog=EXIT_CODES)
    p.add_argument("--version", action="version", version=version(prog),
                   help="print the program's name and version, and exit")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log more: -v at INFO level, -vv at DEBUG (default: warnings only)")
    return p


def commands(p: Parser, dest: str = "command") -> SubParsers:
    """The parser's subcommands (one of them required), added with ``command``."""
    return p.add_subparsers(title="commands", dest=dest, required=True)


def command(sub: SubParsers, name: str, text: str) -> Parser:
    """A subcommand, described by ``text`` in the list of commands and in its own
    --help. A subcommand added with ``sub.add_parser(name)`` alone is hidden: the
    list of choices names only those added here."""
    p: Parser = sub.add_parser(name, help=text, description=text)
    # argparse's default metavar lists every choice, hidden ones included (and it keeps
    # the shown ones in a private list only).
    sub.metavar = "{" + ",".join(a.dest for a in sub._choices_actions) + "}"  # noqa: SLF001
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments; first, shell completion if the shell asks for it (argcomplete:
    completes, then exits), and afterwards the checks argparse cannot make."""
    import argcomplete

    argcomplete.autocomplete(p)
    args = p.parse_args(argv)
    if "topology" in vars(args) and args.topology is None:
        p.error(f"no topology: give -t/--topology FILE, or set {TOPOLOGY_ENV}=FILE")
    return args


def add_topology(p: argparse.ArgumentParser) -> None:
    """``-t/--topology FILE``, by default $INA_TOPOLOGY (read when the parser is made)."""
    env = os.environ.get(TOPOLOGY_ENV)
    now = f"now {env}" if env else "not set"
    p.add_argument("-t", "--topology", type=Path, metavar="FILE",
                   default=Path(env) if env else None,
                   help=f"the topology file (default: ${TOPOLOGY_ENV}, {now})")


def add_job(p: argparse.ArgumentParser, text: str = "the job file") -> None:
    p.add_argument("--job", required=True, type=Path, metavar="FILE", help=text)


def add_job_or_id(p: argparse.ArgumentParser, required: bool, what: str) -> None:
    """``--job FILE`` (the job's id is read from it) or ``--job-id N``: ``what`` job."""
    one = p.add_mutually_exclusive_group(required=required)
    one.add_argument("--job", type=Path, metavar="FILE",
                     help=f"{what}: the job of this job file (its job_id)")
    one.add_argument("--job-id", type=int, metavar="N", help=f"{what}: the job with this id")


def job_id_of(args: argparse.Namespace) -> int | None:
    """The job ``add_job_or_id``'s options name (None if neither was given); a job
    file is read (and checked) for its id."""
    if args.job is not None:
        from ina.spec.job import JobSpec

        return JobSpec.load(args.job).job_id
    job_id: int | None = args.job_id
    return job_id


def add_json(p: argparse.ArgumentParser, what: str = "the same") -> None:
    """``--json``: a flag, in every command that has it: JSON on stdout instead of
    text."""
    p.add_argument("--json", action="store_true",
                   help=f"print {what} as JSON on stdout instead of text")


@contextmanager
def output(path: Path) -> Iterator[IO[str]]:
    """A text file to write, or stdout for ``-`` (``-o -``); UsageError if it
    cannot be opened."""
    if path == STDOUT:
        yield sys.stdout
        sys.stdout.flush()
        return
    try:
        f = path.open("w")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    with f:
        yield f


def add_element(p: argparse.ArgumentParser) -> None:
    """``switch NAME`` or ``link A B``: what fails or recovers (``element_of``)."""
    p.add_argument("element", choices=("switch", "link"),
                   help="what it is: a switch (one NAME) or a link (the two NAMEs it joins)")
    p.add_argument("names", nargs="+", metavar="NAME",
                   help="the switch, or the two nodes the link joins")


def element_of(args: argparse.Namespace) -> tuple[str, ...]:
    """("switch", NAME) or ("link", A, B), from ``add_element``'s arguments."""
    return parse_element([args.element, *args.names])


def parse_element(words: list[str]) -> tuple[str, ...]:
    """("switch", NAME) or ("link", A, B), from the words ``switch NAME`` or
    ``link A B``; UsageError for anything else."""
    kind, names = (words[0], words[1:]) if words else ("", [])
    if kind == "switch" and len(names) != 1:
        raise UsageError("give one switch: switch NAME")
    if kind == "link" and (len(names) != 2 or names[0] == names[1]):
        raise UsageError("give the two nodes a link joins: link A B")
    if kind not in ("switch", "link"):
        raise UsageError("give 'switch NAME' or 'link A B'")
    return (kind, *names)


def check_element(topology: Topology, element: tuple[str, ...]) -> None:
    """UsageError unless ``element`` (``element_of``'s) is a switch or a link of the
    topology; the message says what the topology has instead."""
    kind, names = element[0], element[1:]
    if kind == "switch":
        if names[0] not in topology.switches:
            what = ("is a host, not a switch," if names[0] in topology.hosts
                    else "is no switch")
            raise UsageError(f"{names[0]} {what} in topology {topology.name}; its "
                             f"switches: {', '.join(sorted(topology.switches))}")
        return
    nodes = {**topology.switches, **topology.hosts}
    for name in names:
        if name not in nodes:
            raise UsageError(f"{name} is no switch or host in topology {topology.name}; "
                             f"its switches: {', '.join(sorted(topology.switches))}")
    a, b = names
    if not topology.link_ends(a, b):
        ends = sorted({link.b.node if link.a.node == a else link.a.node
                       for link in topology.links if a in (link.a.node, link.b.node)})
        raise UsageError(f"no link joins {a} and {b} in topology {topology.name}; "
                         f"{a}'s links go to {', '.join(ends) or 'nothing'}")


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


def main(prog: str, p: argparse.ArgumentParser, argv: list[str] | None,
         body: Callable[[argparse.Namespace], int]) -> int:
    """A command's run: its arguments parsed by ``p``, logging as -v says, then
    ``body(args)``'s exit code, or, if it raises an InaError, that error's."""
    args = parse(p, argv)
    setup_logging(args.verbose)
    return run(prog, lambda: body(args))


def stop_on_signals(stop: Callable[[], None]) -> None:
    """A server's way out: ``stop()`` on SIGTERM or SIGINT (Ctrl-C), which ends its
    serving loop where the loop checks, instead of an exception wherever it is."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop())


def run(prog: str, body: Callable[[], int]) -> int:
    """``body()``'s exit code, or, if it raises an InaError, that error's."""
    try:
        return body()
    except InaError as exc:
        return fail(prog, exc)


