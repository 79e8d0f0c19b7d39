"""aggregation.p4: at the job's VAT node on this switch, the draft's A-BM/P-BM test
and the cell state machine: a contribution joins its round's cell (start_round,
join_round, complete_round), a complete round's aggregate goes up (to_parent) or,
at the root, by BIER to the workers (to_workers), a retransmission for a complete
round gets it again (resend); below the root, a result passing down is kept
(keep_result). A call's control packets go to Calls (calls.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ina.control import p4names as n
from ina.control.switch_state import job_group_id
from ina.model.pipeline.calls import Calls
from ina.model.pipeline.cells import (
    BM_MASK,
    REG_CELLS,
    REG_LANES,
    REG_PROGRESS,
    REG_SETS,
    CellState,
    open_cell,
    refuse,
)
from ina.model.pipeline.metadata import Meta
from ina.model.pipeline.tables import U32, Control
from ina.protocol import lanes
from ina.protocol.arith import seq_add, seq_diff
from ina.protocol.constants import (
    BIER_MCAST_GROUP,
    BIER_SETS,
    ETHERTYPE_BIER,
    IPV4_INITIAL_TTL,
    Ecn,
    Flag,
    JobStat,
)
from ina.protocol.frames import Bier, Frame, ip_str


@dataclass
class Aggregation(Control):
    calls: Calls = field(init=False)

    def __post_init__(self) -> None:
        self.calls = Calls(self.store)

    def keep_result(self, frame: Frame, meta: Meta) -> None:
        """aggregation.p4's results kept below the root: a result passing down on its
        way to every worker of this node (its BitString holds the A-BM), of the round
        complete in its cell here, replaces the node's aggregate (its array, flags
        and P-BM), for the workers' retransmissions."""
        job, ina, s = meta.job, frame.ina, self.store
        assert job is not None and ina is not None and frame.bier is not None
        cell, cs = open_cell(self.store, job, ina.seq)
        if (ina.si != job.param("set_id") or ina.pbm & meta.abm != meta.abm
                or frame.bier.bitstring & meta.abm != meta.abm
                or ina.gen != job.param("gen") or cs.epoch != job.param("epoch")
                or cs.seq != ina.seq or cs.done == 0 or cs.kept
                or cs.op != ina.op or cs.width != ina.width
                or cs.data != (frame.lanes is not None)):
            return
        if frame.lanes is not None:
            for r, lane in zip(REG_LANES, frame.lanes, strict=True):
                s.reg_write(r, cell, lane)
        s.reg_write(REG_CELLS, cell, replace(cs, bitmap=ina.pbm, kept=True,
                                             overflow=bool(ina.flags & Flag.OVERFLOW),
                                             ce=bool(ina.ecn & Ecn.CE)))
        meta.job_events.add(JobStat.KEPT)

    def apply(self, frame: Frame, meta: Meta) -> None:
        """The draft's A-BM/P-BM test and the cell state machine; a result passing
        down (BIER), kept; a call's control packet, to Calls."""
        job, ina = meta.job, frame.ina
        assert job is not None and ina is not None
        if ina.flags & (Flag.RESULT | Flag.SYNC) == Flag.RESULT:
            self.keep_result(frame, meta)
            return
        if ina.flags & Flag.SYNC:
            self.calls.apply(frame, meta)
            return
        abm = meta.abm
        if abm & ina.pbm == 0:
            if meta.to_me:
                refuse(meta, JobStat.DROP_FOREIGN_PBM)
            else:
                meta.job_events.add(JobStat.PASSED)
            return
        if ina.pbm & ~abm & BM_MASK:
            refuse(meta, JobStat.DROP_FOREIGN_PBM)
            return
        if ina.gen != job.param("gen"):
            # Of another plan of the job: its P-BM may not fit this plan's tree.
            refuse(meta, JobStat.DROP_OLD_PLAN)
            return
        s = self.store
        window = job.param("slot_mask") + 1
        if job.action == n.VAT_ROOT.name:
            # What a call can have sent (aggregation.p4, "The window").
            epoch, done = s.reg_read(REG_PROGRESS, job.param("job_index"), (0, 0))
            if (epoch != job.param("epoch")
                    or seq_diff(ina.seq, done) > job.param("reach") - job.param("lap")):
                refuse(meta, JobStat.DROP_AHEAD)
                return
            if seq_diff(done, ina.seq) > 2 * window:
                refuse(meta, JobStat.DROP_STALE)
                return
        cell, cs = open_cell(self.store, job, ina.seq)
        # Any other round replaces the cell's, but the one a lap after it (stale).
        fresh = cs.epoch != job.param("epoch") or (
            cs.seq != ina.seq and seq_add(cs.seq, -ina.seq) != 2 * window)
        set_index = cell * BIER_SETS + ina.si
        if meta.sets == 1:
            bitmap = 0 if fresh else cs.bitmap
        else:
            set_gen, set_bitmap = s.reg_read(REG_SETS, set_index, (0, 0))
            bitmap = set_bitmap if not fresh and set_gen == cs.gen else 0
        complete = not fresh and cs.done == meta.sets
        if fresh:
            self.absorb(frame, meta, cell, set_index, cs, 0, fresh=True)
        elif cs.seq != ina.seq:
            refuse(meta, JobStat.DROP_STALE)
        elif cs.op != ina.op:
            refuse(meta, JobStat.DROP_OP_MISMATCH)
        elif cs.width != ina.width:
            refuse(meta, JobStat.DROP_WIDTH_MISMATCH)
        elif cs.data != (frame.lanes is not None):
            # A round takes one kind, data or NODATA: the packet never grows an array.
            refuse(meta, JobStat.DROP_KIND_MISMATCH)
        elif bitmap & ina.pbm and not complete:
            refuse(meta, JobStat.DROP_DUPLICATE)
        elif bitmap & ina.pbm:
            # A retransmission for a complete cell: something after it was lost. It
            # leaves with the cell's array (a round of data), or as it came (NODATA).
            meta.job_events.add(JobStat.RESENT)
            if cs.data:
                frame.lanes = tuple(s.reg_read(r, cell, 0) for r in REG_LANES)
            self.emit(frame, meta, cs.overflow, cs.ce, ina.pbm, all_sets=False,
                       kept=cs.bitmap if cs.kept else None)
        else:
            self.absorb(frame, meta, cell, set_index, cs, bitmap, fresh=False)

    def absorb(self, frame: Frame, meta: Meta, cell: int, set_index: int, cs: CellState,
                bitmap: int, fresh: bool) -> None:
        """Add the packet's lanes to the cell (or start the cell's round with them). A
        round takes the kind of its first contribution (``apply`` refused the
        other): in a round of data the first array is stored, later ones combine
        with it; in a NODATA round a contribution adds only its bit (and its
        OVERFLOW flag)."""
        job, ina, s = meta.job, frame.ina, self.store
        assert job is not None and ina is not None
        meta.job_events.add(JobStat.ABSORBED)
        overflow = bool(ina.flags & Flag.OVERFLOW)
        ce = bool(ina.ecn & Ecn.CE)
        values = frame.lanes
        data = values is not None
        if fresh:
            gen, done = (cs.gen + 1) & U32, 0
        else:
            gen, done, overflow, ce = cs.gen, cs.done, overflow or cs.overflow, ce or cs.ce
            if values is not None:
                stored = tuple(s.reg_read(r, cell, 0) for r in REG_LANES)
                values, wrapped = lanes.combine(ina.op, stored, values, ina.width)
                overflow = overflow or wrapped
        if values is not None:
            for r, lane in zip(REG_LANES, values, strict=True):
                s.reg_write(r, cell, lane)
        bitmap |= ina.pbm
        if bitmap == meta.abm:
            done = (done + 1) & 0xFF  # this set is full
        s.reg_write(REG_CELLS, cell, CellState(
            epoch=job.param("epoch"), seq=ina.seq, gen=gen, count=ina.count, op=int(ina.op),
            overflow=overflow, done=done, bitmap=bitmap if meta.sets == 1 else 0,
            width=ina.width, data=data, ce=ce))
        if meta.sets != 1:
            s.reg_write(REG_SETS, set_index, (gen, bitmap))
        if done != meta.sets:
            meta.consumed = True
            return
        if job.action == n.VAT_ROOT.name:
            epoch, last = s.reg_read(REG_PROGRESS, job.param("job_index"), (0, 0))
            if epoch != job.param("epoch") or seq_diff(ina.seq, last) > 0:
                s.reg_write(REG_PROGRESS, job.param("job_index"), (job.param("epoch"), ina.seq))
        # Complete: this packet leaves with the aggregate (NODATA: as it came); the
        # cell keeps it for resends.
        frame.lanes = values
        self.emit(frame, meta, overflow, ce, meta.abm, all_sets=True)

    def emit(self, frame: Frame, meta: Meta, overflow: bool, ce: bool, bier_bits: int,
              all_sets: bool, kept: int | None = None) -> None:
        """The packet carries the cell's aggregate toward the parent, or, at the root,
        by BIER: to every set of the job (``all_sets``; egress writes each set's
        A-BM) or to ``bier_bits`` of the packet's set (a resend); below the root, a
        result kept here (``kept``: the P-BM it came with) to ``bier_bits`` through
        the job's group. It carries the cell's congestion mark (``ce``) too, besides
        its own."""
        job, ina, ipv4, udp = meta.job, frame.ina, frame.ipv4, frame.udp
        assert job is not None and ina is not None and ipv4 is not None and udp is not None
        flags = (ina.flags & ~Flag.OVERFLOW) | (Flag.OVERFLOW if overflow else Flag.NONE)
        ina = replace(ina, ecn=ina.ecn | (Ecn.CE if ce else Ecn.NONE))
        ipv4.src = ip_str(job.param("node_ip"))
        udp.checksum = 0
        meta.to_me = False
        if job.action == n.VAT_ROOT.name or kept is not None:
            frame.ina = replace(ina, pbm=meta.abm if kept is None else kept,
                                flags=flags | Flag.RESULT)
            ipv4.dst = "0.0.0.0"
            ipv4.ttl = IPV4_INITIAL_TTL
            frame.bier = Bier.for_set(ina.si, bier_bits)
            frame.eth.ethertype = ETHERTYPE_BIER
            # A result leaves through the job's group (a copy per (port, set) for a
            # job spanning sets), and so does a kept one; the root's resend through
            # the group of every BIER port.
            meta.bier_result = all_sets and meta.sets != 1
            meta.mcast_grp = (job_group_id(job.param("job_index")) if all_sets or kept is not None
                              else BIER_MCAST_GROUP)
            meta.job_events.add(JobStat.MULTICAST)
        else:
            frame.ina = replace(ina, pbm=meta.abm, flags=flags)
            ipv4.dst = ip_str(job.param("parent_ip"))
            meta.job_events.add(JobStat.EMITTED)
