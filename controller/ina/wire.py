"""Wire formats: the INA header and its array, RFC 8296 BIER, and the frames around them.

Bitmaps (P-BM, A-BM, BitString) are Python ints in the BIER encoding of RFC 8279:
BFR-id ``k`` is bit ``k - 1`` counted from the least significant bit. In the
control plane a bitmap spans every set (BFR-ids up to MAX_BFR_ID); on the wire a
packet carries one set: its set identifier (SI, RFC 8279 section 3) and that
set's BITSTRING_BITS bits, most significant byte first. ``split_sets`` and
``join_set`` convert.

INA header (12 bytes + the P-BM)::

    0               1               2               3
    | ver:4 | op:4  |    flags:8    |           job_id:16           |
    |                             seq:32                            |
    |            count:16           |     si:8      |  reserved:8   |
    |                   P-BM: BITSTRING_BITS bits                   |

followed by ELEMS_PER_PACKET signed 32-bit big-endian integers, of which the
first ``count`` are meaningful (the rest are zero on the wire). ``si`` is the
BIER set of the P-BM. The data plane reads the array as LANES lanes of
LANE_BITS bits (``ina.lanes``); a parsed ``Frame`` holds it so.
"""

from __future__ import annotations

import copy
import ipaddress
import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ina import lanes as lanes_mod
from ina.constants import (
    BIER_BIFT_ID,
    BIER_BSL_CODE,
    BIER_HEADER_BYTES,
    BIER_INITIAL_TTL,
    BIER_NIBBLE,
    BIER_PROTO_IPV4,
    BIER_SETS,
    BIER_VERSION,
    BITSTRING_BITS,
    ELEMS_PER_PACKET,
    ETHERTYPE_BIER,
    ETHERTYPE_IPV4,
    INA_HEADER_BYTES,
    INA_UDP_PORT,
    INA_VERSION,
    IP_PROTO_UDP,
    IPV4_INITIAL_TTL,
    MAX_BFR_ID,
    Flag,
    Op,
)

BITSTRING_BYTES = BITSTRING_BITS // 8
ETHERNET_BYTES = 14
ARRAY_BYTES = 4 * ELEMS_PER_PACKET
_INA_FIXED = struct.Struct("!BBHIHBB")
SET_MASK = (1 << BITSTRING_BITS) - 1
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


class WireError(ValueError):
    """Bytes that do not decode as the expected header."""


def bit_of(bfr_id: int) -> int:
    """The bitmap with only BFR-id ``bfr_id`` set (RFC 8279: id k is bit k-1)."""
    if not 1 <= bfr_id <= MAX_BFR_ID:
        raise ValueError(f"BFR-id {bfr_id} outside 1..{MAX_BFR_ID}")
    return 1 << (bfr_id - 1)


def set_of(bfr_id: int) -> int:
    """The BIER set (SI) of a BFR-id."""
    return (bfr_id - 1) // BITSTRING_BITS


def split_sets(bitmap: int) -> dict[int, int]:
    """A bitmap over all sets as {SI: that set's BITSTRING_BITS-bit bitmap}, non-empty sets only."""
    if not 0 <= bitmap < 1 << MAX_BFR_ID:
        raise ValueError(f"bitmap has bits beyond BFR-id {MAX_BFR_ID}")
    return {si: part for si in range(BIER_SETS)
            if (part := bitmap >> (si * BITSTRING_BITS) & SET_MASK)}


def join_set(si: int, bits: int) -> int:
    """A set's bitmap as bits of the bitmap over all sets."""
    return (bits & SET_MASK) << (si * BITSTRING_BITS)


def one_set(bitmap: int) -> tuple[int, int]:
    """(SI, bits) of a non-empty bitmap that lies within one set; ValueError otherwise."""
    sets = split_sets(bitmap)
    if len(sets) != 1:
        raise ValueError(f"bitmap spans {len(sets)} BIER sets, not one")
    return next(iter(sets.items()))


def bfr_ids_of(bitmap: int) -> list[int]:
    """BFR-ids set in ``bitmap``, ascending."""
    return [i + 1 for i in range(bitmap.bit_length()) if bitmap >> i & 1]


def format_bitmap(bitmap: int, width: int) -> str:
    """The draft's notation: BFR-id 1 leftmost, ``width`` bits (e.g. 11000000 = w1, w2)."""
    return "".join("1" if bitmap >> i & 1 else "0" for i in range(width))


