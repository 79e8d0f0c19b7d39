"""ingress.p4: every packet is the controller's (a packet-out: switch.py; a link
probe from a neighbour, up as a packet-in), BIER (bier_ingress.py), INA over IPv4
(checked, steered by a worker's edge switch to its parent VAT node, then handled
by its job's VAT node if this switch has one: aggregation.py), or plain IPv4
(routing.py). Drops are counted here, once, by reason."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ina.control import p4names as n
from ina.control.entities import TableEntry
from ina.model.pipeline.addresses import Addresses
from ina.model.pipeline.aggregation import Aggregation
from ina.model.pipeline.bier_ingress import BierIngress
from ina.model.pipeline.edge import Edge
from ina.model.pipeline.ina_validate import InaValidate
from ina.model.pipeline.jobs import Jobs
from ina.model.pipeline.metadata import Meta
from ina.model.pipeline.routing import Routing
from ina.model.pipeline.tables import Control
from ina.protocol.constants import (
    ELEMS_PER_PACKET,
    ETHERTYPE_BIER,
    ETHERTYPE_PROBE,
    INA_VERSION,
    IPV4_ECN_CE,
    IPV4_ECN_MASK,
    JOB_STAT_STRIDE,
    OP_COPY,
    QUERY,
    WIDTH32,
    Ecn,
    Flag,
    JobStat,
    SwitchStat,
)
from ina.protocol.frames import Bier, Frame, ip_str


@dataclass
class InaIngress(Control):
    edge: Edge = field(init=False)
    addresses: Addresses = field(init=False)
    ina_validate: InaValidate = field(init=False)
    jobs: Jobs = field(init=False)
    aggregation: Aggregation = field(init=False)
    routing: Routing = field(init=False)
    bier: BierIngress = field(init=False)

    def __post_init__(self) -> None:
        self.edge = Edge(self.store)
        self.addresses = Addresses(self.store)
        self.ina_validate = InaValidate()
        self.jobs = Jobs(self.store)
        self.aggregation = Aggregation(self.store)
        self.routing = Routing(self.store)
        self.bier = BierIngress()

    def apply(self, frame: Frame, meta: Meta, in_port: int, nbytes: int) -> None:
        """The packet through ingress, and its job's events and its drop, if any,
        counted (``nbytes``: the length it entered with)."""
        self.handle(frame, meta, in_port)
        if meta.job_events:
            # Without a job entry here (a TOLD at an edge), BMv2's zeroed metadata
            # gives job index 0.
            base = meta.job.param("job_index") * JOB_STAT_STRIDE if meta.job is not None else 0
            for event in sorted(meta.job_events):
                self.store.count(n.INGRESS_JOB_STATS, base + event, nbytes)
        if meta.drop is not None:
            self.store.count(n.INGRESS_SWITCH_STATS, meta.drop, nbytes)

    def handle(self, frame: Frame, meta: Meta, in_port: int) -> None:
        member = self.edge.apply(frame, meta, in_port)
        if meta.drop is not None:  # an undeclared port
            return
        if member is not None and member.action == n.MEMBER.name:
            # A worker's edge switch steers its packets.
            assert frame.ina is not None
            if frame.ina.flags & QUERY == Flag.SYNC:
                self.to_root(frame, meta, member)
            elif frame.ina.gen == meta.member_gen:
                self.to_parent(frame, member)
        if frame.ina is not None:  # looked up once, for BIER and IPv4 alike
            self.jobs.apply(frame, meta)
            # CE on its IPv4 header (a switch that knows no INA marked it on the way)
            # goes into its INA header.
            if frame.ipv4 is not None and frame.ipv4.tos & IPV4_ECN_MASK == IPV4_ECN_CE:
                frame.ina = replace(frame.ina, ecn=frame.ina.ecn | Ecn.CE)
        if frame.error is not None:
            meta.drop = SwitchStat.DROP_PARSER_ERROR
        elif frame.ipv4 is not None and not frame.ipv4.checksum_ok:
            meta.drop = SwitchStat.DROP_IP_CHECKSUM
        elif frame.bier is not None:
            self.bier.apply(frame, meta)
            if (meta.drop is None and meta.job is not None
                    and meta.job.action == n.VAT_NODE.name and frame.ina is not None
                    and frame.ina.op != OP_COPY
                    and frame.ina.flags & (Flag.RESULT | Flag.SYNC) == Flag.RESULT):
                self.aggregation.apply(frame, meta)  # a node below the root keeps it
        elif meta.from_host and frame.ina is not None and frame.ina.op == OP_COPY:
            self.own(frame, meta)
        elif frame.ipv4 is not None and frame.ipv4.ver_ihl & 0xF == 5:
            self.ipv4(frame, meta)
        elif frame.eth.ethertype == ETHERTYPE_PROBE and not meta.from_host:
            # probe_in: a neighbour's link probe, up to the controller.
            meta.packet_in = True
        else:
            meta.drop = SwitchStat.DROP_NOT_SUPPORTED

    def to_root(self, frame: Frame, meta: Meta, member: TableEntry) -> None:
        """A worker's SYNCs and ABORTs go to the job's root, in the plan's
        generation."""
        ina, ipv4, udp = frame.ina, frame.ipv4, frame.udp
        assert ina is not None and ipv4 is not None and udp is not None
        ipv4.dst = ip_str(member.param("root_ip"))
        udp.checksum = 0  # the pseudo-header changed
        if ina.gen != meta.member_gen:
            frame.ina = replace(ina, gen=meta.member_gen)

    def to_parent(self, frame: Frame, member: TableEntry) -> None:
        """A worker's contributions and QUERYs of the plan's generation go to its
        parent VAT node."""
        ipv4, udp = frame.ipv4, frame.udp
        assert ipv4 is not None and udp is not None
        ipv4.dst = ip_str(member.param("parent_ip"))
        udp.checksum = 0

    def own(self, frame: Frame, meta: Meta) -> None:
        """A worker's own values (OP_COPY), whole, as itself, in
        the plan it is told of, go by BIER to the job's other workers in its set."""
        ina, ipv4, udp = frame.ina, frame.ipv4, frame.udp
        assert ina is not None and ipv4 is not None and udp is not None
        others = meta.peers & ~meta.host_bit
        if (ina.version == INA_VERSION and ina.flags == Flag.RESULT
                and meta.membership == n.MEMBER.name and ina.gen == meta.member_gen
                and ipv4.src == meta.host_ip and ipv4.ver_ihl & 0xF == 5
                and ina.pbm == meta.host_bit and ina.si == meta.host_si
                and ina.width == WIDTH32 and ina.dest == 0 and frame.lanes is not None
                and 1 <= ina.count <= ELEMS_PER_PACKET and others):
            frame.bier = Bier.for_set(ina.si, others)
            frame.eth.ethertype = ETHERTYPE_BIER
            udp.checksum = 0
            meta.owned = True
            meta.job_events.add(JobStat.OWNED)
            self.bier.apply(frame, meta)
        else:
            meta.drop = SwitchStat.DROP_BAD_OWNED

    def ipv4(self, frame: Frame, meta: Meta) -> None:
        """An IPv4 packet without options: INA checked, then its job's, or routed."""
        ipv4 = frame.ipv4
        assert ipv4 is not None
        if meta.job is None:  # a job's entry told already
            self.addresses.apply(ipv4.dst, meta)
        ina = frame.ina
        if ina is not None:
            self.ina_validate.apply(frame, meta)
            if meta.drop is not None:
                return
            if meta.from_host and meta.membership == n.MEMBER_ON_HOSTS.name:
                if ina.flags & Flag.ABORT:
                    meta.consumed = True  # no call on switches to give up
                    return
                self.tell_worker(frame, meta, Flag.ON_HOSTS)
            elif (meta.from_host and meta.membership == n.MEMBER.name
                  and ina.flags & QUERY != Flag.SYNC and ina.gen != meta.member_gen):
                self.tell_worker(frame, meta, Flag.REPLAN)
            elif meta.job is not None:
                if meta.job.action == n.TRANSIT.name:
                    meta.job_events.add(JobStat.TRANSIT)
                else:
                    self.aggregation.apply(frame, meta)
            if meta.consumed or meta.drop is not None or meta.mcast_grp:
                return
        if meta.to_me:
            meta.drop = (SwitchStat.DROP_UNKNOWN_JOB if ina is not None
                         else SwitchStat.DROP_NOT_SUPPORTED)
        else:
            self.routing.apply(frame, meta)

    def tell_worker(self, frame: Frame, meta: Meta, what: Flag) -> None:
        """The packet goes back to the worker as a notice
        (SYNC | REPLY | what, and NODATA if it had no array) in the plan's
        generation, its array with it."""
        ina, ipv4, udp = frame.ina, frame.ipv4, frame.udp
        assert ina is not None and ipv4 is not None and udp is not None
        frame.ina = replace(ina, flags=Flag.SYNC | Flag.REPLY | what | (ina.flags & Flag.NODATA),
                            gen=meta.member_gen)
        udp.checksum = 0
        ipv4.src, ipv4.dst = ipv4.dst, ipv4.src
        meta.to_me = False
        meta.job_events.add(JobStat.TOLD)
