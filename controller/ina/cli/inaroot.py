# PYTHON_ARGCOMPLETE_OK
"""inaroot: a server as the VAT root of a job (see ina.host.serverroot): it finishes
the aggregation and starts the BIER delivery itself.

    inaroot -t topologies/figure1.yaml --job job.yaml --host w5
"""

from __future__ import annotations

import argparse
import errno
import json
import socket
import sys
import threading

from ina.cli import common
from ina.errors import JobError
from ina.host.serverroot import ServerRoot
from ina.protocol.constants import INA_UDP_PORT
from ina.spec.job import JobSpec, validate_job
from ina.spec.topology import Topology

PROG = "inaroot"


def parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, __doc__)
    common.add_topology(p)
    common.add_job(p, "the job file, with its VAT")
    p.add_argument("--host", required=True, metavar="NAME",
                   help="this server's name in the topology")
    p.add_argument("--interface", metavar="NAME",
                   help="where to send BIER (default: the host's only one)")
    return p


def _serve(args: argparse.Namespace) -> int:
    """Aggregate and multicast until SIGTERM or SIGINT; then print the counts."""
    topology = Topology.load(args.topology)
    job = validate_job(JobSpec.load(args.job), topology)
    if job.root != args.host:
        raise JobError([f"the root of job {job.job_id} is {job.root}, not {args.host}"],
                       str(args.job))
    root = ServerRoot(job, topology)
    intf = args.interface or next(name for _, name in socket.if_nameindex() if name != "lo")
    stopped = threading.Event()
    common.stop_on_signals(stopped.set)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
            socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as tx:
        rx.bind(("0.0.0.0", INA_UDP_PORT))
        rx.settimeout(0.2)
        tx.bind((intf, 0))
        print(f"{PROG}: job {job.job_id} root on {args.host} ({intf})", file=sys.stderr,
              flush=True)
        while not stopped.is_set():
            try:
                payload, (src_ip, _) = rx.recvfrom(65535)
            except (TimeoutError, InterruptedError):
                continue
            for frame in root.accept(payload, src_ip):
                try:
                    tx.send(frame)
                except OSError as exc:  # a full or lossy queue: the frame is lost
                    if exc.errno != errno.ENOBUFS:
                        raise
    print(json.dumps({"host": args.host, "job_id": job.job_id, **root.stats}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.main(PROG, parser(), argv, _serve)


if __name__ == "__main__":
    sys.exit(main())
