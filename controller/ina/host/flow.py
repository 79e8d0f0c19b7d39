"""What each chunk of one reduction carries (``Flow``), and how a collective lays its
values out in chunks (``Layout``): the part of a collective a window needs.

Every collective is reductions of chunks (ina.host.window), each chunk one packet
with one sequence number. Per chunk, a worker contributes its data or only its bit
(NODATA: "I have reached this chunk"), and the chunk's ``dest`` says which worker
gets its data back (a BFR-id; 0: every worker); every other worker gets a
completion (the header alone, NODATA). A chunk's elements are 32 or 16 bits wide
(``width``): ELEMS_PER_PACKET int32 or ELEMS16_PER_PACKET int16 values in the same
bytes.

A ``Layout`` places a collective's values in chunks: contiguous (an AllReduce, a
Reduce, a Broadcast), or in ``parts`` of ``ceil(S / N)`` values, each padded to
whole packets so that every chunk belongs to one part (Reduce-scatter, Allgather:
part r is rank r's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.errors import UsageError
from ina.protocol.constants import ELEMS_BY_WIDTH, WIDTH16, WIDTH32

WIDTHS = (WIDTH32, WIDTH16)
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


def elems_per_packet(width: int) -> int:
    """Elements of ``width`` bits in one packet's array."""
    if width not in ELEMS_BY_WIDTH:
        raise UsageError(f"elements are 32 or 16 bits wide, not {width}")
    return ELEMS_BY_WIDTH[width]


