"""edge.p4: what the port a packet came in by says (host_ports: a host behind it,
or a switch), and for a host's INA packet, the host's part in its job
(job_members)."""

from __future__ import annotations

from dataclasses import dataclass

from ina.control import p4names as n
from ina.control.entities import TableEntry
from ina.model.pipeline.metadata import Meta
from ina.model.pipeline.tables import Control
from ina.protocol.constants import SwitchStat
from ina.protocol.frames import Frame, ip_str


@dataclass
class Edge(Control):
    def apply(self, frame: Frame, meta: Meta, in_port: int) -> TableEntry | None:
        """The host's job_members entry if it has one (ingress steers a worker's
        packets by it); an undeclared port refuses the packet (meta.drop)."""
        edge = self.exact(n.HOST_PORTS, ingress_port=in_port)
        if edge is None:  # a port the controller did not declare carries nothing
            meta.drop = SwitchStat.DROP_UNDECLARED_PORT
            return None
        if edge.action != n.FROM_HOST.name:
            return None
        meta.from_host, meta.host_bit = True, edge.param("host_bit")
        meta.host_si = edge.param("host_si")
        meta.host_ip = ip_str(edge.param("host_ip"))
        if frame.ina is None:
            return None
        # (Its meter polices the host's packets of the job on BMv2; the model has no
        # clock and does not.)
        member = self.exact(n.JOB_MEMBERS, job_id=frame.ina.job_id, ingress_port=in_port)
        meta.membership = member.action if member is not None else None
        if member is not None and member.action == n.MEMBER.name:
            meta.member_gen = member.param("gen")
            meta.peers = member.param("peers")
        elif member is not None and member.action == n.MEMBER_ON_HOSTS.name:
            meta.member_gen = member.param("gen")
        return member
