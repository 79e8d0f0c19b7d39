"""jobs.p4: the job's entry on this switch (vat_jobs) and, at a root spanning BIER
sets, its A-BM in the packet's set (vat_sets); it only sets metadata."""

from __future__ import annotations

from dataclasses import dataclass

from ina.control import p4names as n
from ina.model.pipeline.metadata import Meta
from ina.model.pipeline.tables import Control
from ina.protocol.frames import Frame, ip_int


@dataclass
class Jobs(Control):
    def apply(self, frame: Frame, meta: Meta) -> None:
        ina = frame.ina
        assert ina is not None
        meta.job = self.exact(n.VAT_JOBS, job_id=ina.job_id)
        if meta.job is not None and frame.ipv4 is not None:
            meta.to_me = ip_int(frame.ipv4.dst) == meta.job.param("node_ip")
        if meta.job is not None and meta.job.action != n.TRANSIT.name:
            meta.sets = meta.job.param("sets") if meta.job.action == n.VAT_ROOT.name else 1
            if meta.sets == 1:  # the node's set and its A-BM in the entry
                meta.abm = (meta.job.param("abm")
                            if ina.si == meta.job.param("set_id") else 0)
            else:
                abm = self.exact(n.VAT_SETS, job_id=ina.job_id, si=ina.si)
                meta.abm = abm.param("abm") if abm is not None else 0
