"""A server as the VAT root (draft-song-ina-00: "the VAT root can be a switch or a
server"): it finishes the aggregation and starts the BIER delivery itself.

Its children (switches or workers) send to its address as they would to a root
switch. When a sequence number's bitmap reaches the A-BM, the server puts the
result in RFC 8296 BIER packets, one per BIER set of the A-BM with that set's
bits as BitString, and sends them to its edge switch, which the controller told
to accept BIER from this port for this job (job_members, action bier_source);
the switches replicate them as usual. A result carries a congestion mark (Ecn.CE)
if any contribution to it did, as from a root switch. A retransmission for a complete sequence
number gets the result again, by BIER to the retransmitter's bits, as on a switch,
and a worker's SYNC at the start of a call gets the call's first sequence number
back, as from a root switch (the first SYNC gets its own proposal back), with the
plan's generation its edge switch stamped on it; a worker's QUERY gets HELD or
SEND, as from a switch. Contributions and ABORTs are
taken within the window a call can be in, as on a root switch (aggregation.p4,
"The window").

``ServerRoot`` is the aggregation without I/O; ``inaroot`` (ina.cli.inaroot) runs it
on the server's sockets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ina.errors import JobError, WireError
from ina.protocol.arith import combine, seq_add, seq_diff
from ina.protocol.bitmaps import join_set, split_sets
from ina.protocol.codec import InaHeader, array_bytes, payload_values
from ina.protocol.constants import (
    BIER_SETS,
    ELEMS_PER_PACKET,
    INA_UDP_PORT,
    INA_VERSION,
    QUERY,
    Ecn,
    Flag,
    Op,
    QueryVerdict,
)
from ina.protocol.frames import Bier, bier_frame, udp_frame
from ina.spec.job import Job
from ina.spec.topology import Topology

#: Sequence numbers kept after completion, in multiples of the job's window.
KEEP_WINDOWS = 4


@dataclass
class _Cell:
    seq: int
    count: int
    op: int
    bitmap: int = 0  # over all BIER sets
    values: npt.NDArray[np.int32] = field(
        default_factory=lambda: np.zeros(ELEMS_PER_PACKET, dtype=np.int32))
    overflow: bool = False
    gen: int = 0  # the plan's generation of the contributions
    ce: bool = False  # some contribution carried a congestion mark


class ServerRoot:
    """The root's aggregation, without I/O: ``accept`` takes a UDP payload and
    returns the Ethernet frames (BIER) to send."""

    def __init__(self, job: Job, topology: Topology):
        if not job.root_is_server(topology):
            raise JobError([f"job {job.job_id}'s root {job.root} is not a host"])
        self.job = job
        me = topology.hosts[job.root]
        edge, _ = topology.host_attachment(job.root)
        self.mac, self.ip = me.mac, me.ip
        self.edge_mac = topology.switches[edge].mac
        self.abm = job.abm
        self.abm_sets = split_sets(job.abm)
        self.keep = KEEP_WINDOWS * job.slots
        self.cells: dict[int, _Cell] = {}
        self.newest: int | None = None
        self.completed: int | None = None  # the highest completed sequence number
        self.gen: int | None = None  # the plan's generation, from the last SYNC
        self.stats: dict[str, int] = {k: 0 for k in (
            "absorbed", "multicast", "resent", "duplicate", "stale", "refused", "synced",
            "aborted", "old_plan", "replanned", "ahead", "abort_ahead", "queried",
            "query_held")}

    def accept(self, payload: bytes, src_ip: str | None = None) -> list[bytes]:
        """The frames to send for a UDP payload from ``src_ip``."""
        try:
            h = InaHeader.unpack(payload)
        except WireError:
            self.stats["refused"] += 1
            return []
        pbm = join_set(h.si, h.pbm)
        if (h.job_id != self.job.job_id or h.version != INA_VERSION
                or h.flags & (Flag.RESULT | Flag.REPLY) or h.op not in (1, 2, 3)
                or h.si >= BIER_SETS or h.pbm == 0 or pbm & ~self.abm):
            self.stats["refused"] += 1
            return []
        if h.flags & QUERY == QUERY:
            return self._query(h, pbm, src_ip)
        if h.flags & Flag.SYNC:
            return self._sync(h, src_ip)
        try:
            values = payload_values(payload)
        except WireError:
            self.stats["refused"] += 1
            return []
        if not 1 <= h.count <= ELEMS_PER_PACKET:
            self.stats["refused"] += 1
            return []
        if self.gen is not None and h.gen != self.gen:
            # Of another plan of the job (its SYNC came first, so an older one): its
            # P-BM may not fit this plan's tree. Its sender sends it again.
            self.stats["old_plan"] += 1
            return []
        # The window, as on a root switch (aggregation.p4): what a call can have sent.
        if self.completed is None or seq_diff(h.seq, self.completed) > 3 * self.job.slots:
            self.stats["ahead"] += 1  # past it, or before any call
            return []
        if (seq_diff(self.completed, h.seq) > 2 * self.job.slots
                or (self.newest is not None and seq_diff(h.seq, self.newest - self.keep) < 0)):
            self.stats["stale"] += 1
            return []
        cell = self.cells.get(h.seq)
        if cell is None:
            cell = self.cells[h.seq] = _Cell(h.seq, h.count, int(h.op), gen=h.gen)
            self._forget_old(h.seq)
        elif cell.op != h.op:  # a round takes no count: past it, padding (zeros)
            self.stats["refused"] += 1
            return []
        cell.count = h.count  # the result carries the count of the packet it answers
        if cell.bitmap & pbm:
            if cell.bitmap != self.abm:
                self.stats["duplicate"] += 1
                return []
            self.stats["resent"] += 1
            self.stats["multicast"] += 1
            return [self._frame(cell, h.si, h.pbm, ce=bool(h.ecn & Ecn.CE))]
        self._combine(cell, values, h, pbm)
        self.stats["absorbed"] += 1
        if cell.bitmap != self.abm:
            return []
        if self.completed is None or seq_diff(self.completed, h.seq) < 0:
            self.completed = h.seq
        self.stats["multicast"] += 1
        return [self._frame(cell, si, bits) for si, bits in self.abm_sets.items()]

    def _query(self, h: InaHeader, pbm: int, src_ip: str | None) -> list[bytes]:
        """A QUERY (a worker's, or a node's for its A-BM on a worker's behalf): HELD
        if the contribution of ``pbm`` to ``h.seq`` is in a round still waiting for
        others, else SEND, back to ``src_ip`` (as aggregation.p4)."""
        if src_ip is None:
            self.stats["refused"] += 1
            return []
        cell = self.cells.get(h.seq)
        held = (cell is not None and (self.gen is None or h.gen == self.gen)
                and bool(cell.bitmap & pbm) and cell.bitmap != self.abm)
        self.stats["queried"] += 1
        self.stats["query_held"] += held
        verdict = QueryVerdict.HELD if held else QueryVerdict.SEND
        reply = InaHeader(job_id=h.job_id, seq=h.seq, pbm=h.pbm, count=int(verdict), op=h.op,
                          flags=h.flags | Flag.REPLY, version=h.version, si=h.si, gen=h.gen,
                          width=h.width, dest=h.dest, ecn=h.ecn)
        return [udp_frame(self.mac, self.edge_mac, self.ip, src_ip, INA_UDP_PORT, INA_UDP_PORT,
                          reply.pack())]

    def _sync(self, h: InaHeader, src_ip: str | None) -> list[bytes]:
        """A call's start: answer with its first sequence number, as a root switch
        does (aggregation.p4): the job's window plus one past the highest completed,
        or, to the first SYNC, its proposal; with the request's ``gen`` (which the
        worker's edge switch stamped: the plan's generation)."""
        if h.flags & Flag.ABORT:  # a worker gave up after sending up to h.seq
            if self.completed is None or seq_diff(h.seq, self.completed) > 3 * self.job.slots:
                self.stats["abort_ahead"] += 1  # further than a call can reach, or no call
                return []
            if seq_diff(self.completed, h.seq) < 0:
                self.completed = h.seq
            self.stats["aborted"] += 1
            return []
        if src_ip is None:
            self.stats["refused"] += 1
            return []
        if self.gen is not None and h.gen != self.gen:
            if not 0 < (h.gen - self.gen) % 256 < 128:
                self.stats["old_plan"] += 1  # a late SYNC of an earlier plan
                return []
            # A new plan of the job (its workers' edge switches stamp it): a new epoch,
            # as on a root switch. The workers run their call again from its start.
            self.cells.clear()
            self.newest = self.completed = None
            self.stats["replanned"] += 1
        self.gen = h.gen
        if self.completed is None:
            # The first SYNC: its proposal (the worker's next call) is the start, and
            # every later SYNC gets the same answer until something completes.
            self.completed = seq_add(h.seq, -(2 * self.job.slots + 1))
        base = seq_add(self.completed, 2 * self.job.slots + 1)
        reply = InaHeader(job_id=h.job_id, seq=base, pbm=h.pbm, count=h.count, op=h.op,
                          flags=h.flags | Flag.REPLY, version=h.version, si=h.si, gen=h.gen)
        self.stats["synced"] += 1
        return [udp_frame(self.mac, self.edge_mac, self.ip, src_ip, INA_UDP_PORT, INA_UDP_PORT,
                          reply.pack())]

    def _combine(self, cell: _Cell, values: npt.NDArray[np.int32], h: InaHeader,
                 pbm: int) -> None:
        cell.overflow |= bool(h.flags & Flag.OVERFLOW)
        cell.ce |= bool(h.ecn & Ecn.CE)
        if cell.bitmap == 0:
            cell.values = values
        else:
            cell.values, wrapped = combine(Op(h.op), cell.values, values)
            cell.overflow |= wrapped
        cell.bitmap |= pbm

    def _forget_old(self, seq: int) -> None:
        if self.newest is None or seq_diff(self.newest, seq) < 0:
            self.newest = seq
        if len(self.cells) > 2 * self.keep:
            self.cells = {s: c for s, c in self.cells.items()
                          if seq_diff(s, self.newest - self.keep) >= 0}

    def _frame(self, cell: _Cell, si: int, bitstring: int, ce: bool = False) -> bytes:
        """The result to ``bitstring`` of set ``si``, marked if the cell or ``ce`` (a
        retransmission's own mark) says so."""
        flags = Flag.RESULT | (Flag.OVERFLOW if cell.overflow else Flag.NONE)
        header = InaHeader(job_id=self.job.job_id, seq=cell.seq, pbm=self.abm_sets[si],
                           count=cell.count, op=Op(cell.op), flags=flags, si=si,
                           gen=cell.gen, ecn=Ecn.CE if cell.ce or ce else Ecn.NONE)
        payload = header.pack() + array_bytes(cell.values)
        return bier_frame(self.mac, self.edge_mac, self.ip, Bier.for_set(si, bitstring), payload)
