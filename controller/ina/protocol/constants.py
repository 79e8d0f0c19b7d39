"""Protocol and data-plane constants: the one source of truth.

The P4 program reads these through ``p4src/include/generated.p4``, which
``python -m ina.protocol.p4gen`` writes from this module (a test checks it is current).
Change a value here, regenerate, recompile.
"""

from __future__ import annotations

import enum

# --- Wire format --------------------------------------------------------------

#: Bits in a BIER BitString and in the INA P-BM (RFC 8296 BSL code 3 = 256 bits).
BITSTRING_BITS = 256
#: RFC 8296 BSL code for BITSTRING_BITS (1=64, 2=128, 3=256, ..., 7=4096).
BIER_BSL_CODE = {64: 1, 128: 2, 256: 3, 512: 4, 1024: 5, 2048: 6, 4096: 7}[BITSTRING_BITS]
#: int32 elements carried by every INA packet of width 32 (unused tail elements are zero):
#: as many whole lanes as fit a frame (BMv2's cost is per packet and per lane, a switch's
#: CPU per value falls with more values a packet; INA_VERSION 6).
ELEMS_PER_PACKET = 320
#: Bits of one lane: the data plane holds and combines a packet's values as lanes of
#: this many bits (p4c's widest ``bit<W>``), elements side by side (SWAR).
LANE_BITS = 2048
#: int32 elements per lane.
ELEMS_PER_LANE = LANE_BITS // 32
#: Lanes per packet.
LANES = ELEMS_PER_PACKET // ELEMS_PER_LANE
#: The INA header's ``width``: elements of 32 bits (ELEMS_PER_PACKET int32 values) or of
#: 16 bits (ELEMS16_PER_PACKET int16 values), in the same LANES lanes.
WIDTH32 = 32
WIDTH16 = 16
#: int16 elements carried by an INA packet of width 16 (twice as many, the same bytes).
ELEMS16_PER_PACKET = 2 * ELEMS_PER_PACKET
#: int16 elements per lane.
ELEMS16_PER_LANE = LANE_BITS // 16
#: Elements per packet of each width.
ELEMS_BY_WIDTH = {WIDTH32: ELEMS_PER_PACKET, WIDTH16: ELEMS16_PER_PACKET}

#: Bytes of an Ethernet header (no VLAN tag).
ETHERNET_BYTES = 14
#: Bytes of an IPv4 header without options and a UDP header: what carries an INA payload
#: after Ethernet (or BIER).
IPV4_UDP_BYTES = 20 + 8
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_BIER = 0xAB37  # RFC 8296 over Ethernet
IP_PROTO_UDP = 17
#: UDP destination port that marks an INA packet (and on which workers listen).
INA_UDP_PORT = 0x4941  # 18753, "IA"
#: 2: values travel and are combined as LANES lanes of LANE_BITS bits.
#: 3: the header's 8 reserved bits are the generation of the job's plan (gen).
#: 4: dest, width and 8 reserved bits after gen; flag NODATA (no array).
#: 5: those 8 reserved bits are ``ecn``: congestion marks (Ecn), ORed through aggregation.
#: 6: five lanes, not four: 320 int32 (640 int16) values a packet, whose frame inside
#: BIER (1,414 bytes) still fits Ethernet's 1,500-byte payload; a sixth lane would not.
#: 7: QUERY (SYNC | NODATA): before sending a chunk's values again, a worker asks its
#: first VAT node whether it holds them; the answer (QUERY | REPLY) says in ``count``.
INA_VERSION = 7

BIER_NIBBLE = 0b0101  # RFC 8296: first nibble after the BIFT-id/TC/S/TTL word
BIER_VERSION = 0
BIER_PROTO_IPV4 = 4  # RFC 8296 "Proto" for an IPv4 payload
#: BIER sets (RFC 8279 set identifiers SI 0..BIER_SETS-1): BFR-ids run from 1 to
#: BITSTRING_BITS * BIER_SETS. A BIER packet, and an INA packet's P-BM, hold the
#: bits of one set; BFR-id k is bit (k-1) % BITSTRING_BITS of set (k-1) // BITSTRING_BITS.
BIER_SETS = 16
#: BIFT-id of set SI 0 (SD 0, BSL 256); set SI has BIFT-id BIER_BIFT_ID + SI.
BIER_BIFT_ID = 1
BIER_INITIAL_TTL = 64
IPV4_INITIAL_TTL = 64


