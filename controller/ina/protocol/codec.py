"""The INA header and its array: what a worker sends and receives as a UDP payload.

INA header, version 5 (16 bytes + the P-BM)::

    0               1               2               3
    | ver:4 | op:4  |    flags:8    |           job_id:16           |
    |                             seq:32                            |
    |            count:16           |     si:8      |     gen:8     |
    |            dest:16            |    width:8    |     ecn:8     |
    |                   P-BM: BITSTRING_BITS bits                   |

followed by the array (none with flag NODATA, or SYNC): ELEMS_PER_PACKET signed
32-bit big-endian integers (``width`` 32) or ELEMS16_PER_PACKET signed 16-bit
ones (``width`` 16), of which the first ``count`` are meaningful (the rest are
zero on the wire). ``si`` is the BIER set of the P-BM, whose bits travel most
significant byte first (see ``ina.protocol.bitmaps``); ``gen`` the generation of
the job's plan the packet belongs to (a worker's edge switch stamps it; a re-plan
changes it); ``dest`` the BFR-id of the only worker that gets the chunk's data
back (0: every worker; the others get a completion, NODATA); ``ecn`` the
congestion marks (``Ecn``: CE when a switch's queue on the path of this packet, or
of any contribution aggregated into it, was deep). The data plane reads the
array as LANES lanes of LANE_BITS bits (``ina.protocol.lanes``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ina.errors import WireError
from ina.protocol.arith import INT16_MAX, INT16_MIN, INT32_MAX, INT32_MIN
from ina.protocol.bitmaps import one_set
from ina.protocol.constants import (
    ARRAY_BYTES,
    BITSTRING_BYTES,
    ELEMS16_PER_PACKET,
    ELEMS_BY_WIDTH,
    ELEMS_PER_PACKET,
    INA_HEADER_BYTES,
    INA_VERSION,
    MAX_BFR_ID,
    WIDTH16,
    WIDTH32,
    Ecn,
    Flag,
    Op,
)

_INA_FIXED = struct.Struct("!BBHIHBBHBB")
_FIXED_BYTES = _INA_FIXED.size
#: The array's wire type for each width.
_DTYPES = {WIDTH32: ">i4", WIDTH16: ">i2"}
_RANGES = {WIDTH32: (INT32_MIN, INT32_MAX), WIDTH16: (INT16_MIN, INT16_MAX)}


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
    gen: int = 0
    dest: int = 0  # BFR-id of the only worker that gets the data back (0: every worker)
    width: int = WIDTH32  # bits per element of the array
    ecn: Ecn = Ecn.NONE  # congestion marks: CE from the path or any contribution

    @property
    def has_array(self) -> bool:
        """Whether an array follows on the wire (not a SYNC, not NODATA)."""
        return not self.flags & (Flag.SYNC | Flag.NODATA)

    def pack(self) -> bytes:
        fixed = _INA_FIXED.pack(
            (self.version & 0xF) << 4 | (int(self.op) & 0xF),
            int(self.flags) & 0xFF,
            self.job_id,
            self.seq,
            self.count,
            self.si,
            self.gen & 0xFF,
            self.dest,
            self.width,
            int(self.ecn) & 0xFF,
        )
        return fixed + self.pbm.to_bytes(BITSTRING_BYTES, "big")

    @classmethod
    def unpack(cls, data: bytes) -> InaHeader:
        if len(data) < INA_HEADER_BYTES:
            raise WireError(f"INA header needs {INA_HEADER_BYTES} bytes, got {len(data)}")
        (ver_op, flags, job_id, seq, count, si, gen, dest, width,
         ecn) = _INA_FIXED.unpack_from(data)
        op_code = ver_op & 0xF
        op = Op(op_code) if op_code in Op._value2member_map_ else op_code
        return cls(
            job_id=job_id,
            seq=seq,
            pbm=int.from_bytes(data[_FIXED_BYTES:INA_HEADER_BYTES], "big"),
            count=count,
            op=op,  # an unknown op code stays a plain int, for the data plane's checks
            flags=Flag(flags),
            version=ver_op >> 4,
            si=si,
            gen=gen,
            dest=dest,
            width=width,
            ecn=Ecn(ecn),
        )


@dataclass(frozen=True)
class InaPacket:
    """An INA UDP payload: header plus the array (padded to the width's elements per
    packet; none, ``()``, with NODATA or SYNC)."""

    header: InaHeader
    values: tuple[int, ...]

    def pack(self) -> bytes:
        if not self.header.has_array:
            return self.header.pack()
        return self.header.pack() + array_bytes(self.values, self.header.width)

    @classmethod
    def unpack(cls, data: bytes) -> InaPacket:
        header = InaHeader.unpack(data)
        if not header.has_array:
            return cls(header, ())
        return cls(header, tuple(payload_array(data, header.width).tolist()))

    @property
    def meaningful(self) -> tuple[int, ...]:
        return self.values[: self.header.count]


def elems_per_packet(width: int) -> int:
    """Elements of a packet's array of ``width`` (ValueError if not 32 or 16)."""
    try:
        return ELEMS_BY_WIDTH[width]
    except KeyError:
        raise WireError(f"an element width is 32 or 16 bits, not {width}") from None


