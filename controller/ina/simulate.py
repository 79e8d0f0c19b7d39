"""Scale by simulation: planned jobs on large fat-trees, on the reference model.

    python -m ina.simulate --k 4 8 --size 640

For each fat-tree, every host is a worker of one SUM job. The planner chooses
the VAT (its time is reported); the reference model runs the AllReduce and
counts the bytes on every link. The parameter server (on a host that is no
worker: here the first host, which then does not contribute) and the ring are
costed along the same routes: the PS link carries N x S each way, each ring
step S/N along the route to the successor. Reported per value of the array:
bytes on the busiest link and on all links together, and the switch state the
job takes (VAT nodes x slots x two cells x 64 x 4 bytes).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from ina.bench import TCP_WIRE_PER_BYTE
from ina.constants import ELEMS_PER_PACKET
from ina.model import allreduce_on_model, deployed_network
from ina.planner import plan_job
from ina.topogen import fat_tree
from ina.topology import Topology, TopologyError
from ina.worker_cli import random_array

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
    ina: dict[Link, int]  # bytes per link
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
    allreduce_on_model(net, job, {w: random_array(size, i) for i, w in enumerate(workers)})
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
                  len(job.nodes), state, dict(net.bytes_on_link), ps, ring, size)


def report(results: list[Result]) -> str:
    lines = ["Planned SUM jobs of every host but one on fat-trees, on the reference model.",
             "Bytes per value of the array: on the busiest link | on all links together.", ""]
    header = (f"{'k':>3} {'hosts':>6} {'switches':>8} {'plan s':>7} {'VAT nodes':>9} "
              f"{'state KiB':>9}   {'INA':>15}   {'PS':>15}   {'ring':>15}")
    lines.append(header)
    def cell(load: dict[Link, float] | dict[Link, int], size: int) -> str:
        return f"{max(load.values()) / size:7.1f} |{sum(load.values()) / size:7.0f}"

    for r in results:
        lines.append(f"{r.k:>3} {r.hosts:>6} {r.switches:>8} {r.plan_seconds:>7.2f} "
                     f"{r.vat_nodes:>9} {r.state_bytes / 1024:>9.0f}   {cell(r.ina, r.size)}   "
                     f"{cell(r.ps, r.size)}   {cell(r.ring, r.size)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ina.simulate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--k", type=int, nargs="+", default=[4, 8])
    p.add_argument("--size", type=int, default=640, help="values per worker")
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