@dataclass(frozen=True)
class Layout:
    """Where a collective's ``size`` values lie in its chunks: ``parts`` parts of
    ``part`` values each (the last ones may hold fewer of the array's values, or
    none: zeros), every part padded to ``chunks_per_part`` whole packets of
    ``width``-bit elements. One part (the default): the array in consecutive
    chunks, only the last one short."""

    size: int
    width: int = WIDTH32
    parts: int = 1

    def __post_init__(self) -> None:
        if self.size < 1 or self.parts < 1:
            raise UsageError("a layout needs at least one value and one part")
        elems_per_packet(self.width)

    @property
    def per_packet(self) -> int:
        return elems_per_packet(self.width)

    @property
    def part(self) -> int:
        """Values per part: ``ceil(size / parts)``."""
        return -(-self.size // self.parts)

    @property
    def chunks_per_part(self) -> int:
        return -(-self.part // self.per_packet)

    @property
    def chunks(self) -> int:
        return self.parts * self.chunks_per_part

    @property
    def slots(self) -> int:
        """Values on the wire, padding included: ``chunks`` whole packets."""
        return self.chunks * self.per_packet

    def counts(self) -> IntArray:
        """Per chunk, how many of its values are meaningful (the packet's ``count``):
        a part's last chunk may be short, never empty."""
        within = self.part - np.arange(self.chunks_per_part) * self.per_packet
        return np.tile(np.minimum(within, self.per_packet), self.parts)

    def owner(self) -> IntArray:
        """Per chunk, the index of the part it belongs to."""
        return np.repeat(np.arange(self.parts), self.chunks_per_part)

    def part_range(self, r: int) -> tuple[int, int]:
        """The array's values of part ``r``: ``[lo, hi)`` (empty past the array's end)."""
        lo = min(r * self.part, self.size)
        return lo, min(lo + self.part, self.size)

    def part_slots(self, r: int) -> int:
        """Where part ``r`` begins on the wire."""
        return r * self.chunks_per_part * self.per_packet

    def spread(self, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """``values`` (``size`` of them) on the wire: each part at its place, zeros
        elsewhere."""
        if values.size != self.size:
            raise UsageError(f"the layout holds {self.size} values, not {values.size}")
        if self.parts == 1:
            wire = np.zeros(self.slots, dtype=values.dtype)
            wire[: self.size] = values
            return wire
        wire = np.zeros((self.parts, self.chunks_per_part * self.per_packet), dtype=values.dtype)
        padded = np.zeros(self.parts * self.part, dtype=values.dtype)
        padded[: self.size] = values
        wire[:, : self.part] = padded.reshape(self.parts, self.part)
        return wire.reshape(-1)

    def gather(self, wire: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The ``size`` values of an array on the wire (``spread``'s inverse)."""
        rows = wire.reshape(self.parts, -1)[:, : self.part]
        return rows.reshape(-1)[: self.size]

    def take_part(self, wire: npt.NDArray[Any], r: int) -> npt.NDArray[Any]:
        """Part ``r``'s values (those of the array: fewer than ``part``, or none, for
        the last parts) of an array on the wire."""
        lo, hi = self.part_range(r)
        start = self.part_slots(r)
        return wire[start: start + hi - lo]


@dataclass(frozen=True)
class Flow:
    """Per chunk of one reduction, what a worker sends and what comes back to it.

    ``width``: the elements' width (32 or 16 bits). ``counts``: the values
    meaningful in each chunk (default: from the array's length, every chunk full
    but the last). ``data``: the chunks this worker contributes its values to (the
    others: NODATA; default: every chunk). ``dest``: per chunk, the BFR-id of the
    only worker that gets its data (0: every worker; default: 0 everywhere).
    ``empty``: no worker sends data (a barrier): every chunk comes back as a
    completion. ``owners``: per chunk, the BFR-id of the one worker whose values
    are the chunk's (a Broadcast's root, an Allgather's part): it sends them once
    (OP_COPY), its edge switch by BIER to every other worker, and every worker, the
    owner too, contributes NODATA once it holds them: the chunk's completion says
    that every worker has them. The window's values are then the worker's own in
    its chunks and zeros elsewhere, so that a reduction that knows no owners (on
    hosts: their SUM) gives the same result."""

    width: int = WIDTH32
    counts: IntArray | None = None
    data: BoolArray | None = None
    dest: IntArray | None = None
    empty: bool = False
    owners: IntArray | None = None

    def check(self, chunks: int) -> None:
        """ValueError unless every per-chunk array has ``chunks`` entries."""
        elems_per_packet(self.width)
        if self.owners is not None and (self.data is not None or self.dest is not None
                                        or self.width != WIDTH32):
            raise UsageError("a flow with owners has 32-bit elements, and neither data "
                             "nor dest")
        for name in ("counts", "data", "dest", "owners"):
            a = getattr(self, name)
            if a is not None and len(a) != chunks:
                raise UsageError(f"a flow's {name} has {len(a)} entries for {chunks} chunks")
        if self.counts is not None and (np.any(self.counts < 1)
                                        or np.any(self.counts > elems_per_packet(self.width))):
            raise UsageError("a chunk carries 1 to a packet's elements")

    def sends_data(self, chunk: int) -> bool:
        return self.data is None or bool(self.data[chunk])

    def dest_of(self, chunk: int) -> int:
        return 0 if self.dest is None else int(self.dest[chunk])

    def received(self, chunks: int, bfr_id: int) -> BoolArray:
        """Per chunk, whether the worker of ``bfr_id`` gets its data (else a completion)."""
        if self.empty or self.owners is not None:  # owners: their values come apart
            return np.zeros(chunks, dtype=bool)
        if self.dest is None:
            return np.ones(chunks, dtype=bool)
        return np.asarray((self.dest == 0) | (self.dest == bfr_id), dtype=bool)

    @classmethod
    def of(cls, layout: Layout, data: BoolArray | None = None,
           dest: IntArray | None = None, owners: IntArray | None = None) -> Flow:
        """The flow of an array laid out as ``layout``: each chunk's count is the
        values of the array it carries (the last chunk of a part may be short), so a
        packet's ``count`` says what is meaningful even when the array on the wire is
        padded to whole packets (``Layout.spread``)."""
        return cls(layout.width, layout.counts(), data, dest, owners=owners)


def no_data() -> Flow:
    """One chunk of one value's count, NODATA from every worker (a barrier)."""
    return Flow(WIDTH32, np.ones(1, dtype=np.int64), np.zeros(1, dtype=bool), None, True)