class Op(enum.IntEnum):
    """Reduction operation over signed 32-bit integers (INA header ``op``)."""

    SUM = 1
    MIN = 2
    MAX = 3


#: INA header ``op`` of a worker's own values for every other worker of its job
#: (a Broadcast's root, an Allgather's part): not a reduction, never aggregated; its
#: edge switch sends the packet once by BIER to the job's other workers, as a result.
OP_COPY = 4
assert OP_COPY not in Op._value2member_map_


class Ecn(enum.IntFlag):
    """INA header ``ecn`` (version 5): what the path said about congestion."""

    NONE = 0
    #: Congestion experienced: a switch's egress queue toward this packet's next hop was
    #: deep, on the path of this packet or of any contribution aggregated into it (ATP's
    #: scheme: a result carries the marks of every contribution in it). Set by switches
    #: (p4src/include/congestion.p4, aggregation.p4), never cleared by them.
    CE = 0x01


#: The IPv4 header's ECN field (RFC 3168: the two low bits of the TOS byte) and its
#: codepoints: not ECN-capable (0), ECT(1), ECT(0), CE. A switch marks CE only on a
#: packet whose sender said it can take it (ECT); an INA packet arriving with CE
#: (marked by another switch on the way) gets Ecn.CE in its INA header.
IPV4_ECN_MASK = 0x03
IPV4_ECN_CE = 0x03


class Flag(enum.IntFlag):
    """INA header ``flags``."""

    NONE = 0
    #: Final result, delivered by BIER from the VAT root.
    RESULT = 0x01
    #: A 32-bit SUM wrapped around in at least one element of this packet's
    #: aggregate; the values are not exact.
    OVERFLOW = 0x02
    #: The start of a call: a worker asks the job's root where the call's sequence
    #: numbers begin (``seq`` of the reply). VAT nodes pass it on, never absorb it.
    SYNC = 0x04
    #: The root's answer to a SYNC (with SYNC set too), back to the worker by IPv4.
    REPLY = 0x08
    #: With SYNC: a worker gave up on its call; ``seq`` is the highest sequence
    #: number it sent. The root starts the next call past it (nothing answers).
    ABORT = 0x10
    #: With SYNC | REPLY, from a worker's edge switch: the job was planned anew (a
    #: switch or link failed or came back); the header's ``gen`` is the new plan's
    #: generation. The worker sends its recent packets again, stamped with it.
    REPLAN = 0x20
    #: With SYNC | REPLY, from a worker's edge switch: no switch can aggregate the job
    #: now; its workers reduce among themselves (a ring over TCP).
    ON_HOSTS = 0x40
    #: The packet has no array (the header alone). From a worker: a contribution of
    #: its bit only. From a VAT node: a cell that absorbed no array. From the root's
    #: BIER: a completion (the chunk is complete; its data goes to ``dest`` only).
    NODATA = 0x80


#: A worker's question to its first VAT node, before it sends a chunk's values again
#: (INA version 7): does the node hold its contribution to round ``seq``? A header
#: alone, steered like a contribution (to the worker's parent VAT node), answered by
#: the node that holds the worker's bit (aggregation.p4), or by the node above it that
#: lacks the round's aggregate, with QUERY | REPLY, back by IPv4, the verdict in
#: ``count`` (QueryVerdict). When one contribution of a round is lost, only its
#: sender then sends its values again, not every worker.
QUERY = Flag.SYNC | Flag.NODATA


class QueryVerdict(enum.IntEnum):
    """The ``count`` of a QUERY's answer."""

    #: The node lacks the worker's contribution to that round (or holds another round
    #: there, or another plan's), or the round is complete at the root (its result was
    #: lost on the way: the values sent again make the root send it again; below the
    #: root, a complete round's node asks its parent in turn): send them again.
    SEND = 0
    #: The node holds it, in a round that waits for other contributions: wait.
    HELD = 1


#: Ecn.CE as a plain int, for code that tests the header's ``ecn`` byte in raw bytes
#: (the workers' window).
ECN_CE = int(Ecn.CE)


# --- Data-plane sizes -----------------------------------------------------------