@dataclass(frozen=True)
class InaHeader:
    job_id: int
    seq: int
    pbm: int  # the bits of set ``si``
    count: int
    op: Op | int = Op.SUM
    flags: Flag = Flag.NONE
    version: int = INA_VERSION
    si: int = 0

    def pack(self) -> bytes:
        fixed = _INA_FIXED.pack(
            (self.version & 0xF) << 4 | (int(self.op) & 0xF),
            int(self.flags) & 0xFF,
            self.job_id,
            self.seq,
            self.count,
            self.si,
            0,
        )
        return fixed + self.pbm.to_bytes(BITSTRING_BYTES, "big")

    @classmethod
    def unpack(cls, data: bytes) -> InaHeader:
        if len(data) < INA_HEADER_BYTES:
            raise WireError(f"INA header needs {INA_HEADER_BYTES} bytes, got {len(data)}")
        ver_op, flags, job_id, seq, count, si, _ = _INA_FIXED.unpack_from(data)
        op_code = ver_op & 0xF
        op = Op(op_code) if op_code in Op._value2member_map_ else op_code
        return cls(
            job_id=job_id,
            seq=seq,
            pbm=int.from_bytes(data[12:INA_HEADER_BYTES], "big"),
            count=count,
            op=op,  # an unknown op code stays a plain int, for the data plane's checks
            flags=Flag(flags),
            version=ver_op >> 4,
            si=si,
        )


@dataclass(frozen=True)
class InaPacket:
    """An INA UDP payload: header plus the array (padded to ELEMS_PER_PACKET)."""

    header: InaHeader
    values: tuple[int, ...]

    def pack(self) -> bytes:
        return self.header.pack() + array_bytes(self.values)

    @classmethod
    def unpack(cls, data: bytes) -> InaPacket:
        header = InaHeader.unpack(data)
        return cls(header, tuple(payload_values(data).tolist()))

    @property
    def meaningful(self) -> tuple[int, ...]:
        return self.values[: self.header.count]


def array_bytes(values: npt.ArrayLike) -> bytes:
    """Up to ELEMS_PER_PACKET int32 values on the wire, zero-padded to the full array."""
    padded = np.zeros(ELEMS_PER_PACKET, dtype=">i4")
    array = np.asarray(values)
    padded[: array.size] = array
    return padded.tobytes()


def payload_values(payload: bytes) -> npt.NDArray[np.int32]:
    """The ELEMS_PER_PACKET values of an INA payload (WireError if it is short)."""
    if len(payload) < INA_HEADER_BYTES + ARRAY_BYTES:
        raise WireError(f"INA payload needs {INA_HEADER_BYTES + ARRAY_BYTES} bytes, "
                        f"got {len(payload)}")
    return np.frombuffer(payload, dtype=">i4", count=ELEMS_PER_PACKET,
                         offset=INA_HEADER_BYTES).astype(np.int32)


def ina_payload(
    job_id: int, seq: int, pbm: int, values: npt.ArrayLike, op: Op = Op.SUM,
    flags: Flag = Flag.NONE,
) -> bytes:
    """The UDP payload a worker sends for one chunk of at most ELEMS_PER_PACKET values.
    ``pbm`` is a bitmap over all sets, within one set (a worker's bit)."""
    array = np.asarray(values)
    if not 1 <= array.size <= ELEMS_PER_PACKET:
        raise ValueError(f"a packet carries 1..{ELEMS_PER_PACKET} values, got {array.size}")
    if array.min() < INT32_MIN or array.max() > INT32_MAX:
        raise ValueError("values must be signed 32-bit integers")
    si, bits = one_set(pbm)
    header = InaHeader(job_id=job_id, seq=seq, pbm=bits, count=int(array.size), op=op,
                       flags=flags, si=si)
    return header.pack() + array_bytes(array)


# --- Frames (used by the reference model and the tests) -------------------------


def mac_bytes(mac: str) -> bytes:
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"bad MAC address {mac!r}")
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
        return copy.deepcopy(self)

    @property
    def values(self) -> npt.NDArray[np.int32] | None:
        """The array as int32 values, if the frame has one."""
        return None if self.lanes is None else lanes_mod.to_values(self.lanes)

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
    if frame.ina.flags & Flag.SYNC:  # a call's SYNC or its REPLY: no array
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
