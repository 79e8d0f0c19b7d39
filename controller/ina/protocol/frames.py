"""Frames as the P4 parser sees them: Ethernet, RFC 8296 BIER, IPv4, UDP, the INA
header and its lanes, none after a SYNC or a NODATA header (``parse_frame``, the
mirror of p4src/include/parser.p4), and builders of the frames hosts and roots
send. The reference model and the tests use them; workers use the UDP payloads of
``ina.protocol.codec`` alone.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ina.errors import WireError
from ina.protocol import lanes as lanes_mod
from ina.protocol.codec import InaHeader
from ina.protocol.constants import (
    ARRAY_BYTES,
    BIER_BIFT_ID,
    BIER_BSL_CODE,
    BIER_HEADER_BYTES,
    BIER_INITIAL_TTL,
    BIER_NIBBLE,
    BIER_PROTO_IPV4,
    BIER_VERSION,
    BITSTRING_BYTES,
    ETHERNET_BYTES,
    ETHERTYPE_BIER,
    ETHERTYPE_IPV4,
    INA_HEADER_BYTES,
    INA_UDP_PORT,
    IP_PROTO_UDP,
    IPV4_INITIAL_TTL,
    WIDTH16,
    Flag,
)


def mac_bytes(mac: str) -> bytes:
    parts = mac.split(":")
    if len(parts) != 6:
        raise WireError(f"bad MAC address {mac!r}")
    return bytes(int(p, 16) for p in parts)


def mac_str(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def ip_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


def ip_str(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


def ipv4_checksum(header: bytes) -> int:
    total = 0
    for i in range(0, len(header), 2):
        total += header[i] << 8 | header[i + 1]
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@dataclass
class Ethernet:
    dst: str
    src: str
    ethertype: int

    def pack(self) -> bytes:
        return mac_bytes(self.dst) + mac_bytes(self.src) + struct.pack("!H", self.ethertype)


@dataclass
class Ipv4:
    src: str
    dst: str
    ttl: int = 64
    proto: int = IP_PROTO_UDP
    total_len: int = 20
    ident: int = 0
    tos: int = 0
    flags_frag: int = 0x4000
    ver_ihl: int = 0x45
    checksum_ok: bool = True  # as received; pack() always writes a correct one

    def pack(self) -> bytes:
        head = struct.pack(
            "!BBHHHBBH4s4s", self.ver_ihl, self.tos, self.total_len, self.ident, self.flags_frag,
            self.ttl, self.proto, 0, ipaddress.IPv4Address(self.src).packed,
            ipaddress.IPv4Address(self.dst).packed,
        )
        checksum = ipv4_checksum(head)
        return head[:10] + struct.pack("!H", checksum) + head[12:]


@dataclass
class Udp:
    sport: int
    dport: int
    length: int = 8
    checksum: int = 0

    def pack(self) -> bytes:
        return struct.pack("!HHHH", self.sport, self.dport, self.length, self.checksum)


@dataclass
class Bier:
    """RFC 8296 header. ``bitstring`` is an int in RFC 8279 bit order, the bits of
    set ``si``, which the BIFT-id names (BIER_BIFT_ID + SI)."""

    bitstring: int
    ttl: int = BIER_INITIAL_TTL
    bift_id: int = BIER_BIFT_ID
    tc: int = 0
    s: int = 1
    nibble: int = BIER_NIBBLE
    version: int = BIER_VERSION
    bsl: int = BIER_BSL_CODE
    entropy: int = 0
    oam: int = 0
    rsv: int = 0
    dscp: int = 0
    proto: int = BIER_PROTO_IPV4
    bfir_id: int = 0

    @classmethod
    def for_set(cls, si: int, bitstring: int) -> Bier:
        return cls(bitstring=bitstring, bift_id=BIER_BIFT_ID + si)

    @property
    def si(self) -> int:
        return self.bift_id - BIER_BIFT_ID

    def pack(self) -> bytes:
        word0 = self.bift_id << 12 | self.tc << 9 | self.s << 8 | self.ttl
        word1 = self.nibble << 28 | self.version << 24 | self.bsl << 20 | self.entropy
        word2 = self.oam << 30 | self.rsv << 28 | self.dscp << 22 | self.proto << 16 | self.bfir_id
        return struct.pack("!III", word0, word1, word2) + self.bitstring.to_bytes(
            BITSTRING_BYTES, "big"
        )

    @classmethod
    def unpack(cls, data: bytes) -> Bier:
        if len(data) < BIER_HEADER_BYTES:
            raise WireError(f"BIER header needs {BIER_HEADER_BYTES} bytes, got {len(data)}")
        word0, word1, word2 = struct.unpack_from("!III", data)
        return cls(
            bift_id=word0 >> 12, tc=word0 >> 9 & 7, s=word0 >> 8 & 1, ttl=word0 & 0xFF,
            nibble=word1 >> 28, version=word1 >> 24 & 0xF, bsl=word1 >> 20 & 0xF,
            entropy=word1 & 0xFFFFF, oam=word2 >> 30, rsv=word2 >> 28 & 3,
            dscp=word2 >> 22 & 0x3F, proto=word2 >> 16 & 0x3F, bfir_id=word2 & 0xFFFF,
            bitstring=int.from_bytes(data[12:BIER_HEADER_BYTES], "big"),
        )


@dataclass
class Frame:
    """A parsed frame, header by header, as the P4 parser sees it.

    ``error`` names the parser error (the P4 ``error`` a truncated header raises),
    ``payload`` is what follows the last parsed header.
    """

    eth: Ethernet
    bier: Bier | None = None
    ipv4: Ipv4 | None = None
    udp: Udp | None = None
    ina: InaHeader | None = None
    lanes: lanes_mod.Lanes | None = None  # the array, as the data plane holds it
    payload: bytes = b""
    error: str | None = None

    def copy(self) -> Frame:
        """A copy whose headers may change without changing this one's (the INA
        header and the lanes are immutable: replaced, never changed)."""
        return dataclasses.replace(
            self, eth=dataclasses.replace(self.eth),
            bier=None if self.bier is None else dataclasses.replace(self.bier),
            ipv4=None if self.ipv4 is None else dataclasses.replace(self.ipv4),
            udp=None if self.udp is None else dataclasses.replace(self.udp))

    @property
    def values(self) -> npt.NDArray[np.int32] | None:
        """The array as int32 values (as int16 ones, widened, for width 16), if the
        frame has one."""
        if self.lanes is None:
            return None
        if self.ina is not None and self.ina.width == WIDTH16:
            return lanes_mod.to_values(self.lanes, 16).astype(np.int32)
        return lanes_mod.to_values(self.lanes)

    def pack(self) -> bytes:
        """Deparse: emit the valid headers in order, then the payload."""
        out = bytearray(self.eth.pack())
        if self.bier is not None:
            out += self.bier.pack()
        if self.ipv4 is not None:
            out += self.ipv4.pack()
        if self.udp is not None:
            out += self.udp.pack()
        if self.ina is not None:
            out += self.ina.pack()
        if self.lanes is not None:
            out += lanes_mod.to_bytes(self.lanes)
        out += self.payload
        return bytes(out)


def parse_frame(raw: bytes) -> Frame:
    """Parse like p4src's parser: Ethernet, then BIER or IPv4, UDP, INA and its lanes.

    A header cut short stops the parse with ``error = "PacketTooShort"``; the
    headers before it stay valid, as in P4.
    """
    if len(raw) < ETHERNET_BYTES:
        raise WireError("frame shorter than an Ethernet header")
    eth = Ethernet(mac_str(raw[0:6]), mac_str(raw[6:12]), struct.unpack_from("!H", raw, 12)[0])
    frame = Frame(eth=eth)
    rest = raw[14:]
    if eth.ethertype == ETHERTYPE_BIER:
        if len(rest) < BIER_HEADER_BYTES:
            frame.error, frame.payload = "PacketTooShort", rest
            return frame
        frame.bier = Bier.unpack(rest)
        rest = rest[BIER_HEADER_BYTES:]
        if frame.bier.proto != BIER_PROTO_IPV4:
            frame.payload = rest
            return frame
    elif eth.ethertype != ETHERTYPE_IPV4:
        frame.payload = rest
        return frame
    if len(rest) < 20:
        frame.error, frame.payload = "PacketTooShort", rest
        return frame
    ver_ihl, tos, total_len, ident, flags_frag, ttl, proto, _cks, src, dst = struct.unpack_from(
        "!BBHHHBBH4s4s", rest
    )
    checksum_ok = ver_ihl & 0xF != 5 or ipv4_checksum(rest[:20]) == 0
    frame.ipv4 = Ipv4(
        src=str(ipaddress.IPv4Address(src)), dst=str(ipaddress.IPv4Address(dst)), ttl=ttl,
        proto=proto, total_len=total_len, ident=ident, tos=tos, flags_frag=flags_frag,
        ver_ihl=ver_ihl, checksum_ok=checksum_ok,
    )
    if ver_ihl & 0xF != 5:
        # IP options: not parsed further (and refused by ingress).
        frame.payload = rest[20:]
        return frame
    rest = rest[20:]
    if proto != IP_PROTO_UDP:
        frame.payload = rest
        return frame
    if len(rest) < 8:
        frame.error, frame.payload = "PacketTooShort", rest
        return frame
    sport, dport, length, checksum = struct.unpack_from("!HHHH", rest)
    frame.udp = Udp(sport, dport, length, checksum)
    rest = rest[8:]
    if dport != INA_UDP_PORT:
        frame.payload = rest
        return frame
    if len(rest) < INA_HEADER_BYTES:
        frame.error, frame.payload = "PacketTooShort", rest
        return frame
    frame.ina = InaHeader.unpack(rest)
    rest = rest[INA_HEADER_BYTES:]
    if frame.ina.flags & (Flag.SYNC | Flag.NODATA):  # a SYNC, its REPLY, NODATA: no array
        frame.payload = rest
        return frame
    if len(rest) < ARRAY_BYTES:
        frame.error, frame.payload = "PacketTooShort", rest
        return frame
    frame.lanes = lanes_mod.from_bytes(rest[:ARRAY_BYTES])
    frame.payload = rest[ARRAY_BYTES:]
    return frame


def udp_frame(
    src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int, dport: int,
    payload: bytes, ttl: int = 64,
) -> bytes:
    """An Ethernet/IPv4/UDP frame as a host's kernel would send it (UDP checksum 0)."""
    udp = Udp(sport, dport, 8 + len(payload))
    ip = Ipv4(src=src_ip, dst=dst_ip, ttl=ttl, total_len=20 + udp.length)
    return Ethernet(dst_mac, src_mac, ETHERTYPE_IPV4).pack() + ip.pack() + udp.pack() + payload


def ina_frame(
    src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, payload: bytes,
) -> bytes:
    return udp_frame(src_mac, dst_mac, src_ip, dst_ip, INA_UDP_PORT, INA_UDP_PORT, payload)


def bier_frame(src_mac: str, dst_mac: str, src_ip: str, bier: Bier, payload: bytes) -> bytes:
    """An INA payload in BIER, as a root sends it: the inner IPv4 packet has no
    destination yet (each edge switch writes its host's)."""
    udp = Udp(INA_UDP_PORT, INA_UDP_PORT, 8 + len(payload))
    ip = Ipv4(src=src_ip, dst="0.0.0.0", ttl=IPV4_INITIAL_TTL, total_len=20 + udp.length)
    return (Ethernet(dst_mac, src_mac, ETHERTYPE_BIER).pack() + bier.pack() + ip.pack()
            + udp.pack() + payload)