#: Aggregation slots per switch. Each has two copies (cells) of ELEMS_PER_PACKET
#: int32 values (LANES lanes), used by alternate rounds of sequence numbers (see
#: aggregation.p4).
AGG_SLOTS = 1024
#: Jobs a switch can hold state for (VAT nodes and per-job transit counters).
MAX_JOBS = 64
#: Entries of the IPv4 routing table.
IPV4_ROUTES = 4096
#: Ports a switch can have (bounds the BIER port table).
MAX_PORTS = 64
#: Multicast group that reaches every BIER-capable port of a switch (one copy per
#: port; the packet's set is in its BIFT-id).
BIER_MCAST_GROUP = 1
#: The port BMv2 gives the controller's packets (--cpu-port): packet-out arrives on
#: it, packet-in leaves through it.
CPU_PORT = 510
#: EtherType of the controller's link probes (IEEE 802 local experimental).
ETHERTYPE_PROBE = 0x88B6
#: Congestion marks (p4src/include/congestion.p4). A packet leaving a port is marked
#: (IPv4 CE if ECT, Ecn.CE if INA) when BMv2's own egress queue of that port held at
#: least MARK_QDEPTH packets as it joined it (``standard_metadata.enq_qdepth``; the
#: queue forms when the switch's egress falls behind, and holds 64 packets), or when
#: the port's phantom queue, draining at the port's link rate (``port_queues``, from
#: the topology's ``queues``), holds more than its mark threshold in bytes.
MARK_QDEPTH = 16
#: The phantom queue's rate unit: bytes per 2**PHANTOM_RATE_SHIFT microseconds, so
#: the data plane drains ``(elapsed_us * rate) >> PHANTOM_RATE_SHIFT`` bytes with no
#: division (1 Mbit/s = 128 bytes per 1024 us).
PHANTOM_RATE_SHIFT = 10
#: Defaults of the topology's ``queues`` (bytes): the lab's bounded egress buffer per
#: interface (a byte FIFO under the link's rate), and the phantom queue's marking
#: threshold: a shallow buffer as a data-centre switch port has, marking at a quarter
#: of it (DCTCP's K), about 21 and 5 INA frames of 1,414 bytes (26 and 6 of version 5's).
QUEUE_BUFFER = 30000
QUEUE_MARK = 7500
#: BMv2's strict-priority egress queues per port (simple_switch ``--priority-queues``;
#: the highest number is served first): the controller's link probes (packet-out and
#: packet-in) take PROBE_PRIORITY, everything else 0, so a probe does not wait
#: behind a switch's backlog of data toward the same port.
PRIORITY_QUEUES = 2
PROBE_PRIORITY = 1
#: Multicast group of a job on a switch: JOB_GROUP_BASE + its job index. Its
#: replicas are the ports (and, for a root spanning BIER sets, the (port, set)
#: pairs) that lead to the job's workers, so no copy is made only to be pruned.
JOB_GROUP_BASE = 0x100
#: Counter slots reserved per job in the job_stats counter (a power of two).
JOB_STAT_STRIDE = 32
#: INA packets per second the controller lets a host send of each of its jobs by
#: default (a BMv2 meter, in packets, on its job_members entry; the topology
#: file's ``policing`` changes it): above the fastest worker measured (1,600/s,
#: README "Benchmark"), below what a VAT node absorbs from one port while a busy
#: leaf-spine fabric shares this machine's two cores (about 3,000/s: at 4,000/s a
#: one-port flood still cost a link's probes, one run in three).
HOST_RATE = 2000
#: INA packets a host may send back to back above HOST_RATE (the meter's burst):
#: a whole window of a job of 256 slots (16 by default) at once.
HOST_BURST = 256
#: The colour a v1model meter gives a packet over its rate (BMv2: 0 green, 1 yellow, 2 red).
METER_RED = 2


