# PYTHON_ARGCOMPLETE_OK
"""inanet: the reference model served as a network on this machine (no BMv2 needed).

    inanet -t topologies/figure1.yaml --job jobs/figure1-sum.yaml

The controller initialises the model's switches and deploys the jobs, as on BMv2;
then every host of the topology has a UDP port on the loopback, the far end of its
link (see ina.model.embedded), and the network deploys and tears down jobs on
request on a Unix socket (``--jobs-socket``; the torch backend's process groups
ask it for theirs). The first line on stdout is those ports as JSON;
workers reach their host's link through it (``inaworker --embedded FILE``, the
torch backend with INA_NETWORK=FILE). The torch backend starts one by itself when
its ranks are not on hosts of a lab. Runs until SIGTERM or SIGINT (or, with
--until-stdin-closes, until its stdin closes); then prints what its links carried.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from ina.cli import common
from ina.errors import UsageError
from ina.model.embedded import EmbeddedNetwork
from ina.model.network import Impairment
from ina.spec.job import JobSpec
from ina.spec.topology import Topology

PROG = "inanet"


def parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, __doc__)
    common.add_topology(p)
    p.add_argument("--job", action="append", default=[], type=Path, metavar="FILE",
                   help="a job file to deploy; repeat the option for several")
    p.add_argument("--address", default="127.0.0.1",
                   help="the address the hosts' ports are bound to")
    p.add_argument("--endpoints", type=Path, metavar="FILE",
                   help="also write the ports' JSON to FILE, a new file (an existing one "
                        "is refused), removed at exit (default: not written)")
    p.add_argument("--jobs-socket", type=Path, metavar="PATH",
                   help="serve the job service (jobs deployed on request, ina.spec.jobservice) "
                        "on this Unix socket (default: one in a private temporary directory)")
    p.add_argument("--loss", type=float, default=0.0,
                   help="probability that a link loses a frame, 0 to 1")
    p.add_argument("--seed", type=int, default=0, help="seed of the links' losses")
    p.add_argument("--until-stdin-closes", action="store_true",
                   help="also stop when stdin closes (a parent process that ends)")
    return p


def main(argv: list[str] | None = None) -> int:
    return common.main(PROG, parser(), argv, _serve)


def _serve(args: argparse.Namespace) -> int:
    if not 0.0 <= args.loss < 1.0:
        raise UsageError(f"--loss must lie in [0, 1), not {args.loss}")
    topology = Topology.load(args.topology)
    jobs = [JobSpec.load(j) for j in args.job]
    impairment = Impairment(loss=args.loss, seed=args.seed) if args.loss else None
    for option, path in (("--endpoints", args.endpoints), ("--jobs-socket", args.jobs_socket)):
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"{option} {path}: no folder {path.parent}")
    if args.endpoints is not None and args.endpoints.exists():
        raise UsageError(f"--endpoints {args.endpoints} exists: it is not overwritten (give "
                         "a new path)")
    with contextlib.ExitStack() as stack:
        jobs_socket = args.jobs_socket
        if jobs_socket is None:
            jobs_socket = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="inanet-"))) / "jobs.sock"
        try:
            net = stack.enter_context(EmbeddedNetwork(topology, jobs, args.address,
                                                      impairment, jobs_socket))
        except OSError as exc:
            raise UsageError(f"cannot bind the hosts' ports on --address {args.address}: "
                             f"{exc.strerror or exc}") from exc
        return _run(args, net)


def _run(args: argparse.Namespace, net: EmbeddedNetwork) -> int:
    common.stop_on_signals(net.stop)
    text = net.endpoints.to_json()
    written = False
    try:
        if args.endpoints is not None:
            try:
                with args.endpoints.open("x") as f:  # never someone else's file
                    f.write(text + "\n")
                written = True
            except OSError as exc:
                raise UsageError(f"--endpoints {args.endpoints}: {exc.strerror or exc}"
                                 ) from exc
        print(text, flush=True)
        net.serve(sys.stdin.buffer if args.until_stdin_closes else None)
    finally:
        if written:
            args.endpoints.unlink(missing_ok=True)
    print(json.dumps({"jobs": [j.job_id for j in net.deployed],
                      "granted": sorted(net.service.granted()),
                      **dataclasses.asdict(net.stats)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
