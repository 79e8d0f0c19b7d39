"""One switch of the reference model: the data plane of p4src/ in plain Python.

``ModelSwitch`` runs the P4 program's ingress, replication and egress on bytes,
with the tables the controller wrote into its ``MemorySwitch`` and with the same
counters and register state. It is a thin pipeline: each P4 control of
p4src/include is a class of the same name in the module of the same stem in
``ina.model.pipeline`` (aggregation.p4's Aggregation in pipeline/aggregation.py),
applied in the order ingress.p4 and egress.p4 apply them; keep them in step
(tests/test_model_mirror.py checks the files and names).

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

from collections.abc import Callable

from ina.control import p4names as n
from ina.control.memory_switch import MemorySwitch
from ina.model.pipeline.cells import (
    EMPTY_CELL,
    REG_CELLS,
    REG_LANES,
    REG_PROGRESS,
    REG_SETS,
    CellState,
)
from ina.model.pipeline.congestion import REG_PHANTOM, Congestion, monotonic_us
from ina.model.pipeline.egress import InaEgress
from ina.model.pipeline.ingress import InaIngress
from ina.model.pipeline.metadata import Meta
from ina.protocol.constants import BIER_BIFT_ID, CPU_PORT, ETHERNET_BYTES, MAX_PORTS, SwitchStat
from ina.protocol.frames import Frame, parse_frame

__all__ = [
    "CONTROLLER_HEADER_BYTES", "DROP_PORT", "EMPTY_CELL", "REG_CELLS", "REG_LANES",
    "REG_PHANTOM", "REG_PROGRESS", "REG_SETS", "CellState", "ModelSwitch",
    "packet_out_frame", "split_packet_in",
]

#: headers.p4's packet_out_h and packet_in_h: a 9-bit port, 7 bits of padding.
CONTROLLER_HEADER_BYTES = 2
#: simple_switch's drop port: a packet sent there is dropped (not counted).
DROP_PORT = 511


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
        self.clock_us: Callable[[], int] = clock_us or monotonic_us
        self.ingress = InaIngress(store)
        self.egress = InaEgress(store, Congestion(store, self.queue_depth, self.clock_us))

    # --- pipeline (ina.p4: parser, ingress, replication, egress, deparser) --------

    def process(self, in_port: int, raw: bytes) -> list[tuple[int, bytes]]:
        """One packet through ingress, replication and egress: the frames sent, each
        with its egress port (CPU_PORT: a packet-in, its packet_in header in front)."""
        if in_port == CPU_PORT and len(raw) >= CONTROLLER_HEADER_BYTES:
            return [(port, self.egress.leave(port, out, len(raw)))
                    for port, out in self._packet_out(raw)]
        if in_port < MAX_PORTS:
            self.store.count(n.PORT_RECEIVED, in_port, len(raw))
        if len(raw) < ETHERNET_BYTES:
            # BMv2's parser stops at the Ethernet header: a parser error, counted.
            self.store.count(n.INGRESS_SWITCH_STATS, SwitchStat.DROP_PARSER_ERROR, len(raw))
            return []
        frame = parse_frame(raw)
        meta = Meta()
        self.ingress.apply(frame, meta, in_port, len(raw))
        if meta.drop is not None or meta.consumed:
            return []
        if meta.mcast_grp:
            group = self.store.groups.get(meta.mcast_grp)
            out = []
            for port, rid in group.replicas if group else ():
                copy = frame.copy()
                if self.egress.apply(copy, meta, port, rid, len(raw)):
                    out.append((port, self.egress.leave(port, copy, len(raw))))
            return out
        if meta.packet_in:
            self.store.count(n.INGRESS_SWITCH_STATS, SwitchStat.PROBE_RECEIVED, len(raw))
            return [(CPU_PORT, _controller_header(in_port, raw))]
        if meta.egress_port is None:
            return []
        return [(meta.egress_port, self.egress.leave(meta.egress_port, frame, len(raw)))]

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
            if not self.egress.apply(frame, Meta(), port, 0, len(raw)):
                return []
            if frame.bier is not None:
                frame.bier.bift_id = bift_id
        return [(port, frame)]