class JobStat(enum.IntEnum):
    """Per-job counters: index ``job_index * JOB_STAT_STRIDE + stat`` of job_stats."""

    ABSORBED = 0  # contribution added to a slot (includes the completing one)
    PASSED = 1  # VAT node here, A-BM & P-BM == 0: forwarded on toward its target
    TRANSIT = 2  # no VAT node here, the job's packet forwarded by IPv4
    EMITTED = 3  # (partial) result sent toward the parent VAT node, resends included
    #: root: final result sent by BIER, resends included; below the root: a kept result
    #: sent again to a worker by BIER
    MULTICAST = 4
    BIER_RECEIVED = 5  # BIER packet of this job entered the switch
    DELIVERED = 6  # BIER copy decapsulated to a worker
    RESENT = 7  # retransmission for a complete slot: its stored result sent again
    DROP_FOREIGN_PBM = 8  # P-BM has bits outside the A-BM (or none, addressed here)
    DROP_DUPLICATE = 9  # contributor already in the slot, which is not complete yet
    DROP_STALE = 10  # a sequence number older than the slot copy's (late duplicate)
    # 11 is free: a round no longer takes its first contribution's element count
    # (a member's frame with a wrong count could hold the round against everyone's).
    DROP_OP_MISMATCH = 12  # op differs from the slot's
    SYNCED = 13  # root: a worker's SYNC answered (a call starts)
    ABORTED = 14  # root: a worker gave up on its call (the next call starts past it)
    DROP_OLD_PLAN = 15  # a VAT node got a packet of another generation of the job's plan
    TOLD = 16  # edge: a worker told of a new plan (REPLAN) or of reduction on hosts
    #: root: a contribution past the job's window (more than 2 x slots + 1 past the highest
    #: sequence number completed or given up), or before any call of this plan
    DROP_AHEAD = 17
    #: root: an ABORT past the job's window (as DROP_AHEAD), or before any call of this plan
    DROP_ABORT_AHEAD = 18
    DROP_WIDTH_MISMATCH = 19  # element width differs from the slot's
    #: data to a NODATA round, or NODATA to a round of data (retransmissions too): a
    #: round takes the kind of its first contribution, so no packet has to grow an array
    DROP_KIND_MISMATCH = 20
    #: edge: a worker's own values (OP_COPY) sent by BIER to the job's other workers
    OWNED = 21
    QUERIED = 22  # a worker's QUERY answered (SEND or HELD) by the node holding its bit
    #: of those, answered HELD: the node holds the worker's values (a copy not sent)
    QUERY_HELD = 23
    #: a worker's QUERY for a round complete here, below the root: passed to the parent
    #: for this node's bits (the parent answers the worker)
    QUERY_UP = 24
    #: below the root: a result passing down to this node's workers, kept in its round's
    #: cell, so that a worker that lost it gets it again from here (RESENT, MULTICAST)
    KEPT = 25


class SwitchStat(enum.IntEnum):
    """Switch-wide counters (switch_stats), mostly drops by reason."""

    DROP_PARSER_ERROR = 0  # truncated or malformed headers
    DROP_BAD_VERSION = 1  # INA version unknown
    DROP_BAD_COUNT = 2  # element count 0 or above ELEMS_PER_PACKET
    DROP_BAD_OP = 3  # op not SUM, MIN or MAX
    DROP_BAD_PBM = 4  # P-BM empty, set >= BIER_SETS, or RESULT flag on aggregation
    DROP_UNKNOWN_JOB = 5  # INA packet addressed to this switch, no VAT node of its job here
    DROP_FORGED_PBM = 6  # from a host port, P-BM not exactly its bit, or a REPLY not from a root
    DROP_NOT_MEMBER = 7  # from a host port, for a job that host is no worker of
    DROP_NO_ROUTE = 8
    DROP_TTL = 9
    DROP_BIER_MALFORMED = 10  # BIER nibble, version, BSL or BIFT-id (set) not ours
    DROP_BIER_TTL = 11
    DROP_BIER_FROM_HOST = 12  # hosts are BFERs behind this switch; they do not inject BIER
    DROP_NOT_SUPPORTED = 13  # neither IPv4 nor BIER (ARP, IPv6...), or IPv4 to this switch
    DROP_IP_CHECKSUM = 14  # IPv4 header checksum wrong
    BIER_COPY_PRUNED = 15  # replica whose masked BitString was empty (normal, RFC 8279)
    BIER_COPY_SENT = 16  # replica sent to a neighbour BFR
    BIER_COPY_DELIVERED = 17  # replica decapsulated to a host
    PROBE_SENT = 18  # a controller's link probe sent out of a port (packet-out)
    PROBE_RECEIVED = 19  # a link probe from a neighbour passed to the controller (packet-in)
    DROP_UNDECLARED_PORT = 20  # from a port the controller declared neither a host's nor a switch's
    DROP_SPOOFED_SOURCE = 21  # an INA packet from a host port whose IPv4 source is not the host's
    DROP_POLICED = 22  # a host's INA packet of a job over the rate the controller set for it
    DROP_BAD_WIDTH = 23  # INA width neither 32 nor 16
    DROP_BAD_DEST = 24  # INA dest neither 0 nor a BFR-id (1..MAX_BFR_ID)
    #: A BIER copy that left without its array (a completion: NODATA, lengths
    #: shortened), its BitString not holding the packet's dest (egress)
    COMPLETION_SENT = 25
    #: a host's own values (OP_COPY) refused: not a worker of the job in this plan,
    #: not from its own address and bit, or not a whole packet of 32-bit elements
    DROP_BAD_OWNED = 26


