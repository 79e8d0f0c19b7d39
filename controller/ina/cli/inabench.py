# PYTHON_ARGCOMPLETE_OK
"""inabench (its usage: ina.cli.inabench_options): each benchmark measured inside the
sandbox, its figures reported (ina.cli.inabench_figures).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from ina.bench.onlab import CASES
from ina.bench.output import read_json, stamped
from ina.cli import common
from ina.cli.inabench_figures import report
from ina.cli.inabench_options import PROG, parse_regimes, parser
from ina.errors import UsageError
from ina.lab import sandbox

# --- Measuring -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    return common.main(PROG, parser(), argv, _bench)


def _bench(args: argparse.Namespace) -> int:
    """The benchmark, inside the sandbox (entered first), printed; or, with
    --from-json, the figures of an earlier run."""
    if "regimes" in vars(args):
        parse_regimes(args.regimes)  # checked before anything is measured
    earlier = getattr(args, "from_json", None)
    if earlier is not None:
        try:
            report(args, read_json(earlier))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{earlier} does not hold figures of inabench {args.cmd}: "
                             f"{exc!r}") from exc
        return 0
    if args.cmd in WITHOUT_LAB:
        sandbox.stop_on()  # SystemExit: its children (a reflector, ranks) are stopped
        report(args, stamped(MEASURE[args.cmd](args)))
        return 0
    from ina.lab.mininet import missing_tools

    problems = missing_tools(args.build)
    if problems:
        raise UsageError("needs Mininet + BMv2: " + "; ".join(problems))
    if not sandbox.inside():
        return sandbox.reexec(keep=[args.build.resolve()])
    sandbox.stop_on()  # SystemExit: the labs stop their switches and hosts
    if args.cmd == "deploy":
        from ina.bench import deploy

        print(deploy.run(args.build, repeat=args.repeat))
    else:
        report(args, stamped(MEASURE[args.cmd](args)))
    return 0


def _allreduce(args: argparse.Namespace) -> Any:
    from ina.bench.allreduce import AllreduceFigures, host_rate, run_case
    from ina.lab.mininet import bmv2_build

    host = host_rate()
    results = [run_case(CASES[name].adjusted(args.size, args.rate), args.build,
                        parse_regimes(args.regimes))
               for name in args.case or sorted(CASES, reverse=True)]
    return AllreduceFigures(results, host, bmv2_build()).figures()


def _loss(args: argparse.Namespace) -> Any:
    from ina.bench import loss
    from ina.lab.mininet import bmv2_build

    case = CASES["figure1"].adjusted(rate_mbit=args.rate)
    figures = loss.LossFigures(loss.run(args.build, args.losses, args.size, case, args.rounds,
                                        parse_regimes(args.regimes)), bmv2_build())
    return figures.figures()


def _dataplane(args: argparse.Namespace) -> Any:
    from ina.bench import dataplane

    return dataplane.run(args.build, args.rounds, args.seconds, args.window).figures()


def _failover(args: argparse.Namespace) -> Any:
    from ina.bench import failover
    from ina.control.watch import WatchOptions
    from ina.lab.mininet import bmv2_build

    options = WatchOptions()
    runs = [failover.run_case(failover.CASES[name], args.build, options)
            for name in args.case or sorted(failover.CASES, reverse=True)]
    return failover.FailoverFigures(runs, bmv2_build(), options).figures()


def _train(args: argparse.Namespace) -> Any:
    import torch

    from ina.bench import train
    from ina.lab.mininet import bmv2_build

    settings = train.TrainSettings(steps=args.steps, hidden=args.hidden)
    conversion = train.bucket_conversion(CASES["figure1"].rate_mbit)
    trained = [train.run_named_case(name, args.build, parse_regimes(args.regimes), settings,
                                    args.bucket_mib if name == "figure1" else 0, args.rate,
                                    args.pairs)
               for name in args.case or ["figure1", "fat-tree", train.HSDP_CASE]]
    return train.TrainFigures(trained, conversion, bmv2_build(), torch.__version__).figures()


def _collectives(args: argparse.Namespace) -> Any:
    from ina.bench import collectives

    return collectives.run(args.case or ["figure1", "fat-tree"], args.build,
                           parse_regimes(args.regimes), args.size, args.rate).figures()


def _soak(args: argparse.Namespace) -> Any:
    from ina.bench import soak
    from ina.bench.soak_figures import SoakFigures
    from ina.lab.mininet import bmv2_build

    settings = soak.SoakSettings(minutes=args.minutes, max_calls=args.calls, seed=args.seed)
    soaked = [soak.run_case(soak.CASES[name], args.build, settings)
              for name in args.case or ["leaf-spine", "fat-tree"]]
    return SoakFigures.measured(soaked, bmv2_build(), settings.watch).figures()


def _congestion(args: argparse.Namespace) -> Any:
    from ina.bench import congestion

    settings = congestion.Settings(rate_mbit=args.rate, shared=args.seconds, alone=args.alone,
                                   tcp_algorithm=args.tcp)
    return congestion.run(args.build, settings).figures()


def _host(args: argparse.Namespace) -> Any:
    from ina.bench import host

    return host.run(args.rounds).figures()


def _accuracy(args: argparse.Namespace) -> Any:
    from ina.bench import accuracy

    if any(not 2 <= n <= 8 for n in args.ranks):
        raise UsageError("--ranks: 2 to 8 (Figure 1, the embedded network's topology, "
                         "has 8 hosts)")
    return accuracy.run(args.ranks).figures()


#: How each benchmark with figures measures them (inside the sandbox): their JSON data.
MEASURE: dict[str, Callable[[argparse.Namespace], Any]] = {
    "allreduce": _allreduce, "loss": _loss, "dataplane": _dataplane, "failover": _failover,
    "train": _train, "collectives": _collectives, "soak": _soak,
    "congestion": _congestion, "accuracy": _accuracy, "host": _host,
}
#: Benchmarks that need no lab (the embedded network), so no BMv2 and no sandbox.
WITHOUT_LAB = {"accuracy", "host"}


if __name__ == "__main__":
    sys.exit(main())
