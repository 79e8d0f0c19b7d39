"""The reference model's network: ``ModelNetwork`` wires the model's switches and
hosts as the topology says and moves frames until the network is quiet, through
links that may lose, duplicate or delay them (``Impairment``); ``ModelTransport``
is a host's socket on it. The controller reaches each switch's CPU port as over
P4Runtime: ``packet_out`` sends a frame out of a port, ``packet_ins`` drains what
a switch passed up.

Congestion, which the model has no queues to form: ``queue_depth[(switch, port)]``
is what BMv2's egress queue of that port holds as a packet joins it (a test sets
it; 0 by default), and ``clock_us`` the switches' clock in microseconds, which
drains their phantom queues (the monotonic clock by default; a test may give its
own). With no topology ``queues`` and no depth set, nothing is marked.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ina.control.memory_switch import MemorySwitch
from ina.model.switch import ModelSwitch, packet_out_frame, split_packet_in
from ina.protocol.constants import CPU_PORT, ETHERNET_BYTES, IPV4_UDP_BYTES
from ina.protocol.frames import ina_frame, parse_frame
from ina.spec.topology import Topology


@dataclass
class Impairment:
    """What links do to frames: lose, duplicate or delay (reorder) each with a
    probability, independently per frame and link, from a seeded generator."""

    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def copies(self) -> tuple[int, bool]:
        """(copies delivered, whether they are held back for later)."""
        if self.rng.random() < self.loss:
            return 0, False
        n = 2 if self.rng.random() < self.duplicate else 1
        return n, self.rng.random() < self.reorder


@dataclass
class _Hop:
    node: str  # receiving node
    port: int | None  # its port, None at a host (CPU_PORT: from the controller)
    frame: bytes
    sender: str
    impaired: bool = False  # already passed through the impairment


class ModelNetwork:
    """Switches and hosts of a topology, exchanging frames; links may be impaired."""

    def __init__(self, topology: Topology, stores: dict[str, MemorySwitch],
                 impairment: Impairment | None = None):
        self.topology = topology
        #: BMv2's egress queue depth (packets) per (switch, port), as a test sets it.
        self.queue_depth: dict[tuple[str, int], int] = {}
        #: The switches' clock (microseconds): a test may replace it.
        self.clock_us: Callable[[], int] = lambda: time.monotonic_ns() // 1000
        self.switches = {name: ModelSwitch(name, stores[name], queue_depth=self._depth_of(name),
                                           clock_us=lambda: self.clock_us())
                         for name in topology.switches}
        self.inbox: dict[str, deque[bytes]] = {h: deque() for h in topology.hosts}
        # What each switch sent to its CPU port (packet_in header and frame).
        self.to_cpu: dict[str, deque[bytes]] = {s: deque() for s in topology.switches}
        self._ports = {s: topology.ports(s) for s in topology.switches}
        self.bytes_on_link: dict[tuple[str, str], int] = {}
        self.impairment = impairment
        self.held: list[_Hop] = []  # frames delayed by the impairment
        self.lock = threading.Condition()  # for workers in threads (ModelTransport)

    def _depth_of(self, switch: str) -> Callable[[int], int]:
        return lambda port: self.queue_depth.get((switch, port), 0)

    def send(self, host: str, raw: bytes) -> None:
        """A host puts a frame on its link; everything it causes happens now."""
        switch, port = self.topology.host_attachment(host)
        self._run([_Hop(switch, port, raw, host)])

    def inject(self, switch: str, port: int, raw: bytes) -> None:
        """A frame enters ``switch`` on ``port``, as if the neighbour there sent it."""
        self._run([_Hop(switch, port, raw, self.topology.ports(switch)[port].node)])

    def packet_out(self, switch: str, port: int, frame: bytes) -> None:
        """The controller's PacketOut: ``frame`` enters ``switch`` on its CPU port, to
        leave by ``port`` (no link is crossed, so no impairment)."""
        self._run([_Hop(switch, CPU_PORT, packet_out_frame(port, frame), "controller",
                        impaired=True)])

    def packet_ins(self, switch: str) -> list[tuple[int, bytes]]:
        """(ingress port, frame) of each PacketIn ``switch`` sent the controller since
        the last call, in order."""
        queue, self.to_cpu[switch] = self.to_cpu[switch], deque()
        return [split_packet_in(raw) for raw in queue]

    def release_held(self) -> bool:
        """Deliver the frames the impairment delayed; True if there were any."""
        held, self.held = self.held, []
        self._run(held)
        return bool(held)

    def _run(self, hops: list[_Hop]) -> None:
        queue = deque(hops)
        while queue:
            hop = queue.popleft()
            if self.impairment is not None and not hop.impaired:
                n, later = self.impairment.copies()
                hop.impaired = True
                if later:
                    self.held += [hop] * n
                    continue
                if n == 0:
                    continue
                queue.extend([hop] * (n - 1))
            if hop.port is None:
                self._carried(hop.sender, hop.node, len(hop.frame))
                self.inbox[hop.node].append(hop.frame)
                continue
            if hop.port != CPU_PORT:
                self._carried(hop.sender, hop.node, len(hop.frame))
            ports = self._ports[hop.node]
            for out_port, out in self.switches[hop.node].process(hop.port, hop.frame):
                nb = ports.get(out_port)
                if nb is not None:
                    queue.append(_Hop(nb.node, nb.remote_port, out, hop.node))
                elif out_port == CPU_PORT:
                    self.to_cpu[hop.node].append(out)
                # else: a port with no link (a packet-out may name one): lost

    def _carried(self, a: str, b: str, nbytes: int) -> None:
        self.bytes_on_link[(a, b)] = self.bytes_on_link.get((a, b), 0) + nbytes

    def receive(self, host: str) -> bytes | None:
        inbox = self.inbox[host]
        return inbox.popleft() if inbox else None

    def host_send_payload(self, host: str, dst_ip: str, payload: bytes) -> None:
        """What a host's UDP socket does: wrap an INA payload toward ``dst_ip``."""
        h = self.topology.hosts[host]
        switch, _ = self.topology.host_attachment(host)
        self.send(host, ina_frame(h.mac, self.topology.switches[switch].mac, h.ip, dst_ip,
                                  payload))

    def received_datagrams(self, host: str, limit: int | None = None
                           ) -> list[tuple[str, bytes]]:
        """(source address, INA payload) of what arrived for the host, drained from
        its inbox, as its UDP socket would receive them."""
        out: list[tuple[str, bytes]] = []
        while (limit is None or len(out) < limit) and (raw := self.receive(host)) is not None:
            frame = parse_frame(raw)
            if (frame.ipv4 is not None and frame.ipv4.dst == self.topology.hosts[host].ip
                    and frame.ina is not None and frame.error is None):
                out.append((frame.ipv4.src, frame.pack()[ETHERNET_BYTES + IPV4_UDP_BYTES:]))
        return out

    def received_payloads(self, host: str, limit: int | None = None) -> list[bytes]:
        """INA payloads addressed to the host, drained from its inbox."""
        return [payload for _, payload in self.received_datagrams(host, limit)]

class ModelTransport:
    """A worker's socket on the model network, for ``ina.host.worker.Worker`` in a thread:
    several workers share one network under its lock."""

    def __init__(self, net: ModelNetwork, host: str, target: str):
        self.net, self.host, self.target = net, host, target

    def send(self, payload: bytes, dst: str | None = None) -> None:
        with self.net.lock:
            self.net.host_send_payload(self.host, dst or self.target, payload)
            self.net.lock.notify_all()

    def recv(self, timeout: float) -> bytes | None:
        with self.net.lock:
            self.net.lock.wait_for(lambda: bool(self.net.inbox[self.host]), timeout)
            payloads = self.net.received_payloads(self.host, limit=1)
            return payloads[0] if payloads else None
