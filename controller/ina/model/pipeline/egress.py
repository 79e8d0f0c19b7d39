"""egress.p4: a BIER copy's work (bier_egress.py), counted by outcome; then every
packet that leaves by a port (not pruned, not to the CPU port) through
Congestion (congestion.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ina.control import p4names as n
from ina.model.pipeline.bier_egress import BierEgress, BierOut
from ina.model.pipeline.congestion import Congestion
from ina.model.pipeline.metadata import Meta
from ina.model.pipeline.tables import Control
from ina.protocol.constants import JOB_STAT_STRIDE, MAX_PORTS, JobStat, SwitchStat
from ina.protocol.frames import Frame


@dataclass
class InaEgress(Control):
    congestion: Congestion
    bier: BierEgress = field(init=False)

    def __post_init__(self) -> None:
        self.bier = BierEgress(self.store)

    def apply(self, frame: Frame, meta: Meta, port: int, rid: int, nbytes: int) -> bool:
        """Whether the copy of ``frame`` to ``port`` (replica ``rid``) leaves: a
        BIER copy may be pruned. Counters count ``nbytes``, the length the packet
        entered with (as BMv2 does)."""
        if frame.bier is None:
            return True
        copy = self.bier.apply(frame, meta, port, rid)
        if copy.out is BierOut.PRUNED:
            self.store.count(n.EGRESS_SWITCH_STATS, SwitchStat.BIER_COPY_PRUNED, nbytes)
            return False
        if copy.completion:
            self.store.count(n.EGRESS_SWITCH_STATS, SwitchStat.COMPLETION_SENT, nbytes)
        if copy.out is BierOut.SENT:
            self.store.count(n.EGRESS_SWITCH_STATS, SwitchStat.BIER_COPY_SENT, nbytes)
            return True
        self.store.count(n.EGRESS_SWITCH_STATS, SwitchStat.BIER_COPY_DELIVERED, nbytes)
        if meta.job is not None:
            self.store.count(
                n.EGRESS_JOB_STATS,
                meta.job.param("job_index") * JOB_STAT_STRIDE + JobStat.DELIVERED, nbytes,
            )
        return True

    def leave(self, port: int, out: Frame | bytes, nbytes: int) -> bytes:
        """The bytes of ``out`` as they leave ``port``: through Congestion unless to
        the CPU port (or the drop port), which has no counter cell."""
        if port >= MAX_PORTS:
            return out if isinstance(out, bytes) else out.pack()
        return self.congestion.apply(port, out, nbytes)
