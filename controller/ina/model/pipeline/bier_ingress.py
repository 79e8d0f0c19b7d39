"""bier_ingress.p4: check the BIER header, spend one TTL, and hand the packet to a
multicast group: its job's on this switch, or that of every BIER port."""

from __future__ import annotations

from dataclasses import dataclass

from ina.control import p4names as n
from ina.control.switch_state import job_group_id
from ina.model.pipeline.metadata import Meta
from ina.protocol.constants import (
    BIER_BSL_CODE,
    BIER_MCAST_GROUP,
    BIER_NIBBLE,
    BIER_SETS,
    BIER_VERSION,
    OP_COPY,
    JobStat,
    SwitchStat,
)
from ina.protocol.frames import Frame


@dataclass
class BierIngress:
    def apply(self, frame: Frame, meta: Meta) -> None:
        bier = frame.bier
        assert bier is not None
        # A worker's own values were put in BIER by ingress, and checked there.
        if meta.from_host and not meta.owned and meta.membership != n.BIER_SOURCE.name:
            meta.drop = SwitchStat.DROP_BIER_FROM_HOST
        elif (meta.from_host and not meta.owned
              and (frame.ipv4 is None or frame.ipv4.src != meta.host_ip)):
            meta.drop = SwitchStat.DROP_SPOOFED_SOURCE  # a server root, from its address
        elif (bier.nibble != BIER_NIBBLE or bier.version != BIER_VERSION
              or bier.bsl != BIER_BSL_CODE or not 0 <= bier.si < BIER_SETS
              or bier.bitstring == 0):
            meta.drop = SwitchStat.DROP_BIER_MALFORMED
        elif bier.ttl <= 1:
            meta.drop = SwitchStat.DROP_BIER_TTL
        else:
            bier.ttl -= 1
            if meta.job is not None and not meta.owned:  # owned: counted as OWNED
                meta.job_events.add(JobStat.BIER_RECEIVED)
            # A worker's own values may have to go up: every port, not the job's tree.
            if (meta.job is not None and meta.job.action in (n.TRANSIT.name, n.VAT_NODE.name)
                    and (frame.ina is None or frame.ina.op != OP_COPY)):
                meta.mcast_grp = job_group_id(meta.job.param("job_index"))
            else:
                meta.mcast_grp = BIER_MCAST_GROUP
