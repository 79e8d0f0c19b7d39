"""One switch of the reference model: the data plane of p4src/ in plain Python.

``ModelSwitch`` runs the P4 program's ingress, replication and egress on bytes,
with the tables the controller wrote into its ``MemorySwitch`` and with the same
counters and register state. The structure follows p4src/ control by control;
keep them in step.

The CPU port is a port like the others, numbered CPU_PORT, as on BMv2 (whose
P4Runtime server turns what leaves through it into PacketIn messages and
injects PacketOut messages into it): a packet-out enters on CPU_PORT with its
packet_out header in front (``packet_out_frame``), a packet-in leaves through
CPU_PORT with its packet_in header in front (``split_packet_in``).

Congestion marks (congestion.p4) need what BMv2 has and the model does not: the
depth of each port's egress queue as a packet joins it (``queue_depth(port)``,
0 unless a test says otherwise) and a clock in microseconds for the phantom
queues (``clock_us``). Without port_queues entries (the topology's ``queues``) and
with no queue depth set, nothing is ever marked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ina.control import p4names as n
from ina.control.entities import Lpm, TableEntry
from ina.control.memory_switch import MemorySwitch
from ina.control.switch_state import job_group_id
from ina.protocol import lanes
from ina.protocol.arith import seq_add, seq_diff
from ina.protocol.constants import (
    ARRAY_BYTES,
    BIER_BIFT_ID,
    BIER_BSL_CODE,
    BIER_HEADER_BYTES,
    BIER_MCAST_GROUP,
    BIER_NIBBLE,
    BIER_SETS,
    BIER_VERSION,
    BITSTRING_BITS,
    CPU_PORT,
    ELEMS_BY_WIDTH,
    ELEMS_PER_PACKET,
    ETHERNET_BYTES,
    ETHERTYPE_BIER,
    ETHERTYPE_IPV4,
    ETHERTYPE_PROBE,
    INA_VERSION,
    IPV4_ECN_CE,
    IPV4_ECN_MASK,
    IPV4_INITIAL_TTL,
    JOB_STAT_STRIDE,
    LANES,
    MARK_QDEPTH,
    MAX_BFR_ID,
    MAX_PORTS,
    OP_COPY,
    PHANTOM_RATE_SHIFT,
    QUERY,
    WIDTH32,
    Ecn,
    Flag,
    JobStat,
    Op,
    QueryVerdict,
    SwitchStat,
)
from ina.protocol.frames import Bier, Frame, ip_int, ip_str, mac_str, parse_frame

BM_MASK = (1 << BITSTRING_BITS) - 1
U32 = 0xFFFFFFFF

# Register names of the aggregation state (model-side mirror of aggregation.p4).
REG_CELLS = "cells"
REG_SETS = "set_bitmaps"
REG_PROGRESS = "progress"  # per job index, at its root: (epoch, highest completed seq)
REG_PHANTOM = "phantom"  # per port: (bytes held, time in us) of its phantom queue
REG_LANES = tuple(f"lane{i}" for i in range(LANES))
# The job_members actions of a host that may send the job's packets (ina_validate.p4).
_WORKER_MEMBERSHIPS = (n.MEMBER.name, n.MEMBER_ON_HOSTS.name)

#: headers.p4's packet_out_h and packet_in_h: a 9-bit port, 7 bits of padding.
CONTROLLER_HEADER_BYTES = 2
#: simple_switch's drop port: a packet sent there is dropped (not counted).
DROP_PORT = 511
#: BMv2's egress_global_timestamp: microseconds in 48 bits.
TIME_MASK = (1 << 48) - 1


def _monotonic_us() -> int:
    return time.monotonic_ns() // 1000


def _controller_header(port: int, frame: bytes) -> bytes:
    """``frame`` after a packet_out_h or packet_in_h naming ``port``."""
    return ((port & 0x1FF) << 7).to_bytes(CONTROLLER_HEADER_BYTES, "big") + frame


def _split_controller_header(raw: bytes) -> tuple[int, bytes]:
    return int.from_bytes(raw[:CONTROLLER_HEADER_BYTES], "big") >> 7, raw[CONTROLLER_HEADER_BYTES:]


def packet_out_frame(port: int, frame: bytes) -> bytes:
    """What enters CPU_PORT for a P4Runtime PacketOut of ``frame`` to ``port``."""
    return _controller_header(port, frame)


def split_packet_in(raw: bytes) -> tuple[int, bytes]:
    """(ingress port, frame) of what left through CPU_PORT: a P4Runtime PacketIn."""
    return _split_controller_header(raw)


@dataclass(frozen=True)
class CellState:
    """One cell's scalars, packed in one register on the switch (aggregation.p4):
    the round it holds (epoch of the job entry, sequence number), a generation
    that tags its per-set bitmaps, the round's element count and op, the
    overflow flag, how many BIER sets are full, and the bitmap of a node that
    lies in one set (a root spanning sets keeps a bitmap per set instead); the
    round's element width and whether it holds an array (a contribution with
    data came; else only NODATA ones); and whether any contribution carried a
    congestion mark (Ecn.CE)."""

    epoch: int = 0
    seq: int = 0
    gen: int = 0
    count: int = 0
    op: int = 0
    overflow: bool = False
    done: int = 0
    bitmap: int = 0
    width: int = 0
    data: bool = False
    ce: bool = False
    #: Below the root: the cell's lanes hold the round's result, kept as it passed
    #: down (its P-BM in ``bitmap``), for its workers' retransmissions.
    kept: bool = False


EMPTY_CELL = CellState()


@dataclass
class _Meta:
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


class ModelSwitch:
    def __init__(self, name: str, store: MemorySwitch,
                 queue_depth: Callable[[int], int] | None = None,
                 clock_us: Callable[[], int] | None = None):
        """``queue_depth(port)``: what BMv2's enq_qdepth would say for a packet joining
        the port's egress queue now (default 0: BMv2 keeps up); ``clock_us``: its
        egress_global_timestamp (default: the monotonic clock)."""
        self.name = name
        self.store = store
        self.queue_depth: Callable[[int], int] = queue_depth or (lambda port: 0)
        self.clock_us: Callable[[], int] = clock_us or _monotonic_us

    # --- tables -------------------------------------------------------------------

    def _exact(self, spec: n.TableSpec, **key: int) -> TableEntry | None:
        return self.store.lookup(spec.name, tuple((k, key[k]) for k in spec.key_names))

    def _lpm(self, dst: int) -> TableEntry | None:
        best: TableEntry | None = None
        best_len = -1
        for e in self.store.tables.get(n.IPV4_ROUTES.name, {}).values():
            lpm = e.match_value("dst_addr")
            assert isinstance(lpm, Lpm)
            mask = (U32 << (32 - lpm.prefix_len)) & U32
            if dst & mask == lpm.value & mask and lpm.prefix_len > best_len:
                best, best_len = e, lpm.prefix_len
        return best

    # --- pipeline -----------------------------------------------------------------

    def process(self, in_port: int, raw: bytes) -> list[tuple[int, bytes]]:
        """One packet through ingress, replication and egress: the frames sent, each
        with its egress port (CPU_PORT: a packet-in, its packet_in header in front)."""
        if in_port == CPU_PORT and len(raw) >= CONTROLLER_HEADER_BYTES:
            return [(port, self._leave(port, out, len(raw)))
                    for port, out in self._packet_out(raw)]
        if in_port < MAX_PORTS:
            self.store.count(n.PORT_RECEIVED, in_port, len(raw))
        if len(raw) < ETHERNET_BYTES:
            # BMv2's parser stops at the Ethernet header: a parser error, counted.
            self.store.count(n.INGRESS_SWITCH_STATS, SwitchStat.DROP_PARSER_ERROR, len(raw))
            return []
        frame = parse_frame(raw)
        meta = _Meta()
        self._ingress(frame, meta, in_port)
        if meta.job_events:
            # Without a job entry here (a TOLD at an edge), BMv2's zeroed metadata
            # gives job index 0.
            base = meta.job.param("job_index") * JOB_STAT_STRIDE if meta.job is not None else 0
            for event in sorted(meta.job_events):
                self.store.count(n.INGRESS_JOB_STATS, base + event, len(raw))
        if meta.drop is not None:
            self.store.count(n.INGRESS_SWITCH_STATS, meta.drop, len(raw))
            return []
        if meta.consumed:
            return []
        if meta.mcast_grp:
            group = self.store.groups.get(meta.mcast_grp)
            out = []
            for port, rid in group.replicas if group else ():
                copy = frame.copy()
                if self._egress(copy, meta, port, rid, len(raw)):
                    out.append((port, self._leave(port, copy, len(raw))))
            return out
        if meta.packet_in:
            self.store.count(n.INGRESS_SWITCH_STATS, SwitchStat.PROBE_RECEIVED, len(raw))
            return [(CPU_PORT, _controller_header(in_port, raw))]
        if meta.egress_port is None:
            return []
        return [(meta.egress_port, self._leave(meta.egress_port, frame, len(raw)))]

    def _packet_out(self, raw: bytes) -> list[tuple[int, Frame | bytes]]:
        """ingress.p4's controller_out: the frame after the packet_out header leaves
        by the port the header names; egress and the deparser see it as parsed."""
        port, rest = _split_controller_header(raw)
        self.store.count(n.INGRESS_SWITCH_STATS, SwitchStat.PROBE_SENT, len(raw))
        if port == DROP_PORT:
            return []
        if len(rest) < ETHERNET_BYTES:
            return [(port, rest)]  # a parser error, which only ingress would count
        frame = parse_frame(rest)
        if frame.bier is None and (frame.ipv4 is None or frame.ipv4.ver_ihl & 0xF != 5):
            return [(port, rest)]  # nothing to rewrite, no IPv4 checksum to update
        if frame.bier is not None:
            # BMv2's metadata is zeroed: no job, not a result; the set is the BIFT-id's,
            # cut to 8 bits (ingress never checked it), which egress does not write back.
            bift_id = frame.bier.bift_id
            frame.bier.bift_id = BIER_BIFT_ID + ((bift_id - BIER_BIFT_ID) & 0xFF)
            if not self._egress(frame, _Meta(), port, 0, len(raw)):
                return []
            if frame.bier is not None:
                frame.bier.bift_id = bift_id
        return [(port, frame)]

    def _ingress(self, frame: Frame, meta: _Meta, in_port: int) -> None:
        edge = self._exact(n.HOST_PORTS, ingress_port=in_port)
        if edge is None:  # a port the controller did not declare carries nothing
            meta.drop = SwitchStat.DROP_UNDECLARED_PORT
            return
        if edge.action == n.FROM_HOST.name:
            meta.from_host, meta.host_bit = True, edge.param("host_bit")
            meta.host_si = edge.param("host_si")
            meta.host_ip = ip_str(edge.param("host_ip"))
            if frame.ina is not None:
                # (Its meter polices the host's packets of the job on BMv2; the model
                # has no clock and does not.)
                member = self._exact(n.JOB_MEMBERS, job_id=frame.ina.job_id, ingress_port=in_port)
                meta.membership = member.action if member is not None else None
                if member is not None and member.action == n.MEMBER.name:
                    self._steer(frame, meta, member)
                elif member is not None and member.action == n.MEMBER_ON_HOSTS.name:
                    meta.member_gen = member.param("gen")
        if frame.ina is not None:  # looked up once, for BIER and IPv4 alike
            meta.job = self._exact(n.VAT_JOBS, job_id=frame.ina.job_id)
            if meta.job is not None and frame.ipv4 is not None:
                meta.to_me = ip_int(frame.ipv4.dst) == meta.job.param("node_ip")
            if meta.job is not None and meta.job.action != n.TRANSIT.name:
                meta.sets = meta.job.param("sets") if meta.job.action == n.VAT_ROOT.name else 1
                if meta.sets == 1:  # the node's set and its A-BM in the entry
                    meta.abm = (meta.job.param("abm")
                                if frame.ina.si == meta.job.param("set_id") else 0)
                else:
                    abm = self._exact(n.VAT_SETS, job_id=frame.ina.job_id, si=frame.ina.si)
                    meta.abm = abm.param("abm") if abm is not None else 0
            # CE on its IPv4 header (a switch that knows no INA marked it on the way)
            # goes into its INA header (ingress.p4).
            if frame.ipv4 is not None and frame.ipv4.tos & IPV4_ECN_MASK == IPV4_ECN_CE:
                frame.ina = replace(frame.ina, ecn=frame.ina.ecn | Ecn.CE)
        if frame.error is not None:
            meta.drop = SwitchStat.DROP_PARSER_ERROR
        elif frame.ipv4 is not None and not frame.ipv4.checksum_ok:
            meta.drop = SwitchStat.DROP_IP_CHECKSUM
        elif frame.bier is not None:
            self._bier_ingress(frame, meta)
            if (meta.drop is None and meta.job is not None
                    and meta.job.action == n.VAT_NODE.name and frame.ina is not None
                    and frame.ina.op != OP_COPY
                    and frame.ina.flags & (Flag.RESULT | Flag.SYNC) == Flag.RESULT):
                self._keep(frame, meta)
        elif meta.from_host and frame.ina is not None and frame.ina.op == OP_COPY:
            self._own(frame, meta)
        elif frame.ipv4 is not None and frame.ipv4.ver_ihl & 0xF == 5:
            self._ipv4_ingress(frame, meta)
        elif frame.eth.ethertype == ETHERTYPE_PROBE and not meta.from_host:
            # probe_in: a neighbour's link probe, up to the controller.
            meta.packet_in = True
        else:
            meta.drop = SwitchStat.DROP_NOT_SUPPORTED

    def _steer(self, frame: Frame, meta: _Meta, member: TableEntry) -> None:
        """A worker's edge switch steers its packets: SYNCs and ABORTs to the job's
        root in the plan's generation, contributions and QUERYs of that generation
        to its parent VAT node (ingress.p4's to_root and to_parent)."""
        ina, ipv4 = frame.ina, frame.ipv4
        assert ina is not None and ipv4 is not None
        gen = meta.member_gen = member.param("gen")
        udp = frame.udp
        assert udp is not None
        meta.peers = member.param("peers")
        if ina.flags & QUERY == Flag.SYNC:
            ipv4.dst = ip_str(member.param("root_ip"))
            udp.checksum = 0  # the pseudo-header changed (ingress.p4)
            if ina.gen != gen:
                frame.ina = replace(ina, gen=gen)
        elif ina.gen == gen:
            ipv4.dst = ip_str(member.param("parent_ip"))
            udp.checksum = 0

    def _own(self, frame: Frame, meta: _Meta) -> None:
        """ingress.p4's own(): a worker's own values (OP_COPY), whole, as itself, in
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
            self._bier_ingress(frame, meta)
        else:
            meta.drop = SwitchStat.DROP_BAD_OWNED

    def _bier_ingress(self, frame: Frame, meta: _Meta) -> None:
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

    def _keep(self, frame: Frame, meta: _Meta) -> None:
        """aggregation.p4's results kept below the root: a result passing down on its
        way to every worker of this node (its BitString holds the A-BM), of the round
        complete in its cell here, replaces the node's aggregate (its array, flags
        and P-BM), for the workers' retransmissions."""
        job, ina, s = meta.job, frame.ina, self.store
        assert job is not None and ina is not None and frame.bier is not None
        cell, cs = self._cell(job, ina.seq)
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

    def _ipv4_ingress(self, frame: Frame, meta: _Meta) -> None:
        ipv4 = frame.ipv4
        assert ipv4 is not None
        if meta.job is None:  # a job's entry told already
            meta.to_me = self._exact(n.LOCAL_ADDRESSES, dst_addr=ip_int(ipv4.dst)) is not None
        ina = frame.ina
        if ina is not None:
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
            if meta.drop is not None:
                return
            if meta.from_host and meta.membership == n.MEMBER_ON_HOSTS.name:
                if ina.flags & Flag.ABORT:
                    meta.consumed = True  # no call on switches to give up
                    return
                self._tell_worker(frame, meta, Flag.ON_HOSTS)
            elif (meta.from_host and meta.membership == n.MEMBER.name
                  and ina.flags & QUERY != Flag.SYNC and ina.gen != meta.member_gen):
                self._tell_worker(frame, meta, Flag.REPLAN)
            elif meta.job is not None:
                if meta.job.action == n.TRANSIT.name:
                    meta.job_events.add(JobStat.TRANSIT)
                else:
                    self._aggregate(frame, meta)
            if meta.consumed or meta.drop is not None or meta.mcast_grp:
                return
        if meta.to_me:
            meta.drop = (SwitchStat.DROP_UNKNOWN_JOB if ina is not None
                         else SwitchStat.DROP_NOT_SUPPORTED)
        else:
            self._route(frame, meta)

    def _tell_worker(self, frame: Frame, meta: _Meta, what: Flag) -> None:
        """ingress.p4's tell_worker: the packet goes back to the worker as a notice
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

    def _route(self, frame: Frame, meta: _Meta) -> None:
        """routing.p4"""
        ipv4 = frame.ipv4
        assert ipv4 is not None
        if ipv4.ttl <= 1:
            meta.drop = SwitchStat.DROP_TTL
            return
        route = self._lpm(ip_int(ipv4.dst))
        if route is None:
            meta.drop = SwitchStat.DROP_NO_ROUTE
            return
        ipv4.ttl -= 1
        frame.eth.src = mac_str(route.param("smac").to_bytes(6, "big"))
        frame.eth.dst = mac_str(route.param("dmac").to_bytes(6, "big"))
        meta.egress_port = route.param("port")

    def _aggregate(self, frame: Frame, meta: _Meta) -> None:
        """aggregation.p4: the draft's A-BM/P-BM test and the cell state machine."""
        job, ina = meta.job, frame.ina
        assert job is not None and ina is not None
        if ina.flags & Flag.SYNC:
            self._sync(frame, meta)
            return
        abm = meta.abm
        if abm & ina.pbm == 0:
            if meta.to_me:
                self._job_drop(meta, JobStat.DROP_FOREIGN_PBM)
            else:
                meta.job_events.add(JobStat.PASSED)
            return
        if ina.pbm & ~abm & BM_MASK:
            self._job_drop(meta, JobStat.DROP_FOREIGN_PBM)
            return
        if ina.gen != job.param("gen"):
            # Of another plan of the job: its P-BM may not fit this plan's tree.
            self._job_drop(meta, JobStat.DROP_OLD_PLAN)
            return
        s = self.store
        window = job.param("slot_mask") + 1
        if job.action == n.VAT_ROOT.name:
            # What a call can have sent (aggregation.p4, "The window").
            epoch, done = s.reg_read(REG_PROGRESS, job.param("job_index"), (0, 0))
            if (epoch != job.param("epoch")
                    or seq_diff(ina.seq, done) > job.param("reach") - job.param("lap")):
                self._job_drop(meta, JobStat.DROP_AHEAD)
                return
            if seq_diff(done, ina.seq) > 2 * window:
                self._job_drop(meta, JobStat.DROP_STALE)
                return
        cell, cs = self._cell(job, ina.seq)
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
            self._absorb(frame, meta, cell, set_index, cs, 0, fresh=True)
        elif cs.seq != ina.seq:
            self._job_drop(meta, JobStat.DROP_STALE)
        elif cs.op != ina.op:
            self._job_drop(meta, JobStat.DROP_OP_MISMATCH)
        elif cs.width != ina.width:
            self._job_drop(meta, JobStat.DROP_WIDTH_MISMATCH)
        elif cs.data != (frame.lanes is not None):
            # A round takes one kind, data or NODATA: the packet never grows an array.
            self._job_drop(meta, JobStat.DROP_KIND_MISMATCH)
        elif bitmap & ina.pbm and not complete:
            self._job_drop(meta, JobStat.DROP_DUPLICATE)
        elif bitmap & ina.pbm:
            # A retransmission for a complete cell: something after it was lost. It
            # leaves with the cell's array (a round of data), or as it came (NODATA).
            meta.job_events.add(JobStat.RESENT)
            if cs.data:
                frame.lanes = tuple(s.reg_read(r, cell, 0) for r in REG_LANES)
            self._emit(frame, meta, cs.overflow, cs.ce, ina.pbm, all_sets=False,
                       kept=cs.bitmap if cs.kept else None)
        else:
            self._absorb(frame, meta, cell, set_index, cs, bitmap, fresh=False)

    def _cell(self, job: TableEntry, seq: int) -> tuple[int, CellState]:
        """The cell of ``seq`` in ``job``'s 2W cells from 2 * slot_base on (s and s + W
        share a slot), and what it holds."""
        window = job.param("slot_mask") + 1
        cell = 2 * job.param("slot_base") + (seq & (2 * window - 1))
        return cell, self.store.reg_read(REG_CELLS, cell, EMPTY_CELL)

    def _sync(self, frame: Frame, meta: _Meta) -> None:
        """A call's start: the root answers with the call's first sequence number."""
        job, ina, ipv4, udp = meta.job, frame.ina, frame.ipv4, frame.udp
        assert job is not None and ina is not None and ipv4 is not None and udp is not None
        if not meta.to_me:
            meta.job_events.add(JobStat.PASSED)  # to the root, or its answer back
        elif ina.flags & (QUERY | Flag.REPLY) == QUERY:
            self._query(frame, meta)
        elif job.action != n.VAT_ROOT.name or ina.flags & Flag.REPLY:
            self._job_drop(meta, JobStat.DROP_FOREIGN_PBM)  # not the job's root
        elif ina.flags & Flag.ABORT:
            # A worker gave up on its call after sending up to seq: the next call
            # starts past it, no further than a call can have reached.
            index = job.param("job_index")
            epoch, last = self.store.reg_read(REG_PROGRESS, index, (0, 0))
            if (epoch != job.param("epoch")
                    or seq_diff(ina.seq, last) > job.param("reach") - job.param("lap")):
                self._job_drop(meta, JobStat.DROP_ABORT_AHEAD)
                return
            if seq_diff(ina.seq, last) > 0:
                self.store.reg_write(REG_PROGRESS, index, (epoch, ina.seq))
            self._job_drop(meta, JobStat.ABORTED)
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

    def _query(self, frame: Frame, meta: _Meta) -> None:
        """aggregation.p4's queries: HELD if this node holds the contribution (the
        query's P-BM) to round ``seq`` in a round still waiting for others, else
        SEND, back to the query's source by IPv4; below the root, a round complete
        here is asked of the parent, for this node's A-BM (ask_parent). Nothing is
        written."""
        job, ina, ipv4, udp = meta.job, frame.ina, frame.ipv4, frame.udp
        assert job is not None and ina is not None and ipv4 is not None and udp is not None
        abm = meta.abm
        if abm & ina.pbm == 0 or ina.pbm & ~abm & BM_MASK:  # (abm is 0 in another set)
            self._job_drop(meta, JobStat.DROP_FOREIGN_PBM)  # not its worker's node
            return
        s = self.store
        cell, cs = self._cell(job, ina.seq)
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

    def _absorb(self, frame: Frame, meta: _Meta, cell: int, set_index: int, cs: CellState,
                bitmap: int, fresh: bool) -> None:
        """Add the packet's lanes to the cell (or start the cell's round with them). A
        round takes the kind of its first contribution (``_aggregate`` refused the
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
        self._emit(frame, meta, overflow, ce, meta.abm, all_sets=True)

    def _emit(self, frame: Frame, meta: _Meta, overflow: bool, ce: bool, bier_bits: int,
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

    def _leave(self, port: int, out: Frame | bytes, nbytes: int) -> bytes:
        """congestion.p4: a packet leaving ``port`` (any but the CPU port) is counted,
        fills the port's phantom queue (if port_queues has one for it), and is marked
        if BMv2's egress queue was deep (``queue_depth``) or the phantom queue holds
        more than its threshold: CE in an ECN-capable IPv4 header, Ecn.CE in an INA
        header. ``nbytes``: the length it entered the switch with (what BMv2's
        counters count, and its packet_length); the frame's bytes as it leaves."""
        if port >= MAX_PORTS:
            return out if isinstance(out, bytes) else out.pack()
        if isinstance(out, Frame):
            frame: Frame | None = out
        else:
            frame = parse_frame(out) if len(out) >= ETHERNET_BYTES else None
        ipv4 = frame.ipv4 if frame is not None else None
        if frame is not None and ipv4 is not None:
            length = (ETHERNET_BYTES + ipv4.total_len
                      + (BIER_HEADER_BYTES if frame.bier is not None else 0))
        else:
            length = nbytes  # not IPv4: as it came (std.packet_length)
        over_mark = False
        queue = self._exact(n.PORT_QUEUES, egress_port=port)
        if queue is not None:
            # The phantom queue drains at the port's rate since its last packet (bytes
            # per 2**PHANTOM_RATE_SHIFT us), never below empty, and holds at most the
            # link's buffer.
            now = self.clock_us() & TIME_MASK
            held, last = self.store.reg_read(REG_PHANTOM, port, (0, 0))
            drained = ((now - last) & TIME_MASK) * queue.param("rate") >> PHANTOM_RATE_SHIFT
            held = min(max(0, held - drained) + length, queue.param("limit"))
            self.store.reg_write(REG_PHANTOM, port, (held, now))
            over_mark = held > queue.param("mark")
        self.store.count(n.PORT_PACKETS, port, nbytes)
        if self.queue_depth(port) < MARK_QDEPTH and not over_mark:
            return out if isinstance(out, bytes) else out.pack()
        self.store.count(n.PORT_MARKS, port, nbytes)
        if frame is None or ipv4 is None:
            return out if isinstance(out, bytes) else out.pack()
        ect = ipv4.tos & IPV4_ECN_MASK != 0  # ECT(0), ECT(1) or CE already
        if isinstance(out, bytes):
            # IPv4 with options, as the controller sent it: parsed no further, and BMv2
            # updates no checksum of such a header (compute_checksum.p4).
            if not ect:
                return out
            return out[:ETHERNET_BYTES + 1] + bytes([out[ETHERNET_BYTES + 1] | IPV4_ECN_CE]) \
                + out[ETHERNET_BYTES + 2:]
        if ect:
            ipv4.tos |= IPV4_ECN_CE
        if frame.ina is not None:
            frame.ina = replace(frame.ina, ecn=frame.ina.ecn | Ecn.CE)
        return frame.pack()

    def _job_drop(self, meta: _Meta, stat: JobStat) -> None:
        meta.job_events.add(stat)
        meta.consumed = True

    def _egress(self, frame: Frame, meta: _Meta, port: int, rid: int, nbytes: int) -> bool:
        """bier_egress.p4: a root's result gets its set's A-BM; mask the BitString
        with the port's F-BM in the set; decapsulate to hosts. Counters count
        ``nbytes``, the length the packet entered with (as BMv2 does)."""
        bier = frame.bier
        if bier is None:
            return True
        if meta.bier_result:
            assert frame.ina is not None
            result = self._exact(n.RESULT_SETS, job_id=frame.ina.job_id, si=rid)
            if result is None:
                bier.bitstring = 0
            else:
                bier.bitstring = result.param("abm")
                bier.bift_id = BIER_BIFT_ID + rid
                frame.ina = replace(frame.ina, si=rid, pbm=result.param("abm"))
        row = self._exact(n.BIER_PORTS, egress_port=port, si=bier.si)
        masked = bier.bitstring & row.param("fbm") if row is not None else 0
        if row is None or masked == 0:
            self.store.count(n.EGRESS_SWITCH_STATS, SwitchStat.BIER_COPY_PRUNED, nbytes)
            return False
        bier.bitstring = masked
        frame.eth.src = mac_str(row.param("smac").to_bytes(6, "big"))
        frame.eth.dst = mac_str(row.param("dmac").to_bytes(6, "big"))
        ina = frame.ina
        if ina is not None and ina.dest != 0 and not _holds(ina.dest, bier.si, masked):
            # Not toward dest: the copy leaves as a completion, without its array.
            if frame.lanes is not None:
                _strip(frame)
            self.store.count(n.EGRESS_SWITCH_STATS, SwitchStat.COMPLETION_SENT, nbytes)
        if row.action == n.TO_BFR.name:
            self.store.count(n.EGRESS_SWITCH_STATS, SwitchStat.BIER_COPY_SENT, nbytes)
            return True
        frame.bier = None
        frame.eth.ethertype = ETHERTYPE_IPV4
        if frame.ipv4 is not None:
            frame.ipv4.dst = ip_str(row.param("host_ip"))
        self.store.count(n.EGRESS_SWITCH_STATS, SwitchStat.BIER_COPY_DELIVERED, nbytes)
        if meta.job is not None:
            self.store.count(
                n.EGRESS_JOB_STATS,
                meta.job.param("job_index") * JOB_STAT_STRIDE + JobStat.DELIVERED, nbytes,
            )
        return True


def _holds(dest: int, si: int, bitstring: int) -> bool:
    """Whether a BitString of set ``si`` holds BFR-id ``dest``'s bit: bit
    (dest - 1) mod 256 of set (dest - 1) div 256 (bier_egress.p4)."""
    return (dest - 1) >> 8 == si and bool(bitstring >> ((dest - 1) & 0xFF) & 1)


def _strip(frame: Frame) -> None:
    """The packet leaves without its array: flag NODATA, the IPv4 and UDP lengths
    shortened (bier_egress.p4's completion)."""
    ina, ipv4, udp = frame.ina, frame.ipv4, frame.udp
    assert ina is not None and ipv4 is not None and udp is not None
    ipv4.total_len = (ipv4.total_len - ARRAY_BYTES) & 0xFFFF
    udp.length = (udp.length - ARRAY_BYTES) & 0xFFFF
    udp.checksum = 0
    frame.ina = replace(ina, flags=ina.flags | Flag.NODATA)
    frame.lanes = None
