"""inaworker: one worker's AllReduce of an int32 array, from a host.

    inaworker -t topologies/figure1.yaml --job jobs/figure1-sum.yaml --worker w1 \\
        --random 1000 --seed 1 --output result.npy

Prints one JSON line about the result. Exit codes: 0 done, 2 bad arguments,
3 timed out (a peer missing, or the job not deployed).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.cli.common import wait_for_go
from ina.host.arrays import digest, random_array, random_floats
from ina.host.worker import (
    DEFAULT_RTO,
    MIN_RTO,
    AllreduceError,
    RtoEstimator,
    UdpTransport,
    Worker,
    WorkerConfig,
)
from ina.protocol.constants import Op
from ina.spec.job import JobError
from ina.spec.topology import TopologyError

EXIT_INVALID = 2
EXIT_TIMEOUT = 3


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


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="inaworker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-t", "--topology", required=True, type=Path)
    p.add_argument("--job", required=True, type=Path)
    p.add_argument("--worker", required=True, help="this host's name in the topology")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--values", help="comma-separated integers")
    src.add_argument("--input", type=Path, help=".npy file of integers")
    src.add_argument("--random", type=int, metavar="SIZE", help="SIZE random int32 values")
    p.add_argument("--seed", type=int, default=0, help="seed for --random")
    p.add_argument("--float", action="store_true",
                   help="float32 values (quantized, see ina.host.quantize)")
    p.add_argument("--op", choices=["sum", "min", "max"], help="default: the job's op")
    p.add_argument("--progress", action="store_true", help="show progress on stderr")
    p.add_argument("--output", type=Path, help="write the result here (.npy)")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds without progress before giving up")
    p.add_argument("--rto", type=float, default=DEFAULT_RTO,
                   help="seconds before an unanswered packet is first resent, until round "
                        "trips are measured (default %(default)s)")
    p.add_argument("--min-rto", type=float, default=MIN_RTO,
                   help="least retransmission timeout (default %(default)s)")
    p.add_argument("--wait-go", action="store_true",
                   help="once set up, say 'ready' on stdout and wait for a line on stdin "
                        "before the AllReduce starts (benchmarks start every worker at once)")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)

    try:
        config = WorkerConfig.from_files(args.topology, args.job, args.worker)
        values: npt.NDArray[Any]
        if args.values is not None:
            dtype = np.float32 if args.float else np.int64
            values = np.array([float(v) if args.float else int(v)
                               for v in args.values.split(",")], dtype=dtype)
        elif args.input is not None:
            values = np.load(args.input)
        elif args.float:
            values = random_floats(args.random, args.seed)
        else:
            values = random_array(args.random, args.seed)
    except (TopologyError, JobError, ValueError, OSError) as exc:
        print(f"inaworker: {exc}", file=sys.stderr)
        return EXIT_INVALID

    # A stop signal ends the call the way a failure does: the worker tells the root
    # it gives up (ina.host.worker.Worker._abort), so the next call starts cleanly.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    try:
        with UdpTransport(config.target) as transport:
            progress = _Progress(args.worker) if args.progress else None
            if args.wait_go:
                wait_for_go()
            started = time.monotonic()
            op = Op[args.op.upper()] if args.op else None
            worker = Worker(config, transport, timeout=args.timeout,
                            rto=RtoEstimator(initial=args.rto, floor=args.min_rto),
                            progress=progress)
            result = worker.allreduce(values, op)
            elapsed = time.monotonic() - started
    except (AllreduceError, ValueError, TypeError) as exc:
        print(f"inaworker {args.worker}: {exc}", file=sys.stderr)
        return EXIT_TIMEOUT if isinstance(exc, AllreduceError) else EXIT_INVALID
    except OSError as exc:
        print(f"inaworker {args.worker}: socket error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.output is not None:
        np.save(args.output, result.values)
    print(json.dumps({
        "worker": args.worker, "job_id": config.job_id, "values": int(result.values.size),
        "elapsed": round(elapsed, 4),
        "packets": result.packets, "retransmissions": result.retransmissions,
        "early_retransmissions": worker.stats.early_retransmissions,
        "rto": round(worker.rto.rto, 4),
        "srtt": round(worker.rto.srtt or 0.0, 4),
        "overflow": result.overflow, "sha256": digest(result.values),
        "head": result.values[:4].tolist(),
        **({"max_error_bound": float(result.error_bound.max())}
           if result.error_bound is not None else {}),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