def array_bytes(values: npt.ArrayLike, width: int = WIDTH32) -> bytes:
    """Up to ELEMS_PER_PACKET int32 values (ELEMS16_PER_PACKET int16 ones for
    ``width`` 16) on the wire, zero-padded to the full array (ARRAY_BYTES)."""
    padded = np.zeros(elems_per_packet(width), dtype=_DTYPES[width])
    array = np.asarray(values)
    padded[: array.size] = array
    return padded.tobytes()


def _array_of(payload: bytes, dtype: str, count: int) -> npt.NDArray[np.generic]:
    if len(payload) < INA_HEADER_BYTES + ARRAY_BYTES:
        raise WireError(f"INA payload needs {INA_HEADER_BYTES + ARRAY_BYTES} bytes, "
                        f"got {len(payload)}")
    return np.frombuffer(payload, dtype=dtype, count=count, offset=INA_HEADER_BYTES)


def payload_values(payload: bytes) -> npt.NDArray[np.int32]:
    """The ELEMS_PER_PACKET int32 values of an INA payload of width 32 (WireError if
    it is short)."""
    return _array_of(payload, ">i4", ELEMS_PER_PACKET).astype(np.int32)


def payload_values16(payload: bytes) -> npt.NDArray[np.int16]:
    """The ELEMS16_PER_PACKET int16 values of an INA payload of width 16 (WireError
    if it is short)."""
    return _array_of(payload, ">i2", ELEMS16_PER_PACKET).astype(np.int16)


def payload_array(payload: bytes, width: int) -> npt.NDArray[np.int32]:
    """The array of an INA payload of ``width``, every element as int32 (int16
    values for width 16): ELEMS_BY_WIDTH[width] of them (WireError if short)."""
    if width == WIDTH16:
        return payload_values16(payload).astype(np.int32)
    return payload_values(payload)


def ina_payload(
    job_id: int, seq: int, pbm: int, values: npt.ArrayLike, op: Op = Op.SUM,
    flags: Flag = Flag.NONE, *, width: int = WIDTH32, dest: int = 0,
) -> bytes:
    """The UDP payload a worker sends for one chunk of at most ELEMS_PER_PACKET int32
    values (ELEMS16_PER_PACKET int16 ones for ``width`` 16). ``pbm`` is a bitmap over
    all sets, within one set (a worker's bit); ``dest`` the BFR-id that gets the
    result's data (0: every worker)."""
    elems = elems_per_packet(width)
    array = np.asarray(values)
    if not 1 <= array.size <= elems:
        raise WireError(f"a packet carries 1..{elems} values of {width} bits, got {array.size}")
    low, high = _RANGES[width]
    if array.min() < low or array.max() > high:
        raise WireError(f"values must be signed {width}-bit integers")
    header = _header(job_id, seq, pbm, int(array.size), op, flags, width, dest)
    return header.pack() + array_bytes(array, width)


def nodata_payload(
    job_id: int, seq: int, pbm: int, count: int, op: Op = Op.SUM, flags: Flag = Flag.NONE,
    *, width: int = WIDTH32, dest: int = 0,
) -> bytes:
    """The UDP payload of a contribution without data (flag NODATA, the header
    alone): the worker's bit only, for a chunk of ``count`` values of ``width`` bits
    (a cell takes one count, op and width: those of the chunk's data)."""
    elems = elems_per_packet(width)
    if not 1 <= count <= elems:
        raise WireError(f"a chunk has 1..{elems} values of {width} bits, got {count}")
    return _header(job_id, seq, pbm, count, op, flags | Flag.NODATA, width, dest).pack()


def _header(job_id: int, seq: int, pbm: int, count: int, op: Op, flags: Flag, width: int,
            dest: int) -> InaHeader:
    if not 0 <= dest <= MAX_BFR_ID:
        raise WireError(f"dest is 0 or a BFR-id (1..{MAX_BFR_ID}), not {dest}")
    si, bits = one_set(pbm)
    return InaHeader(job_id=job_id, seq=seq, pbm=bits, count=count, op=op, flags=flags, si=si,
                     dest=dest, width=width)
