# PYTHON_ARGCOMPLETE_OK
"""inaworker: one worker's collective (an AllReduce unless --collective says another),
from a host.

    inaworker -t topologies/figure1.yaml --job jobs/figure1-sum.yaml --worker w1 \\
        --random 1000 --seed 1 --output result.npy
    inaworker ... --collective broadcast --root 2 --input weights.npy
    inaworker ... --collective reduce-scatter --random 4096 --float --width 16
    inaworker ... --collective barrier

Run it on the worker's host of the lab (``inalab -t TOPO host w1 -- inaworker ...``):
elsewhere it stops at once (exit 2), since the worker's address is not this
machine's. Prints one JSON line about the result. A call that cannot complete (a
peer missing, the job not deployed, workers making different calls) exits 3.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.bench.timing import wait_for_go
from ina.cli import common
from ina.errors import InaError, UsageError
from ina.host.arrays import digest, random_array, random_floats
from ina.host.collective import MAX_SIZE
from ina.host.config import WorkerConfig
from ina.host.flow import WIDTHS
from ina.host.link import Endpoints, LinkTransport, on_loopback
from ina.host.results import AllreduceResult
from ina.host.transport import UdpTransport, is_local_address
from ina.host.window import DEFAULT_RTO, MIN_RTO, RtoEstimator
from ina.host.worker import Worker
from ina.protocol.constants import Op
from ina.spec.topology import Topology

PROG = "inaworker"
#: --collective's choices: the collectives of ina.host.worker, as a shell spells them.
COLLECTIVES = ("allreduce", "reduce", "reduce-scatter", "broadcast", "allgather", "barrier")
#: Collectives with a root rank; collectives that reduce (an op, an element width).
ROOTED = ("reduce", "broadcast")
REDUCING = ("allreduce", "reduce", "reduce-scatter")
#: The types a reduction's --input array may hold (int64 too: values beyond 32 bits
#: refuse the call at every worker, naming the first); a movement takes any.
READABLE = tuple(np.dtype(t) for t in (np.float32, np.float16, np.int8, np.uint8, np.int16,
                                       np.int32, np.int64))


class _Progress:
    """A one-line progress display on stderr."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.shown = -1

    def __call__(self, done: int, total: int) -> None:
        percent = 100 * done // total
        if percent != self.shown:
            self.shown = percent
            end = "\n" if done == total else ""
            print(f"\r{self.worker}: {done}/{total} packets ({percent}%)", end=end,
                  file=sys.stderr, flush=True)


