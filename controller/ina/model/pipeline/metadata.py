"""headers.p4's metadata_t: what the controls of one packet tell each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from ina.control.entities import TableEntry
from ina.protocol.constants import JobStat, SwitchStat


@dataclass
class Meta:
    from_host: bool = False
    host_bit: int = 0
    host_si: int = 0
    host_ip: str = ""
    membership: str | None = None  # the job_members action for this host port
    member_gen: int = 0  # the job's plan generation in that entry (member, member_on_hosts)
    peers: int = 0  # the job's workers in the host's set (member)
    owned: bool = False  # a worker's own values, put in BIER here (OP_COPY)
    to_me: bool = False
    job: TableEntry | None = None
    sets: int = 0  # BIER sets the node's A-BM spans
    abm: int = 0  # the A-BM's bits in the packet's set
    job_events: set[JobStat] = field(default_factory=set)
    drop: SwitchStat | None = None
    consumed: bool = False  # absorbed into a slot or dropped by a job check
    egress_port: int | None = None
    mcast_grp: int = 0
    bier_result: bool = False  # a root's result: egress fills in each copy's set
    packet_in: bool = False  # a neighbour's link probe, up to the controller
