"""calls.p4: a call's control packets at the VAT node of their job on this switch
(flag SYNC): a SYNC's answer at the root (answer_sync), an ABORT there, a QUERY at
the worker's node (answer_query, ask_parent); never absorbed, nothing of a round
written."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ina.control import p4names as n
from ina.model.pipeline.cells import (
    BM_MASK,
    REG_PROGRESS,
    REG_SETS,
    open_cell,
    refuse,
)
from ina.model.pipeline.metadata import Meta
from ina.model.pipeline.tables import Control
from ina.protocol.arith import seq_add, seq_diff
from ina.protocol.constants import (
    BIER_SETS,
    IPV4_INITIAL_TTL,
    QUERY,
    Flag,
    JobStat,
    QueryVerdict,
)
from ina.protocol.frames import Frame, ip_str


@dataclass
class Calls(Control):
    def apply(self, frame: Frame, meta: Meta) -> None:
        """A call's start: the root answers with the call's first sequence number."""
        job, ina, ipv4, udp = meta.job, frame.ina, frame.ipv4, frame.udp
        assert job is not None and ina is not None and ipv4 is not None and udp is not None
        if not meta.to_me:
            meta.job_events.add(JobStat.PASSED)  # to the root, or its answer back
        elif ina.flags & (QUERY | Flag.REPLY) == QUERY:
            self.query(frame, meta)
        elif job.action != n.VAT_ROOT.name or ina.flags & Flag.REPLY:
            refuse(meta, JobStat.DROP_FOREIGN_PBM)  # not the job's root
        elif ina.flags & Flag.ABORT:
            # A worker gave up on its call after sending up to seq: the next call
            # starts past it, no further than a call can have reached.
            index = job.param("job_index")
            epoch, last = self.store.reg_read(REG_PROGRESS, index, (0, 0))
            if (epoch != job.param("epoch")
                    or seq_diff(ina.seq, last) > job.param("reach") - job.param("lap")):
                refuse(meta, JobStat.DROP_ABORT_AHEAD)
                return
            if seq_diff(ina.seq, last) > 0:
                self.store.reg_write(REG_PROGRESS, index, (epoch, ina.seq))
            refuse(meta, JobStat.ABORTED)
        else:
            # answer_sync. The first SYNC of a deployment or plan (the progress is of
            # another epoch) gets its own proposal back, which then counts as 2W + 1
            # past the highest completed seq; later ones get that 2W + 1 past (no
            # cell of the last W rounds, whose results a worker may still lack).
            index, epoch = job.param("job_index"), job.param("epoch")
            done_epoch, last = self.store.reg_read(REG_PROGRESS, index, (0, 0))
            window = job.param("lap") + 1
            if done_epoch != epoch:
                base = ina.seq
                self.store.reg_write(REG_PROGRESS, index, (epoch, seq_add(base, -window)))
            else:
                base = seq_add(last, window)
            frame.ina = replace(ina, seq=base, flags=ina.flags | Flag.REPLY, gen=job.param("gen"))
            ipv4.dst, ipv4.src, ipv4.ttl = ipv4.src, ip_str(job.param("node_ip")), IPV4_INITIAL_TTL
            udp.checksum = 0
            meta.to_me = False
            meta.job_events.add(JobStat.SYNCED)

    def query(self, frame: Frame, meta: Meta) -> None:
        """aggregation.p4's queries: HELD if this node holds the contribution (the
        query's P-BM) to round ``seq`` in a round still waiting for others, else
        SEND, back to the query's source by IPv4; below the root, a round complete
        here is asked of the parent, for this node's A-BM (ask_parent). Nothing is
        written."""
        job, ina, ipv4, udp = meta.job, frame.ina, frame.ipv4, frame.udp
        assert job is not None and ina is not None and ipv4 is not None and udp is not None
        abm = meta.abm
        if abm & ina.pbm == 0 or ina.pbm & ~abm & BM_MASK:  # (abm is 0 in another set)
            refuse(meta, JobStat.DROP_FOREIGN_PBM)  # not its worker's node
            return
        s = self.store
        cell, cs = open_cell(self.store, job, ina.seq)
        if meta.sets == 1:
            bitmap = cs.bitmap
        else:
            set_gen, set_bitmap = s.reg_read(REG_SETS, cell * BIER_SETS + ina.si, (0, 0))
            bitmap = set_bitmap if set_gen == cs.gen else 0
        here = (ina.gen == job.param("gen") and cs.epoch == job.param("epoch")
                and cs.seq == ina.seq and bool(bitmap & ina.pbm))
        held = here and cs.done != meta.sets
        if here and not held and job.action != n.VAT_ROOT.name and not cs.kept:
            frame.ina = replace(ina, pbm=meta.abm)
            ipv4.dst = ip_str(job.param("parent_ip"))
            udp.checksum = 0
            meta.to_me = False
            meta.job_events.add(JobStat.QUERY_UP)
            return
        verdict = QueryVerdict.HELD if held else QueryVerdict.SEND
        frame.ina = replace(ina, count=int(verdict), flags=ina.flags | Flag.REPLY)
        ipv4.dst, ipv4.src, ipv4.ttl = ipv4.src, ip_str(job.param("node_ip")), IPV4_INITIAL_TTL
        udp.checksum = 0
        meta.to_me = False
        meta.job_events.add(JobStat.QUERIED)
        if held:
            meta.job_events.add(JobStat.QUERY_HELD)
