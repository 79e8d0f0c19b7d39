"""Scapy layers for the INA header and RFC 8296 BIER, for tests and captures.

scapy.contrib.bier follows an old draft (BSL codes off by one, IPv6 as 5), so
BIER is defined here as RFC 8296 has it.

    from ina.protocol.scapy_layers import INA, BIER
    pkt = Ether() / IP(dst=...) / UDP(sport=INA_UDP_PORT, dport=INA_UDP_PORT) / INA(...)
    pkt.summary()   # ... / INA job=1 seq=42 flags=RESULT|SYNC op=SUM ... ecn=NONE pbm=0x3
    INA(width=16, values16=[...])   # 16-bit elements; INA(flags=Flag.NODATA): no array

Reading a capture: ``[p.summary() for p in rdpcap("s1-eth1_in.pcap")]`` (see
docs/inspect.md).
"""

from __future__ import annotations

from scapy.fields import (
    BitEnumField,
    BitField,
    ByteField,
    ConditionalField,
    FieldListField,
    FlagsField,
    IntField,
    ShortField,
    SignedIntField,
    SignedShortField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_layers

from ina.protocol.constants import (
    BIER_BIFT_ID,
    BIER_BSL_CODE,
    BIER_INITIAL_TTL,
    BIER_NIBBLE,
    BIER_PROTO_IPV4,
    BITSTRING_BITS,
    ELEMS16_PER_PACKET,
    ELEMS_PER_PACKET,
    ETHERTYPE_BIER,
    INA_PAYLOAD_BYTES,
    INA_UDP_PORT,
    INA_VERSION,
    OP_COPY,
    WIDTH16,
    WIDTH32,
    Ecn,
    Flag,
    Op,
)

OPS = {**{int(op): op.name for op in Op}, OP_COPY: "COPY"}


def flag_names(flags: int) -> str:
    """An INA header's flags by name, ``RESULT|SYNC`` (``NONE`` for none); bits that
    are no Flag as a number."""
    names = [f.name for f in Flag if f and f.name and flags & f]
    unknown = flags & ~sum(Flag)
    return "|".join(names + ([hex(unknown)] if unknown else [])) or "NONE"


def ecn_names(ecn: int) -> str:
    """An INA header's congestion marks by name, ``CE`` (``NONE`` for none); bits that
    are no Ecn as a number."""
    names = [e.name for e in Ecn if e and e.name and ecn & e]
    unknown = ecn & ~sum(Ecn)
    return "|".join(names + ([hex(unknown)] if unknown else [])) or "NONE"


def _has_array(pkt: Packet) -> bool:
    """An array follows the header: not a SYNC (or its REPLY), not NODATA."""
    return not pkt.flags & (Flag.SYNC | Flag.NODATA)


class INA(Packet):
    name = "INA"
    fields_desc = [
        BitField("version", INA_VERSION, 4),
        BitEnumField("op", int(Op.SUM), 4, OPS),
        # Bit i's name, from Flag (one source of truth for the flags).
        FlagsField("flags", 0, 8, [Flag(1 << i).name or f"bit{i}" for i in range(8)]),
        ShortField("job_id", 0),
        IntField("seq", 0),
        ShortField("count", 0),
        ByteField("si", 0),
        ByteField("gen", 0),
        ShortField("dest", 0),
        ByteField("width", WIDTH32),
        # Congestion marks (version 5), bit i named from Ecn.
        FlagsField("ecn", 0, 8, [Ecn(1 << i).name or f"bit{i}" for i in range(8)]),
        BitField("pbm", 0, BITSTRING_BITS),
        # A call's SYNC and its REPLY, and a NODATA packet, carry no array; width 16
        # has twice as many values of 16 bits. (scapy's stubs want the default list
        # to hold fields, not values: hence the ignores.)
        ConditionalField(
            FieldListField("values", [0] * ELEMS_PER_PACKET, SignedIntField("v", 0),  # type: ignore[list-item]
                           count_from=lambda pkt: ELEMS_PER_PACKET, max_count=ELEMS_PER_PACKET),
            lambda pkt: _has_array(pkt) and pkt.width != WIDTH16),
        ConditionalField(
            FieldListField("values16", [0] * ELEMS16_PER_PACKET, SignedShortField("v", 0),  # type: ignore[list-item]
                           count_from=lambda pkt: ELEMS16_PER_PACKET,
                           max_count=ELEMS16_PER_PACKET),
            lambda pkt: _has_array(pkt) and pkt.width == WIDTH16),
    ]

    # scapy takes (summary, outer layers to summarise too), as its TCP layer returns;
    # its stubs know only the string.
    def mysummary(self) -> tuple[str, list[type[Packet]]]:  # type: ignore[override]
        """``INA job=1 seq=42 flags=RESULT|SYNC op=SUM count=256 si=0 gen=1 dest=0 width=32
        ecn=CE pbm=0x3``;
        the IPv4 and BIER headers around it show theirs too (addresses; BitString):
        scapy shows only the innermost layer's summary, unless it names the outer
        layers it needs."""
        return (f"INA job={self.job_id} seq={self.seq} flags={flag_names(int(self.flags))} "
                f"op={OPS.get(self.op, self.op)} count={self.count} si={self.si} "
                f"gen={self.gen} dest={self.dest} width={self.width} "
                f"ecn={ecn_names(int(self.ecn))} pbm={self.pbm:#x}",
                [BIER, IP])

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        # The array is always ARRAY_BYTES on the wire: pad a short list.
        if not _has_array(self):
            return pkt + pay
        return pkt + bytes(max(0, INA_PAYLOAD_BYTES - len(pkt))) + pay


class BIER(Packet):
    """RFC 8296 section 2.1.2, with a BITSTRING_BITS-bit BitString."""

    name = "BIER"
    fields_desc = [
        BitField("bift_id", BIER_BIFT_ID, 20),
        BitField("tc", 0, 3),
        BitField("s", 1, 1),
        BitField("ttl", BIER_INITIAL_TTL, 8),
        BitField("nibble", BIER_NIBBLE, 4),
        BitField("version", 0, 4),
        BitField("bsl", BIER_BSL_CODE, 4),
        BitField("entropy", 0, 20),
        BitField("oam", 0, 2),
        BitField("rsv", 0, 2),
        BitField("dscp", 0, 6),
        BitField("proto", BIER_PROTO_IPV4, 6),
        ShortField("bfir_id", 0),
        BitField("bitstring", 0, BITSTRING_BITS),
    ]

    def mysummary(self) -> str:
        """``BIER bift_id=0x1 si=0 bfir_id=5 bitstring=0xf0``"""
        return (f"BIER bift_id={self.bift_id:#x} si={self.bift_id - BIER_BIFT_ID} "
                f"bfir_id={self.bfir_id} bitstring={self.bitstring:#x}")


bind_layers(UDP, INA, dport=INA_UDP_PORT)
bind_layers(Ether, BIER, type=ETHERTYPE_BIER)
bind_layers(BIER, IP, proto=BIER_PROTO_IPV4)

__all__ = ["BIER", "INA"]
