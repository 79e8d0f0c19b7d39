"""inabench: benchmarks on Mininet + BMv2, each measured side by side in one run.

    inabench allreduce [--case figure1 --case fat-tree] [--rate 4] [--json F] [--png F]
    inabench loss [--losses 0 0.01 0.05] [--size 65536]
    inabench deploy
    inabench host
    inabench dataplane [--json F] [--png F]
    inabench failover [--case leaf-spine --case fat-tree] [--json F] [--png F]
    inabench train [--case figure1 --case fat-tree] [--steps 200] [--json F] [--png F]

allreduce, loss, deploy and host: see ina.lab.bench; dataplane: what one BMv2
switch running the program does per second (ina.lab.dataplane_bench); failover: a
VAT switch stopped mid-AllReduce, detected and repaired (ina.lab.failover_bench);
train: DDP training with the ina backend against gloo (ina.lab.train_bench).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import sys
from dataclasses import asdict
from pathlib import Path

from ina.cli import common
from ina.errors import UsageError
from ina.lab import sandbox
from ina.lab.bench import (
    CASES,
    host_rate,
    plot_allreduce,
    render_allreduce,
    render_loss,
    run_allreduce_case,
    run_deploy_bench,
    run_loss,
)
from ina.protocol.constants import INA_UDP_PORT, Flag

PROG = "inabench"


def parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, __doc__)
    common.add_build(p)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("allreduce", help="INA vs parameter server vs ring, two regimes")
    a.add_argument("--case", action="append", choices=sorted(CASES),
                   help="default: every case")
    a.add_argument("--size", type=int, help="values per worker (default: the case's)")
    a.add_argument("--rate", type=float,
                   help="Mbit/s of every link in the link-bound regime (default: the "
                        "case's, " + ", ".join(f"{c.name} {c.rate_mbit:g}"
                                               for c in CASES.values()) + ")")
    a.add_argument("--regimes", default="cpu,link", help="cpu, link or both (default)")
    a.add_argument("--json", type=Path, help="write the figures here")
    a.add_argument("--png", type=Path, help="draw them here")
    lo = sub.add_parser("loss", help="INA under loss on every link, against no loss")
    lo.add_argument("--losses", type=float, nargs="+", default=[0.0, 0.01, 0.05])
    lo.add_argument("--size", type=int, default=262144)
    lo.add_argument("--rounds", type=int, default=3, help="AllReduces per loss rate")
    lo.add_argument("--json", type=Path)
    d = sub.add_parser("deploy", help="deploy time, all switches at once vs one by one")
    d.add_argument("--repeat", type=int, default=5)
    sub.add_parser("host", help="one worker against a loopback reflector")
    dp = sub.add_parser("dataplane", help="one switch: aggregation vs plain forwarding")
    dp.add_argument("--rounds", type=int, default=3)
    dp.add_argument("--seconds", type=float, default=4.0, help="per path and round")
    dp.add_argument("--window", type=int, default=16, help="packets in flight")
    dp.add_argument("--json", type=Path, help="write the figures here")
    dp.add_argument("--png", type=Path, help="draw them here")
    f = sub.add_parser("failover", help="a VAT switch stopped mid-AllReduce: detection, "
                                        "repair, first new result, slowdown")
    f.add_argument("--case", action="append", choices=["leaf-spine", "fat-tree"],
                   help="default: both")
    f.add_argument("--json", type=Path, help="write the figures here")
    f.add_argument("--png", type=Path, help="draw the workers' results over time here")
    t = sub.add_parser("train", help="DDP training through the switches against gloo, "
                                     "two regimes (needs the torch and train extras)")
    t.add_argument("--case", action="append", choices=["figure1", "fat-tree"],
                   help="default: both")
    t.add_argument("--steps", type=int, default=200, help="training steps per run "
                                                          "(default: %(default)s)")
    t.add_argument("--hidden", type=int, default=128,
                   help="width of the MLP's two hidden layers (default: %(default)s)")
    t.add_argument("--regimes", default="cpu,link", help="cpu, link or both (default)")
    t.add_argument("--json", type=Path, help="write the figures here")
    t.add_argument("--png", type=Path, help="draw the losses here")
    r = sub.add_parser("reflect", help=argparse.SUPPRESS)
    r.add_argument("address")
    return p


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


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    common.setup_logging(args.verbose)
    if args.cmd == "reflect":
        reflect(args.address)
        return 0
    return common.run(PROG, lambda: _bench(args))


def _bench(args: argparse.Namespace) -> int:
    """Inside the sandbox (entered first): the benchmark, printed."""
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
        bmv2 = bmv2_build()
        print(render_allreduce(results, host, bmv2))
        if args.json is not None:
            _write_json(args.json, {"bmv2": bmv2, "host": asdict(host),
                                    "cases": [asdict(r) for r in results]})
        if args.png is not None:
            plot_allreduce(results, args.png, bmv2)
    elif args.cmd == "loss":
        case = CASES["figure1"]
        runs = run_loss(args.build, args.losses, args.size, case, args.rounds)
        print(render_loss(runs, case, args.size))
        if args.json is not None:
            _write_json(args.json, [asdict(r) for r in runs])
    elif args.cmd == "dataplane":
        from ina.lab import dataplane_bench

        report = dataplane_bench.run(args.build, args.rounds, args.seconds, args.window)
        print(report.render())
        if args.json is not None:
            _write_json(args.json, report.figures())
        if args.png is not None:
            dataplane_bench.plot(report, args.png)
    elif args.cmd == "failover":
        from ina.control.watch import WatchOptions
        from ina.lab import failover_bench

        options = WatchOptions()
        bmv2 = bmv2_build()
        failovers = [failover_bench.run_case(failover_bench.CASES[name], args.build, options)
                for name in args.case or sorted(failover_bench.CASES, reverse=True)]
        print(failover_bench.render(failovers, options, bmv2))
        if args.json is not None:
            _write_json(args.json, failover_bench.figures(failovers, bmv2))
        if args.png is not None:
            failover_bench.plot(failovers, args.png, bmv2)
    elif args.cmd == "train":
        import torch

        from ina.lab import train_bench

        settings = train_bench.TrainSettings(steps=args.steps, hidden=args.hidden)
        regimes = tuple(x.strip() for x in args.regimes.split(","))
        conversion = train_bench.bucket_conversion(CASES["figure1"].rate_mbit)
        trained = [train_bench.run_case(train_bench.DEFAULT_CASES[name], args.build, regimes,
                                        settings)
                   for name in args.case or ["figure1", "fat-tree"]]
        bmv2, version = bmv2_build(), torch.__version__
        print(train_bench.render(trained, conversion, bmv2, version))
        if args.json is not None:
            _write_json(args.json, train_bench.figures(trained, conversion, bmv2, version))
        if args.png is not None:
            train_bench.plot(trained, args.png, bmv2, version)
    else:
        print(run_deploy_bench(args.build, repeat=args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
