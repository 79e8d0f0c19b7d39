"""congestion.p4: a packet leaving a port is counted, fills the port's phantom
queue (port_queues), and is marked if it is congested (mark_ipv4, mark_ina)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ina.control import p4names as n
from ina.model.pipeline.tables import Control
from ina.protocol.constants import (
    BIER_HEADER_BYTES,
    ETHERNET_BYTES,
    IPV4_ECN_CE,
    IPV4_ECN_MASK,
    MARK_QDEPTH,
    PHANTOM_RATE_SHIFT,
    Ecn,
)
from ina.protocol.frames import Frame, parse_frame

REG_PHANTOM = "phantom"  # per port: (bytes held, time in us) of its phantom queue
#: BMv2's egress_global_timestamp: microseconds in 48 bits.
TIME_MASK = (1 << 48) - 1


def monotonic_us() -> int:
    return time.monotonic_ns() // 1000


@dataclass
class Congestion(Control):
    """``queue_depth(port)``: what BMv2's enq_qdepth would say for a packet joining
    the port's egress queue now; ``clock_us``: its egress_global_timestamp."""

    queue_depth: Callable[[int], int]
    clock_us: Callable[[], int]

    def apply(self, port: int, out: Frame | bytes, nbytes: int) -> bytes:
        """A packet leaving ``port`` (any but the CPU port) is counted,
        fills the port's phantom queue (if port_queues has one for it), and is marked
        if BMv2's egress queue was deep (``queue_depth``) or the phantom queue holds
        more than its threshold: CE in an ECN-capable IPv4 header, Ecn.CE in an INA
        header. ``nbytes``: the length it entered the switch with (what BMv2's
        counters count, and its packet_length); the frame's bytes as it leaves."""
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
        queue = self.exact(n.PORT_QUEUES, egress_port=port)
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
