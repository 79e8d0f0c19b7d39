"""Scale by simulation: planned jobs on large fat-trees, on the reference model.

    python -m ina.bench.simulate --k 4 8 --size 1024

For each fat-tree, every host is a worker of one SUM job. The planner chooses
the VAT (its time is reported); the reference model runs the AllReduce and
counts the bytes on every link. The parameter server (on a host that is no
worker: here the first host, which then does not contribute) and the ring are
costed along the same routes: the PS link carries N x S each way, each ring
step S/N along the route to the successor. Reported per value of the array:
bytes on the busiest link and on all links together, and the switch state the
job takes (VAT nodes x slots x two cells x ELEMS_PER_PACKET x 4 bytes). INA's
bytes are the array's; the start of a call (every worker's SYNC to the root and
back, and the call's descriptor, one packet each) is reported apart, in bytes
on its busiest link, since it does not grow with the array.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from ina.control.vat_planner import plan_job
from ina.errors import TopologyError
from ina.host.arrays import random_array
from ina.host.baselines import TCP_WIRE_PER_BYTE
from ina.model.harness import deployed_network, reduce_on_model, start_call_on_model
from ina.protocol.constants import ELEMS_PER_PACKET
from ina.spec.topogen import fat_tree
from ina.spec.topology import Topology

Link = tuple[str, str]


@dataclass
class Result:
    k: int
    hosts: int
    switches: int
    workers: int
    plan_seconds: float
    vat_nodes: int
    state_bytes: int
    ina: dict[Link, int]  # bytes per link, the array's packets
    setup: dict[Link, int]  # bytes per link, the call's start
    ps: dict[Link, float]
    ring: dict[Link, float]
    size: int


def _along(topology: Topology, src: str, dst: str, amount: float,
           load: dict[Link, float]) -> None:
    path = topology.path(src, dst)
    for a, b in zip(path, path[1:], strict=False):
        load[(a, b)] = load.get((a, b), 0.0) + amount


def simulate(k: int, size: int) -> Result:
    topology = Topology.from_dict(fat_tree(k))
    ps_host, *workers = sorted(topology.hosts)
    started = time.perf_counter()
    plan = plan_job(topology, 1, workers)
    plan_seconds = time.perf_counter() - started
    job = plan.job
    net, _ = deployed_network(topology, job)
    seq = start_call_on_model(net, job, {w: size for w in workers})
    setup = dict(net.bytes_on_link)
    reduce_on_model(net, job, {w: random_array(size, i) for i, w in enumerate(workers)}, seq)
    array = {link: n - setup.get(link, 0) for link, n in net.bytes_on_link.items()}
    tcp = 4 * size * TCP_WIRE_PER_BYTE
    ps: dict[Link, float] = {}
    ring: dict[Link, float] = {}
    n = len(workers)
    for i, w in enumerate(workers):
        _along(topology, w, ps_host, tcp, ps)
        _along(topology, ps_host, w, tcp, ps)
        _along(topology, w, workers[(i + 1) % n], 2 * (n - 1) / n * tcp, ring)
    state = len(job.nodes) * job.slots * 2 * ELEMS_PER_PACKET * 4
    return Result(k, len(topology.hosts), len(topology.switches), n, plan_seconds,
                  len(job.nodes), state, array, setup, ps, ring, size)


def report(results: list[Result]) -> str:
    lines = ["Planned SUM jobs of every host but one on fat-trees, on the reference model.",
             "Bytes per value of the array: on the busiest link | on all links together.", ""]
    header = (f"{'k':>3} {'hosts':>6} {'switches':>8} {'plan s':>7} {'VAT nodes':>9} "
              f"{'state KiB':>9}   {'INA':>15}   {'PS':>15}   {'ring':>15}   "
              f"{'call start KiB':>14}")
    lines.append(header)

    def cell(load: dict[Link, float] | dict[Link, int], size: int) -> str:
        return f"{max(load.values()) / size:7.1f} |{sum(load.values()) / size:7.0f}"

    for r in results:
        lines.append(f"{r.k:>3} {r.hosts:>6} {r.switches:>8} {r.plan_seconds:>7.2f} "
                     f"{r.vat_nodes:>9} {r.state_bytes / 1024:>9.0f}   {cell(r.ina, r.size)}   "
                     f"{cell(r.ps, r.size)}   {cell(r.ring, r.size)}   "
                     f"{max(r.setup.values()) / 1024:>14.1f}")
    lines.append("(call start: every worker's SYNC and its answer, and the call's descriptor, "
                 "on the busiest link; once per call, whatever the array's length)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ina.bench.simulate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--k", type=int, nargs="+", default=[4, 8])
    p.add_argument("--size", type=int, default=4 * ELEMS_PER_PACKET,
                   help="values per worker (default: four packets)")
    args = p.parse_args(argv)
    results = []
    for k in args.k:
        try:
            results.append(simulate(k, args.size))
        except TopologyError as exc:
            print(f"k={k}: cannot simulate: {exc.problems[0]}", file=sys.stderr)
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
