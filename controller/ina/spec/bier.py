"""BIER forwarding state (RFC 8279) computed from the topology.

Every host is a BFER with its ``bfr_id``; its edge switch delivers to it on the
host's port. A switch's BIFT maps each BFR-id to the neighbour on the shortest
path toward that BFER, with the F-BM of that neighbour: the OR of the bits of
every BFER reached through it. Because all switches route along one tree per
destination (``Topology.next_hop``), the F-BMs of one switch's neighbours are
disjoint, which is what lets the data plane forward in one pass: replicate to
every port with a non-empty F-BM, AND the BitString with the port's F-BM, drop
the copies left empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from ina.spec.topology import Topology


@dataclass(frozen=True)
class BiftEntry:
    """One row of a BIFT (RFC 8279 section 6.4)."""

    bfr_id: int
    port: int
    neighbor: str
    fbm: int


def bift(topology: Topology, switch: str) -> list[BiftEntry]:
    """The switch's BIFT, one row per BFER it can reach, by BFR-id."""
    port_fbm = port_fbms(topology, switch)
    rows = []
    for host in sorted(topology.hosts.values(), key=lambda h: h.bfr_id):
        if not topology.reaches(switch, host.name):
            continue
        port = topology.next_hop(switch, host.name)
        rows.append(BiftEntry(host.bfr_id, port, topology.ports(switch)[port].node, port_fbm[port]))
    return rows


def port_fbms(topology: Topology, switch: str) -> dict[int, int]:
    """F-BM of each port of ``switch`` that leads to at least one BFER."""
    result: dict[int, int] = {}
    for host in topology.hosts.values():
        if not topology.reaches(switch, host.name):
            continue  # cut off by a failure
        port = topology.next_hop(switch, host.name)
        result[port] = result.get(port, 0) | host.bit
    return dict(sorted(result.items()))
