"""Generate topology files: leaf-spine and k-ary fat-tree.

    python -m ina.spec.topogen leaf-spine --spines 2 --leaves 4 --hosts-per-leaf 2 \\
        -o topologies/leaf-spine-2x4.yaml
    python -m ina.spec.topogen fat-tree --k 4 -o topologies/fat-tree-4.yaml

Hosts get BFR-ids 1..N in order (BIER set SI = (id-1) // 256), or, with
``--hosts-per-set M``, M hosts to a set: set s holds BFR-ids 256*s+1..256*s+M, so
each rack or pod can have a set of its own (RFC 8279 leaves the assignment to
the operator). Addresses are 10.P.E.H (pod or leaf, edge, host),
MACs 00:00:0a:P:E:H; switches get loopbacks 10.255.x.y, device ids from 1 and
gRPC ports 50001 up. Ports: hosts first, then uplinks, in order.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from ina.errors import UsageError
from ina.protocol.constants import BITSTRING_BITS

GRPC_BASE = 50000


class _Builder:
    def __init__(self, name: str, hosts_per_set: int = BITSTRING_BITS):
        if not 1 <= hosts_per_set <= BITSTRING_BITS:
            raise UsageError(f"hosts per BIER set must be 1..{BITSTRING_BITS}")
        self.name = name if hosts_per_set == BITSTRING_BITS else f"{name}-sets"
        self.hosts_per_set = hosts_per_set
        self.switches: dict[str, dict[str, Any]] = {}
        self.hosts: dict[str, dict[str, Any]] = {}
        self.links: list[list[str]] = []
        self.next_port: dict[str, int] = {}

    def switch(self, name: str) -> str:
        n = len(self.switches) + 1
        self.switches[name] = {"device_id": n, "grpc": f"127.0.0.1:{GRPC_BASE + n}",
                               "loopback": f"10.255.{n // 256}.{n % 256}"}
        self.next_port[name] = 1
        return name

    def host(self, name: str, a: int, b: int, c: int) -> str:
        si, index = divmod(len(self.hosts), self.hosts_per_set)
        self.hosts[name] = {"ip": f"10.{a}.{b}.{c}", "mac": f"00:00:0a:{a:02x}:{b:02x}:{c:02x}",
                            "bfr_id": si * BITSTRING_BITS + index + 1}
        return name

    def port(self, sw: str) -> int:
        p = self.next_port[sw]
        self.next_port[sw] = p + 1
        return p

    def link(self, a: str, b: str) -> None:
        end_a = f"{a}:{self.port(a)}" if a in self.switches else a
        end_b = f"{b}:{self.port(b)}" if b in self.switches else b
        self.links.append([end_a, end_b])

    def data(self) -> dict[str, Any]:
        return {"name": self.name, "switches": self.switches, "hosts": self.hosts,
                "links": self.links}


def leaf_spine(spines: int, leaves: int, hosts_per_leaf: int,
               hosts_per_set: int = BITSTRING_BITS) -> dict[str, Any]:
    b = _Builder(f"leaf-spine-{spines}x{leaves}", hosts_per_set)
    leaf_names = [b.switch(f"leaf{i + 1}") for i in range(leaves)]
    spine_names = [b.switch(f"spine{i + 1}") for i in range(spines)]
    for i, leaf in enumerate(leaf_names):
        for h in range(hosts_per_leaf):
            b.link(leaf, b.host(f"h{i + 1}_{h + 1}", 1, i + 1, h + 1))
    for leaf in leaf_names:
        for spine in spine_names:
            b.link(leaf, spine)
    return b.data()


def fat_tree(k: int, hosts_per_set: int = BITSTRING_BITS) -> dict[str, Any]:
    """The k-ary fat-tree (Al-Fares et al.): k pods of k/2 edge and k/2 aggregation
    switches, (k/2)^2 core switches, k^3/4 hosts."""
    if k < 2 or k % 2:
        raise UsageError("fat-tree k must be even and at least 2")
    half = k // 2
    b = _Builder(f"fat-tree-{k}", hosts_per_set)
    edges = [[b.switch(f"e{p}_{e}") for e in range(half)] for p in range(k)]
    aggs = [[b.switch(f"a{p}_{a}") for a in range(half)] for p in range(k)]
    cores = [[b.switch(f"c{i}_{j}") for j in range(half)] for i in range(half)]
    for p in range(k):
        for e in range(half):
            for h in range(half):
                b.link(edges[p][e], b.host(f"h{p}_{e}_{h}", p + 1, e + 1, h + 1))
    for p in range(k):
        for e in range(half):
            for a in range(half):
                b.link(edges[p][e], aggs[p][a])
    for p in range(k):
        for a in range(half):
            for j in range(half):
                b.link(aggs[p][a], cores[a][j])
    return b.data()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ina.spec.topogen", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="kind", required=True)
    ls = sub.add_parser("leaf-spine")
    ls.add_argument("--spines", type=int, default=2)
    ls.add_argument("--leaves", type=int, default=4)
    ls.add_argument("--hosts-per-leaf", type=int, default=2)
    ft = sub.add_parser("fat-tree")
    ft.add_argument("--k", type=int, default=4)
    for s in (ls, ft):
        s.add_argument("--hosts-per-set", type=int, default=BITSTRING_BITS,
                       help=f"hosts per BIER set (default {BITSTRING_BITS}: sets filled in turn)")
        s.add_argument("-o", "--output", type=Path,
                       help="the file to write; - for standard output (default: standard output)")
    args = p.parse_args(argv)
    try:
        data = (leaf_spine(args.spines, args.leaves, args.hosts_per_leaf, args.hosts_per_set)
                if args.kind == "leaf-spine" else fat_tree(args.k, args.hosts_per_set))
    except ValueError as exc:
        p.error(str(exc))
    text = (f"# Generated by: python -m ina.spec.topogen {' '.join(argv or sys.argv[1:])}\n"
            + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100))
    if args.output is None or str(args.output) == "-":
        print(text, end="")
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
