"""ina_validate.p4: what is wrong with an INA packet over IPv4, if anything; a
host's packet checked against its port (host_ports) and job entry (job_members)."""

from __future__ import annotations

from dataclasses import dataclass

from ina.control import p4names as n
from ina.model.pipeline.metadata import Meta
from ina.protocol.constants import (
    BIER_SETS,
    ELEMS_BY_WIDTH,
    INA_VERSION,
    MAX_BFR_ID,
    Flag,
    Op,
    SwitchStat,
)
from ina.protocol.frames import Frame

# The job_members actions of a host that may send the job's packets.
_WORKER_MEMBERSHIPS = (n.MEMBER.name, n.MEMBER_ON_HOSTS.name)


@dataclass
class InaValidate:
    def apply(self, frame: Frame, meta: Meta) -> None:
        """meta.drop: the first thing wrong with the packet."""
        ina, ipv4 = frame.ina, frame.ipv4
        assert ina is not None and ipv4 is not None
        if ina.version != INA_VERSION:
            meta.drop = SwitchStat.DROP_BAD_VERSION
        elif ina.width not in ELEMS_BY_WIDTH:
            meta.drop = SwitchStat.DROP_BAD_WIDTH
        elif (not 1 <= ina.count <= ELEMS_BY_WIDTH[ina.width]
              and not ina.flags & Flag.SYNC):
            meta.drop = SwitchStat.DROP_BAD_COUNT
        elif ina.op not in (Op.SUM, Op.MIN, Op.MAX):
            meta.drop = SwitchStat.DROP_BAD_OP
        elif ina.pbm == 0 or ina.si >= BIER_SETS or ina.flags & Flag.RESULT:
            meta.drop = SwitchStat.DROP_BAD_PBM
        elif ina.dest > MAX_BFR_ID:
            meta.drop = SwitchStat.DROP_BAD_DEST
        elif meta.from_host and ipv4.src != meta.host_ip:
            meta.drop = SwitchStat.DROP_SPOOFED_SOURCE
        elif meta.from_host and ina.flags & Flag.REPLY:
            if meta.membership != n.BIER_SOURCE.name:  # only a server root answers
                meta.drop = SwitchStat.DROP_FORGED_PBM
        elif meta.from_host and (ina.pbm != meta.host_bit or ina.si != meta.host_si):
            meta.drop = SwitchStat.DROP_FORGED_PBM
        elif meta.from_host and meta.membership not in _WORKER_MEMBERSHIPS:
            meta.drop = SwitchStat.DROP_NOT_MEMBER
