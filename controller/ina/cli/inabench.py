# PYTHON_ARGCOMPLETE_OK
"""inabench: benchmarks on Mininet + BMv2, each measured side by side in one run.

    inabench allreduce [--case figure1 --case fat-tree] [--rate 4] [--json-out F] [--png F]
    inabench loss [--losses 0 0.01 0.05] [--size 65536] [--json-out F]
    inabench deploy
    inabench host
    inabench dataplane [--json-out F] [--png F]
    inabench failover [--case leaf-spine --case fat-tree] [--json-out F] [--png F]
    inabench failover --from-json docs/failover.json --png docs/failover.png   # redraw only
    inabench train [--case figure1 --case fat-tree --case fat-tree-hsdp] [--steps 200]
        [--json-out F] [--png F]
    inabench soak [--case leaf-spine --case fat-tree] [--minutes 2] [--seed 1] [--json-out F]
    inabench collectives [--case figure1 --case fat-tree] [--rate R] [--size N] [--json-out F]
        [--png F]

allreduce, loss, deploy and host: see ina.lab.bench; dataplane: what one BMv2
switch running the program does per second (ina.lab.dataplane_bench); failover: a
VAT switch stopped mid-AllReduce, detected and repaired (ina.lab.failover_bench);
train: DDP and HSDP training with the ina backend against gloo (ina.lab.train_bench); soak:
a chaos soak, a training-like loop of AllReduce calls while switches and links fail
and come back, a member misbehaves and an outsider sends garbage (ina.lab.soak);
collectives: every collective through the switches against gloo's and the ring on
hosts, and float16 AllReduce in 16- and 32-bit elements (ina.lab.collectives_bench).
--json prints the figures as JSON instead of text, --json-out FILE writes them,
and --from-json FILE reports (and draws) the figures of an earlier run without
measuring anything (no BMv2 needed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ina.cli import common
from ina.errors import UsageError
from ina.lab import sandbox
from ina.lab.bench import (
    CASES,
    AllreduceFigures,
    host_rate,
    loss_from_figures,
    plot_allreduce,
    render_allreduce,
    render_loss,
    run_allreduce_case,
    run_deploy_bench,
    run_loss,
)
from ina.protocol.constants import INA_UDP_PORT, Flag

PROG = "inabench"


def _outputs(p: argparse.ArgumentParser, picture: str | None) -> None:
    """The options of a benchmark with figures: --json, --json-out, --from-json and,
    if it draws ``picture``, --png."""
    common.add_json(p, "the figures")
    p.add_argument("--json-out", type=Path, metavar="FILE",
                   help="write the figures here as JSON (default: not written)")
    if picture is not None:
        p.add_argument("--png", type=Path, metavar="FILE",
                       help=f"draw {picture} here (default: not drawn)")
    p.add_argument("--from-json", type=Path, metavar="FILE",
                   help="measure nothing: report"
                        + (" and draw" if picture is not None else "")
                        + " the figures in FILE (written by --json-out; no BMv2 needed)")


def parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, __doc__)
    common.add_build(p)
    sub = common.commands(p, "cmd")
    a = common.command(sub, "allreduce", "INA vs parameter server (PS) vs ring, with links "
                                         "unlimited (CPU-bound) and limited (link-bound)")
    a.add_argument("--case", action="append", choices=sorted(CASES),
                   help="a case to run; repeat the option for several (default: every case)")
    a.add_argument("--size", type=int, help="values per worker (default: the case's)")
    a.add_argument("--rate", type=float, metavar="MBIT",
                   help="Mbit/s of every link in the link-bound regime (default: the "
                        "case's, " + ", ".join(f"{c.name} {c.rate_mbit:g}"
                                               for c in CASES.values()) + ")")
    a.add_argument("--regimes", default="cpu,link",
                   help="which regimes, comma-separated: cpu (links unlimited), link "
                        "(links limited)")
    _outputs(a, "values per second and bytes per value")
    lo = common.command(sub, "loss", "INA under loss on every link, against no loss")
    lo.add_argument("--losses", type=float, nargs="+", default=[0.0, 0.01, 0.05],
                    metavar="P", help="loss rates per link and direction, 0 to 1")
    lo.add_argument("--size", type=int, default=262144, help="values per worker")
    lo.add_argument("--rounds", type=int, default=3, help="AllReduces per loss rate")
    _outputs(lo, None)
    d = common.command(sub, "deploy", "deploy time, all switches at once vs one by one")
    d.add_argument("--repeat", type=int, default=5, metavar="N",
                   help="deploys of each kind (the median is reported)")
    common.command(sub, "host", "one worker against a loopback reflector (no switch)")
    dp = common.command(sub, "dataplane", "one switch: aggregation vs plain forwarding")
    dp.add_argument("--rounds", type=int, default=3,
                    help="rounds over every path (the median is reported)")
    dp.add_argument("--seconds", type=float, default=4.0, help="per path and round")
    dp.add_argument("--window", type=int, default=16, help="packets in flight")
    _outputs(dp, "packets per second per path")
    f = common.command(sub, "failover", "a VAT switch stopped mid-AllReduce: detection, "
                                        "repair, first new result, slowdown")
    f.add_argument("--case", action="append", choices=["leaf-spine", "fat-tree"],
                   help="a case to run; repeat the option for both (default: both)")
    _outputs(f, "the results received over time")
    t = common.command(sub, "train", "DDP and HSDP training through the switches against "
                                     "gloo, links unlimited and limited (needs the train "
                                     "extra)")
    t.add_argument("--case", action="append", choices=["figure1", "fat-tree", "fat-tree-hsdp"],
                   help="a case to run; repeat the option for several (default: all three; "
                        "fat-tree-hsdp: fully_shard on 2 replicas of 4 shards)")
    t.add_argument("--steps", type=int, default=200, help="training steps per run")
    t.add_argument("--hidden", type=int, default=128,
                   help="width of the MLP's two hidden layers")
    t.add_argument("--regimes", default="cpu,link",
                   help="which regimes, comma-separated: cpu (links unlimited), link "
                        "(links limited)")
    t.add_argument("--bucket-mib", type=int, default=25,
                   help="on Figure 1, also one float32 bucket of this many MiB (DDP's "
                        "default bucket size), links unlimited; 0: none")
    _outputs(t, "the training losses against steps and seconds")
    so = common.command(sub, "soak", "a chaos soak: AllReduce calls while switches and links "
                                     "fail and come back, with a misbehaving member and an "
                                     "outsider; wrong, hung and retried calls, what is left")
    so.add_argument("--case", action="append", choices=["leaf-spine", "fat-tree"],
                    help="a case to run; repeat the option for both (default: both)")
    so.add_argument("--minutes", type=float, default=2.0,
                    help="minutes of calls per case (default %(default)s)")
    so.add_argument("--calls", type=int, default=1000,
                    help="calls per case at most (default %(default)s)")
    so.add_argument("--seed", type=int, default=1,
                    help="seed of the calls' arrays and of what fails when (default "
                         "%(default)s): the same seed, the same soak")
    _outputs(so, None)
    co = common.command(sub, "collectives", "every collective through the switches against "
                                            "gloo and the ring on hosts, links unlimited and "
                                            "limited; float16 AllReduce in 16 and 32 bits "
                                            "(needs the train extra)")
    co.add_argument("--case", action="append", choices=["figure1", "fat-tree"],
                    help="a case to run; repeat the option for both (default: both)")
    co.add_argument("--size", type=_positive, metavar="N",
                    help="values S per collective, a multiple of 1024 (default: figure1 "
                         "262144, fat-tree 131072)")
    co.add_argument("--rate", type=float, metavar="MBIT",
                    help="Mbit/s of every link in the link-bound regime (default: the "
                         "case's, as inabench allreduce: " + ", ".join(
                             f"{name} {CASES[name].rate_mbit:g}"
                             for name in ("figure1", "fat-tree")) + ")")
    co.add_argument("--regimes", default="cpu,link",
                    help="which regimes, comma-separated: cpu (links unlimited), link "
                         "(links limited)")
    _outputs(co, "values per second and bytes per value of every collective")
    # The host benchmark's other end (ina.lab.bench.host_rate): not for people, hidden.
    r = sub.add_parser("reflect")
    r.add_argument("address", help="the address to answer on")
    return p


def _positive(text: str) -> int:
    """A size of the collectives benchmark: a positive multiple of 1024 (every
    case's worker count divides it, and each part is whole packets)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0 or value % 1024:
        raise argparse.ArgumentTypeError(f"{value} is not a positive multiple of 1024")
    return value


def _regimes(text: str) -> tuple[str, ...]:
    regimes = tuple(x.strip() for x in text.split(","))
    unknown = [r for r in regimes if r not in ("cpu", "link")]
    if unknown or not regimes:
        raise UsageError(f"--regimes takes cpu, link or both, not {text!r}")
    return regimes


def reflect(address: str) -> None:
    """Answer every INA packet sent to ``address`` as a root would: SYNCs with
    their proposal (as a root answers the first SYNC of a plan), contributions with
    themselves as the result (the host benchmark's other end,
    ina.lab.bench.host_rate)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((address, INA_UDP_PORT))
        print("ready", flush=True)
        while True:
            data, sender = sock.recvfrom(65535)
            packet = bytearray(data)
            if packet[1] & Flag.SYNC:
                packet[1] |= Flag.REPLY
            else:
                packet[1] |= Flag.RESULT
            sock.sendto(packet, sender)


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read figures from {path}: {exc}") from exc


def _report(args: argparse.Namespace, figures: object, text: str,
            draw: Callable[[Path], None] | None = None) -> None:
    """What every benchmark with figures does with them: print them (text, or JSON
    with --json), write them (--json-out), draw them (--png)."""
    print(json.dumps(figures, indent=2) if args.json else text)
    if args.json_out is not None:
        _write_json(args.json_out, figures)
    if draw is not None and args.png is not None:
        draw(args.png)


def _figures(args: argparse.Namespace, doc: Any) -> None:
    """Report the figures of ``args.cmd`` from their JSON data (``doc``), measured now
    or read with --from-json: the one path from figures to text and picture."""
    if args.cmd == "allreduce":
        allreduce = AllreduceFigures.from_figures(doc)
        _report(args, doc, render_allreduce(allreduce.cases, allreduce.host, allreduce.bmv2),
                lambda path: plot_allreduce(allreduce.cases, path, allreduce.bmv2))
    elif args.cmd == "loss":
        runs = loss_from_figures(doc)
        size = round(runs[0].values_per_s * runs[0].seconds)  # values per worker
        _report(args, doc, render_loss(runs, CASES["figure1"], size))
    elif args.cmd == "dataplane":
        from ina.lab.dataplane_bench import DataplaneReport, plot

        report = DataplaneReport.from_figures(doc)
        _report(args, doc, report.render(), lambda path: plot(report, path))
    elif args.cmd == "train":
        from ina.lab import train_bench

        train = train_bench.TrainFigures.from_figures(doc)
        _report(args, doc, train.render(), train.plot)
    elif args.cmd == "collectives":
        from ina.lab.collectives_bench import CollectivesFigures

        collectives = CollectivesFigures.from_figures(doc)
        _report(args, doc, collectives.render(), collectives.plot)
    elif args.cmd == "soak":
        from ina.lab import chaos, soak

        soaked, bmv2, watch = soak.from_figures(doc)
        _report(args, doc, chaos.render(soaked, bmv2, watch))
    else:
        from ina.lab import failover_bench

        failovers, bmv2, options = failover_bench.from_figures(doc)
        _report(args, doc, failover_bench.render(failovers, options, bmv2),
                lambda path: failover_bench.plot(failovers, path, bmv2))


def main(argv: list[str] | None = None) -> int:
    args = common.parse(parser(), argv)
    common.setup_logging(args.verbose)
    if args.cmd == "reflect":
        reflect(args.address)
        return 0
    return common.run(PROG, lambda: _bench(args))


def _bench(args: argparse.Namespace) -> int:
    """The benchmark, inside the sandbox (entered first), printed; or, with
    --from-json, the figures of an earlier run."""
    earlier = getattr(args, "from_json", None)
    # checked before anything is measured
    regimes = _regimes(args.regimes) if args.cmd == "collectives" else ()
    if earlier is not None:
        try:
            _figures(args, _read_json(earlier))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{earlier} does not hold figures of inabench {args.cmd}: "
                             f"{exc!r}") from exc
        return 0
    from ina.lab.mininet import bmv2_build, missing_tools

    problems = missing_tools(args.build)
    if problems:
        raise UsageError("needs Mininet + BMv2: " + "; ".join(problems))
    if not sandbox.inside():
        return sandbox.reexec(keep=[args.build.resolve()])
    sandbox.stop_on()  # SystemExit: the labs stop their switches and hosts
    if args.cmd == "host":
        rate = host_rate()
        print(f"one worker against a loopback reflector: {rate.packets_per_s:,.0f} "
              f"packets/s, {rate.values_per_s:,.0f} values/s")
    elif args.cmd == "allreduce":
        host = host_rate()
        regimes = tuple(x.strip() for x in args.regimes.split(","))
        results = []
        for name in args.case or sorted(CASES, reverse=True):
            case = dataclasses.replace(CASES[name], size=args.size or CASES[name].size,
                                       rate_mbit=args.rate or CASES[name].rate_mbit)
            results.append(run_allreduce_case(case, args.build, regimes))
        _figures(args, AllreduceFigures(results, host, bmv2_build()).figures())
    elif args.cmd == "loss":
        case = CASES["figure1"]
        runs = run_loss(args.build, args.losses, args.size, case, args.rounds)
        _figures(args, [dataclasses.asdict(r) for r in runs])
    elif args.cmd == "dataplane":
        from ina.lab import dataplane_bench

        report = dataplane_bench.run(args.build, args.rounds, args.seconds, args.window)
        _figures(args, report.figures())
    elif args.cmd == "failover":
        from ina.control.watch import WatchOptions
        from ina.lab import failover_bench

        options = WatchOptions()
        failovers = [failover_bench.run_case(failover_bench.CASES[name], args.build, options)
                     for name in args.case or sorted(failover_bench.CASES, reverse=True)]
        _figures(args, failover_bench.figures(failovers, bmv2_build(), options))
    elif args.cmd == "train":
        import torch

        from ina.lab import train_bench

        settings = train_bench.TrainSettings(steps=args.steps, hidden=args.hidden)
        regimes = tuple(x.strip() for x in args.regimes.split(","))
        conversion = train_bench.bucket_conversion(CASES["figure1"].rate_mbit)
        trained = [train_bench.run_named_case(name, args.build, regimes, settings,
                                              args.bucket_mib if name == "figure1" else 0)
                   for name in args.case or ["figure1", "fat-tree", train_bench.HSDP_CASE]]
        _figures(args, train_bench.TrainFigures(trained, conversion, bmv2_build(),
                                                torch.__version__).figures())
    elif args.cmd == "collectives":
        from ina.lab import collectives_bench

        measured = collectives_bench.run(args.case or ["figure1", "fat-tree"], args.build,
                                         regimes, args.size, args.rate)
        _figures(args, measured.figures())
    elif args.cmd == "soak":
        from ina.lab import soak

        soak_settings = soak.SoakSettings(minutes=args.minutes, max_calls=args.calls,
                                          seed=args.seed)
        soaked = [soak.run_case(soak.CASES[name], args.build, soak_settings)
                  for name in args.case or ["leaf-spine", "fat-tree"]]
        _figures(args, soak.figures(soaked, bmv2_build(), soak_settings.watch))
    else:
        print(run_deploy_bench(args.build, repeat=args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
