"""bier_egress.p4: a root's result gets its set's A-BM (result_sets); the BitString
is masked with the port's F-BM in the set (bier_ports): a copy to a BFR
(to_bfr), decapsulated to a host (to_host), pruned; a copy not toward the
packet's dest leaves as a completion, without its array (cut_array)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from ina.control import p4names as n
from ina.model.pipeline.metadata import Meta
from ina.model.pipeline.tables import Control
from ina.protocol.constants import ARRAY_BYTES, BIER_BIFT_ID, ETHERTYPE_IPV4, Flag
from ina.protocol.frames import Frame, ip_str, mac_str


class BierOut(Enum):
    """metadata_t's bier_out: what became of a BIER copy."""

    PRUNED = "pruned"
    SENT = "sent"  # to a BFR, still BIER
    DELIVERED = "delivered"  # to a host, decapsulated


@dataclass(frozen=True)
class BierCopy:
    """A copy's outcome, and whether it left as a completion (BIER_OUT_COMPLETION)."""

    out: BierOut
    completion: bool = False


def holds(dest: int, si: int, bitstring: int) -> bool:
    """Whether a BitString of set ``si`` holds BFR-id ``dest``'s bit: bit
    (dest - 1) mod 256 of set (dest - 1) div 256."""
    return (dest - 1) >> 8 == si and bool(bitstring >> ((dest - 1) & 0xFF) & 1)


def cut_array(frame: Frame) -> None:
    """The packet leaves without its array: flag NODATA, the IPv4 and UDP lengths
    shortened (a completion)."""
    ina, ipv4, udp = frame.ina, frame.ipv4, frame.udp
    assert ina is not None and ipv4 is not None and udp is not None
    ipv4.total_len = (ipv4.total_len - ARRAY_BYTES) & 0xFFFF
    udp.length = (udp.length - ARRAY_BYTES) & 0xFFFF
    udp.checksum = 0
    frame.ina = replace(ina, flags=ina.flags | Flag.NODATA)
    frame.lanes = None


@dataclass
class BierEgress(Control):
    def apply(self, frame: Frame, meta: Meta, port: int, rid: int) -> BierCopy:
        """The copy of a BIER packet to ``port``, replica ``rid`` of its group."""
        bier = frame.bier
        assert bier is not None
        if meta.bier_result:
            assert frame.ina is not None
            result = self.exact(n.RESULT_SETS, job_id=frame.ina.job_id, si=rid)
            if result is None:
                bier.bitstring = 0
            else:
                bier.bitstring = result.param("abm")
                bier.bift_id = BIER_BIFT_ID + rid
                frame.ina = replace(frame.ina, si=rid, pbm=result.param("abm"))
        row = self.exact(n.BIER_PORTS, egress_port=port, si=bier.si)
        masked = bier.bitstring & row.param("fbm") if row is not None else 0
        if row is None or masked == 0:
            return BierCopy(BierOut.PRUNED)
        bier.bitstring = masked
        frame.eth.src = mac_str(row.param("smac").to_bytes(6, "big"))
        frame.eth.dst = mac_str(row.param("dmac").to_bytes(6, "big"))
        ina = frame.ina
        completion = ina is not None and ina.dest != 0 and not holds(ina.dest, bier.si, masked)
        if completion and frame.lanes is not None:
            cut_array(frame)  # not toward dest: the copy leaves as a completion
        if row.action == n.TO_BFR.name:
            return BierCopy(BierOut.SENT, completion)
        frame.bier = None
        frame.eth.ethertype = ETHERTYPE_IPV4
        if frame.ipv4 is not None:
            frame.ipv4.dst = ip_str(row.param("host_ip"))
        return BierCopy(BierOut.DELIVERED, completion)
