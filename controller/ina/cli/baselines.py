"""The host-based AllReduce baselines on a host (ina.host.baselines), as the benchmark
starts them:

    python -m ina.cli.baselines ps-server --port P --workers N
    python -m ina.cli.baselines ps-worker --server IP --port P --random S --seed K
    python -m ina.cli.baselines ring --rank R --hosts IP0,IP1,... --port P --random S --seed K \\
        [--op sum|min|max]

Each worker prints one JSON line: its elapsed seconds and a digest of the result.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ina.bench.timing import wait_for_go
from ina.cli import common
from ina.host.arrays import digest, random_array
from ina.host.baselines import ps_server, ps_worker, ring_allreduce
from ina.protocol.constants import Op


def parser() -> argparse.ArgumentParser:
    p = common.parser("python -m ina.cli.baselines", __doc__)
    sub = common.commands(p, "cmd")
    s = common.command(sub, "ps-server", "the parameter server: sums the workers' arrays "
                                         "and sends each the sum")
    s.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    s.add_argument("--workers", type=int, required=True, metavar="N",
                   help="workers to wait for")
    for name, text in (("ps-worker", "a worker of the parameter server"),
                       ("ring", "a worker of the ring AllReduce")):
        w = common.command(sub, name, text)
        w.add_argument("--port", type=int, required=True,
                       help="the server's TCP port" if name == "ps-worker"
                       else "TCP port base: rank r listens on PORT + r")
        w.add_argument("--random", type=int, required=True, metavar="SIZE",
                       help="the array: SIZE random int32 values")
        w.add_argument("--seed", type=int, default=0, help="seed for --random")
        w.add_argument("--wait-go", action="store_true",
                       help="once connected, say 'ready' and wait for a line on stdin")
        if name == "ps-worker":
            w.add_argument("--server", required=True, metavar="IP",
                           help="the parameter server's address")
        else:
            w.add_argument("--rank", type=int, required=True,
                           help="this worker's place in the ring")
            w.add_argument("--hosts", required=True, metavar="IP,IP,...",
                           help="comma-separated IPs, in ring order")
            w.add_argument("--op", choices=["sum", "min", "max"], default="sum",
                           help="the reduction")
    return p


def main(argv: list[str] | None = None) -> int:
    args = common.parse(parser(), argv)
    common.setup_logging(args.verbose)
    if args.cmd == "ps-server":
        ps_server(args.port, args.workers)
        return 0
    values = random_array(args.random, args.seed)
    started = [time.monotonic()]

    def ready() -> None:
        if args.wait_go:
            wait_for_go()
        started[0] = time.monotonic()

    if args.cmd == "ps-worker":
        result = ps_worker(args.server, args.port, values, ready=ready)
    else:
        result = ring_allreduce(args.rank, args.hosts.split(","), args.port, values, ready=ready,
                                op=Op[args.op.upper()])
    elapsed = time.monotonic() - started[0]
    print(json.dumps({"elapsed": elapsed, "sha256": digest(result), "values": int(result.size)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
