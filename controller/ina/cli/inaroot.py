"""inaroot: a server as the VAT root of a job (see ina.host.serverroot): it finishes
the aggregation and starts the BIER delivery itself.

    inaroot -t topologies/figure1.yaml --job job.yaml --host w5
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import signal
import socket
import sys
from pathlib import Path

from ina.host.serverroot import ServerRoot
from ina.protocol.constants import INA_UDP_PORT
from ina.spec.job import JobError, JobSpec, validate_job
from ina.spec.topology import Topology, TopologyError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="inaroot", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-t", "--topology", required=True, type=Path)
    p.add_argument("--job", required=True, type=Path, help="the job, with its VAT")
    p.add_argument("--host", required=True, help="this server's name in the topology")
    p.add_argument("--interface", help="where to send BIER (default: the host's only one)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        topology = Topology.load(args.topology)
        job = validate_job(JobSpec.load(args.job), topology)
        if job.root != args.host:
            raise ValueError(f"the root of job {job.job_id} is {job.root}, not {args.host}")
        root = ServerRoot(job, topology)
    except (TopologyError, JobError, ValueError) as exc:
        print(f"inaroot: {exc}", file=sys.stderr)
        return 2
    intf = args.interface or next(name for _, name in socket.if_nameindex() if name != "lo")
    stop = False

    def finish(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
            socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as tx:
        rx.bind(("0.0.0.0", INA_UDP_PORT))
        rx.settimeout(0.2)
        tx.bind((intf, 0))
        print(f"inaroot: job {job.job_id} root on {args.host} ({intf})", file=sys.stderr,
              flush=True)
        while not stop:
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


if __name__ == "__main__":
    sys.exit(main())