class _Timeline:
    """When each result of the array arrived (the machine's monotonic clock, which
    every network namespace shares: a benchmark lines it up with its own events)."""

    def __init__(self, then: Callable[[int, int], None] | None) -> None:
        self.then = then
        self.points: list[tuple[float, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.points.append((round(time.monotonic(), 4), done))
        if self.then is not None:
            self.then(done, total)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, __doc__)
    common.add_topology(p)
    common.add_job(p, "the job file, with or without its VAT (the worker's edge switch "
                      "steers its packets in the deployed plan)")
    p.add_argument("--worker", required=True, metavar="NAME",
                   help="this host's name in the topology")
    p.add_argument("--collective", choices=COLLECTIVES, default="allreduce",
                   help="what every worker of the job makes together (default: allreduce); "
                        "docs/collectives.md")
    p.add_argument("--root", type=int, metavar="RANK",
                   help="reduce: the rank that gets the result; broadcast: the rank whose "
                        "array every worker gets (default 0; a rank is a worker's place in "
                        "the job's workers, from 0)")
    p.add_argument("--width", type=int, choices=WIDTHS,
                   help="bits per element on the wire, for the reductions (allreduce, "
                        "reduce, reduce-scatter): 16 puts twice as many values in a packet "
                        "(integers must fit in 16 bits; floats are quantized to 16) "
                        "(default: 16 for int16 arrays, else 32; a float MIN or MAX travels "
                        "in 32, exactly)")
    p.add_argument("--owned", action="store_true",
                   help="broadcast, allgather: send each chunk once from its owner, by BIER "
                        "from its edge switch, instead of with the others' zeros (uplinks "
                        "carry headers but the owners'; every worker of the job must say the "
                        "same; slower on BMv2: docs/limits.md)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--values", metavar="V,V,...", help="the array: comma-separated integers")
    src.add_argument("--input", type=Path, metavar="FILE", help="the array: a .npy file")
    src.add_argument("--random", type=int, metavar="SIZE",
                     help="the array: SIZE random int32 values (or float32, with --float; "
                        "with --width 16, integers that fit in 16 bits)")
    p.add_argument("--seed", type=int, default=0, help="seed for --random")
    p.add_argument("--float", action="store_true",
                   help="float32 values (quantized, see ina.host.quantize)")
    p.add_argument("--op", choices=["sum", "min", "max"],
                   help="the reduction (default: the job's op)")
    p.add_argument("--progress", action="store_true", help="show progress on stderr")
    p.add_argument("--timeline", action="store_true",
                   help="report when each result arrived (monotonic seconds, results so far; "
                        "a call re-planned midway counts again from 0)")
    p.add_argument("--output", type=Path, metavar="FILE",
                   help="write the result here (.npy) (default: not written)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S",
                   help="seconds without progress before giving up")
    p.add_argument("--rto", type=float, default=DEFAULT_RTO, metavar="S",
                   help="seconds before an unanswered packet is first resent, until round "
                        "trips are measured")
    p.add_argument("--min-rto", type=float, default=MIN_RTO, metavar="S",
                   help="least retransmission timeout, in seconds: no packet is sent "
                        "again sooner after its last copy")
    p.add_argument("--ring-port", type=int, metavar="PORT",
                   help="if no switch aggregates the job, the workers reduce on a TCP ring, "
                        "rank r listening on PORT + r (default: ina.host.config.ring_port)")
    p.add_argument("--embedded", type=Path, metavar="FILE",
                   help="no lab: reach the worker's host link on the embedded network whose "
                        "endpoints FILE holds (inanet --endpoints FILE) (default: this "
                        "machine's own network, on the worker's lab host)")
    p.add_argument("--wait-go", action="store_true",
                   help="once set up, say 'ready' on stdout and wait for a line on stdin "
                        "before the collective starts (benchmarks start every worker at once)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = common.parse(parser(), argv)
    common.setup_logging(args.verbose)
    try:
        config = WorkerConfig.from_files(args.topology, args.job, args.worker,
                                         ring_port=args.ring_port)
        config = dataclasses.replace(config, owned=args.owned)
        _check_collective(args, config.workers)
        _check_options(args)
        values = _values(args)
        if args.embedded is None:
            _on_the_workers_host(args, argv, config.addresses[config.rank])
        else:
            config = on_loopback(config)
    except InaError as exc:
        return common.fail(PROG, exc)
    # A stop signal ends the call the way a failure does: the worker tells the root
    # it gives up (ina.host.call.Caller._abort), so the next call starts cleanly.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    return common.run(f"{PROG} {args.worker}", lambda: _call(args, config, values))


def _on_the_workers_host(args: argparse.Namespace, argv: list[str], address: str) -> None:
    """UsageError, before anything is sent, unless this machine has the worker's
    ``address``: elsewhere (outside the lab, on another host of it) its packets would
    go out on the wrong network, and its results would never come back to it."""
    if is_local_address(address):
        return
    if Path(sys.argv[0]).name == PROG:
        here = [sys.argv[0]]  # as it was typed
    elif sys.argv[0].endswith(".py"):
        here = [sys.executable, "-m", f"ina.cli.{PROG}"]
    else:
        here = [PROG]
    raise UsageError(
        f"{args.worker} is not on this machine: no interface here has its address "
        f"{address}, so this is not {args.worker}'s host in a lab of {args.topology}. "
        f"Run it there:\n  inalab -t {shlex.quote(str(args.topology))} host "
        f"{shlex.quote(args.worker)} -- {shlex.join([*here, *argv])}\nor, without a lab, "
        f"on the embedded network (the reference model on this machine's loopback):\n"
        f"  inanet -t {shlex.quote(str(args.topology))} --job {shlex.quote(str(args.job))} "
        f"--endpoints ports.json &\n  {shlex.join([*here, *argv, '--embedded', 'ports.json'])}")


def _check_collective(args: argparse.Namespace, workers: int) -> None:
    """UsageError for an option the collective has no use for, or a root that is no
    rank of the job: before anything is sent."""
    c = args.collective
    given = args.values is not None or args.input is not None or args.random is not None
    if c == "barrier" and (given or args.float):
        raise UsageError("a barrier takes no array: drop --values, --input, --random, --float")
    if c != "barrier" and not given:
        raise UsageError(f"{c} needs an array: give --values, --input or --random")
    if args.root is not None and c not in ROOTED:
        raise UsageError(f"--root is for reduce and broadcast, not {c}")
    if args.root is not None and not 0 <= args.root < workers:
        raise UsageError(f"--root {args.root} is not a rank of the job (0..{workers - 1})")
    if c not in REDUCING:
        for option, value in (("--width", args.width), ("--op", args.op)):
            if value is not None:
                raise UsageError(f"{option} is for the reductions (allreduce, reduce, "
                                 f"reduce-scatter), not {c}: it moves its array bit for bit")


def _check_options(args: argparse.Namespace) -> None:
    """UsageError for a value no call can take, before anything is allocated or sent:
    --random's size, the timeouts, where --output goes."""
    if args.random is not None and not 1 <= args.random <= MAX_SIZE:
        raise UsageError(f"--random {args.random}: give a size from 1 to {MAX_SIZE:,} "
                         "(a call's array length)")
    for option, value in (("--timeout", args.timeout), ("--rto", args.rto),
                          ("--min-rto", args.min_rto)):
        if not (value > 0 and math.isfinite(value)):
            raise UsageError(f"{option} {value:g}: give a positive number of seconds")
    if args.output is not None:
        folder = args.output.parent
        if not folder.is_dir():
            raise UsageError(f"--output {args.output}: no folder {folder} (the result would "
                             "be lost after the call)")
        if not os.access(folder, os.W_OK):
            raise UsageError(f"--output {args.output}: {folder} is not writable")


def _values(args: argparse.Namespace) -> npt.NDArray[Any]:
    """The array the arguments name (none for a barrier)."""
    if args.collective == "barrier":
        return np.zeros(0, dtype=np.int32)
    try:
        if args.values is not None:
            dtype = np.float32 if args.float else np.int64
            return np.array([float(v) if args.float else int(v)
                             for v in args.values.split(",")], dtype=dtype)
        if args.input is not None:
            array = np.asarray(np.load(args.input))
            if args.collective in REDUCING and array.dtype not in READABLE:
                raise UsageError(f"--input {args.input} holds {array.dtype} values: the data "
                                 "plane reduces float32, float16 and integers of up to 32 "
                                 "bits (convert it first, e.g. to float32, if that "
                                 "precision will do)")
            return array
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from exc
    return random_floats(args.random, args.seed) if args.float else \
        random_array(args.random, args.seed, args.width or 32)


def _transport(args: argparse.Namespace, config: WorkerConfig) -> UdpTransport | LinkTransport:
    """The host's own UDP socket, or its link on the embedded network."""
    if args.embedded is None:
        return UdpTransport(config.target)
    endpoints = Endpoints.load(args.embedded)
    return LinkTransport(Topology.load(args.topology), args.worker, endpoints, config.target)


def _call(args: argparse.Namespace, config: WorkerConfig, values: npt.NDArray[Any]) -> int:
    """The collective, and its report on stdout."""
    try:
        with _transport(args, config) as transport:
            progress: Callable[[int, int], None] | None = \
                _Progress(args.worker) if args.progress else None
            timeline = _Timeline(progress) if args.timeline else None
            if args.wait_go:
                wait_for_go()
            started = time.monotonic()
            op = Op[args.op.upper()] if args.op else None
            worker = Worker(config, transport, timeout=args.timeout,
                            rto=RtoEstimator(initial=args.rto, floor=args.min_rto),
                            progress=timeline or progress)
            result = _collective(worker, args, values, op)
            elapsed = time.monotonic() - started
    except InaError:
        raise
    except (ValueError, TypeError) as exc:  # values the data plane cannot reduce
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"socket error: {exc}") from exc
    if args.output is not None:
        np.save(args.output, result.values)
    print(json.dumps({
        "worker": args.worker, "job_id": config.job_id, "collective": args.collective,
        "values": int(result.values.size),
        "elapsed": round(elapsed, 4),
        "packets": result.packets, "retransmissions": result.retransmissions,
        "early_retransmissions": worker.stats.early_retransmissions,
        "probes": worker.stats.probes,
        "queries": worker.stats.queries, "held": worker.stats.held,
        "replans": worker.stats.replans, "on_hosts": result.on_hosts,
        "rto": round(worker.rto.rto, 4),
        "srtt": round(worker.rto.srtt or 0.0, 4),
        "marked": worker.stats.marked,
        "cwnd": round(worker.cc.cwnd, 2) if worker.cc is not None else None,
        "overflow": result.overflow, "sha256": digest(result.values),
        "head": result.values[:4].tolist(),
        **({"max_error_bound": float(result.error_bound.max())}
           if result.error_bound is not None and result.error_bound.size else {}),
        **({"started": round(started, 4), "timeline": timeline.points}
           if timeline is not None else {}),
    }))
    return 0


def _collective(worker: Worker, args: argparse.Namespace, values: npt.NDArray[Any],
                op: Op | None) -> AllreduceResult:
    """The call ``--collective`` names."""
    c, root, width = args.collective, args.root or 0, args.width
    if c == "allreduce":
        return worker.allreduce(values, op, width)
    if c == "reduce":
        return worker.reduce(values, root, op, width)
    if c == "reduce-scatter":
        return worker.reduce_scatter(values, op, width)
    if c == "broadcast":
        return worker.broadcast(values, root)
    if c == "allgather":
        return worker.allgather(values)
    return worker.barrier()


if __name__ == "__main__":
    sys.exit(main())