SWITCH_STATS = len(SwitchStat)
#: "No event" in the data plane's per-packet event fields (never a counter index).
JOB_STAT_NONE = 0xFF
SWITCH_STAT_NONE = 0xFF
assert len(JobStat) <= JOB_STAT_STRIDE
assert JOB_STAT_STRIDE & (JOB_STAT_STRIDE - 1) == 0
assert AGG_SLOTS & (AGG_SLOTS - 1) == 0
assert BIER_SETS & (BIER_SETS - 1) == 0 and BIER_SETS <= 256
assert ELEMS_PER_PACKET % ELEMS_PER_LANE == 0, "a packet holds whole lanes"

#: Highest BFR-id a host can have.
MAX_BFR_ID = BITSTRING_BITS * BIER_SETS
#: Bytes of a BitString (and of the INA P-BM).
BITSTRING_BYTES = BITSTRING_BITS // 8
#: Bytes of the INA header (see ina.protocol.codec.InaHeader).
INA_HEADER_BYTES = 16 + BITSTRING_BYTES
#: Bytes of a packet's array (ELEMS_PER_PACKET int32 or ELEMS16_PER_PACKET int16 values).
ARRAY_BYTES = 4 * ELEMS_PER_PACKET
assert ARRAY_BYTES == 2 * ELEMS16_PER_PACKET == LANES * LANE_BITS // 8
#: Bytes of an INA UDP payload: header plus the array (a NODATA one: the header alone).
INA_PAYLOAD_BYTES = INA_HEADER_BYTES + ARRAY_BYTES
#: Bytes of the RFC 8296 header with its BitString.
BIER_HEADER_BYTES = 12 + BITSTRING_BYTES
#: An Ethernet frame's payload at most (the links' MTU): an INA data packet inside BIER,
#: with its IPv4 and UDP headers, fits it.
ETHERNET_MTU = 1500
assert BIER_HEADER_BYTES + IPV4_UDP_BYTES + INA_PAYLOAD_BYTES <= ETHERNET_MTU

#: The INA header's fields in wire order, (name, bits), most significant bit first
#: (ina.protocol.codec.InaHeader packs them; the Wireshark dissector's field table,
#: tools/wireshark/ina.lua, is written from this by ina.protocol.luagen).
INA_HEADER_LAYOUT = (("version", 4), ("op", 4), ("flags", 8), ("job_id", 16), ("seq", 32),
                     ("count", 16), ("si", 8), ("gen", 8), ("dest", 16), ("width", 8),
                     ("ecn", 8), ("pbm", BITSTRING_BITS))
#: The RFC 8296 header's fields in wire order, (name, bits) (ina.protocol.frames.Bier).
BIER_HEADER_LAYOUT = (("bift_id", 20), ("tc", 3), ("s", 1), ("ttl", 8), ("nibble", 4),
                      ("version", 4), ("bsl", 4), ("entropy", 20), ("oam", 2), ("rsv", 2),
                      ("dscp", 6), ("proto", 6), ("bfir_id", 16), ("bitstring", BITSTRING_BITS))
assert sum(bits for _, bits in INA_HEADER_LAYOUT) == 8 * INA_HEADER_BYTES
assert Ecn.CE & (Ecn.CE - 1) == 0, "a mark is one bit (the data plane slices it)"
assert PROBE_PRIORITY < PRIORITY_QUEUES
assert sum(bits for _, bits in BIER_HEADER_LAYOUT) == 8 * BIER_HEADER_BYTES
