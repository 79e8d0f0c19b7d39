"""The INA header and its array: what a worker sends and receives as a UDP payload.

INA header (12 bytes + the P-BM)::

    0               1               2               3
    | ver:4 | op:4  |    flags:8    |           job_id:16           |
    |                             seq:32                            |
    |            count:16           |     si:8      |     gen:8     |
    |                   P-BM: BITSTRING_BITS bits                   |

followed by ELEMS_PER_PACKET signed 32-bit big-endian integers, of which the
first ``count`` are meaningful (the rest are zero on the wire). ``si`` is the
BIER set of the P-BM, whose bits travel most significant byte first (see
``ina.protocol.bitmaps``); ``gen`` the generation of the job's plan the packet
belongs to (a worker's edge switch stamps it; a re-plan changes it). The data
plane reads the array as LANES lanes of LANE_BITS bits (``ina.protocol.lanes``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ina.errors import WireError
from ina.protocol.arith import INT32_MAX, INT32_MIN
from ina.protocol.bitmaps import one_set
from ina.protocol.constants import (
    ARRAY_BYTES,
    BITSTRING_BYTES,
    ELEMS_PER_PACKET,
    INA_HEADER_BYTES,
    INA_VERSION,
    Flag,
    Op,
)

_INA_FIXED = struct.Struct("!BBHIHBB")


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

    def pack(self) -> bytes:
        fixed = _INA_FIXED.pack(
            (self.version & 0xF) << 4 | (int(self.op) & 0xF),
            int(self.flags) & 0xFF,
            self.job_id,
            self.seq,
            self.count,
            self.si,
            self.gen & 0xFF,
        )
        return fixed + self.pbm.to_bytes(BITSTRING_BYTES, "big")

    @classmethod
    def unpack(cls, data: bytes) -> InaHeader:
        if len(data) < INA_HEADER_BYTES:
            raise WireError(f"INA header needs {INA_HEADER_BYTES} bytes, got {len(data)}")
        ver_op, flags, job_id, seq, count, si, gen = _INA_FIXED.unpack_from(data)
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
            gen=gen,
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
