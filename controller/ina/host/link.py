"""A host's link to the embedded network (ina.model.embedded), as a worker's transport.

On a lab host a worker's UDP socket sends its INA payloads and the kernel wraps
them in IPv4 and Ethernet for the host's link. Here the worker does what that
kernel would: ``LinkTransport`` builds the host's frames itself (the host's MAC and
address from the topology, its edge switch's MAC, UDP checksum 0 as the worker's
socket sends them) and sends them to the UDP port where the embedded network has
the host's link; of the frames that come back, it keeps what the host's socket would
receive (IPv4 to the host's address, UDP to the INA port, a whole INA packet).
``Endpoints`` says where each host's link ends (what ``inanet --endpoints`` writes).

A transport holds its host's link while it is open: it claims the link over a TCP
connection to the network's claims port, which its kernel closes when its process
ends; a link another process holds is refused (LabError), never shared (see
ina.model.embedded). A child forked by the process closes its copy of that
connection (ina.host.leases), so that a child does not hold the link after its
parent ended.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from ina.errors import LabError, UsageError
from ina.host import leases
from ina.host.config import WorkerConfig
from ina.protocol.constants import ETHERTYPE_IPV4, INA_HEADER_BYTES, INA_UDP_PORT, IP_PROTO_UDP
from ina.protocol.frames import ina_frame, ip_int
from ina.spec.topology import Topology

LOG = logging.getLogger(__name__)
#: Offsets in a frame from the embedded network: IPv4 protocol and destination, UDP
#: destination port, and where the INA payload begins (a host receives plain IPv4:
#: its edge switch removed BIER).
_PROTO, _DST_IP, _DPORT, _PAYLOAD = 14 + 9, 14 + 16, 14 + 20 + 2, 14 + 20 + 8
#: Seconds to wait for the network's answer to a claim.
CLAIM_TIMEOUT = 10.0


@dataclass(frozen=True)
class Endpoints:
    """Where each host's link ends: a UDP port per host on ``address``; where the
    network's job service listens (a Unix socket), if it offers one; and the TCP
    port on ``address`` where a process claims a host's link."""

    address: str
    ports: dict[str, int]
    jobs: str | None = None
    claims: int | None = None

    def of(self, host: str) -> tuple[str, int]:
        if host not in self.ports:
            raise LabError(f"the embedded network has no host {host} "
                           f"(its hosts: {', '.join(sorted(self.ports))})")
        return self.address, self.ports[host]

    def to_json(self) -> str:
        return json.dumps({"address": self.address, "ports": self.ports,
                           **({"jobs": self.jobs} if self.jobs else {}),
                           **({"claims": self.claims} if self.claims else {})},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Endpoints:
        data = json.loads(text)
        jobs, claims = data.get("jobs"), data.get("claims")
        return cls(str(data["address"]), {str(h): int(p) for h, p in data["ports"].items()},
                   None if jobs is None else str(jobs), None if claims is None else int(claims))

    @classmethod
    def load(cls, path: str | Path) -> Endpoints:
        """The endpoints an embedded network wrote to ``path`` (inanet --endpoints),
        or UsageError."""
        try:
            return cls.from_json(Path(path).read_text())
        except (OSError, ValueError, KeyError) as exc:
            raise UsageError(f"{path} holds no embedded network's endpoints: {exc}") from exc



class LinkTransport:
    """``host``'s link on the embedded network of ``endpoints``, claimed for this
    process: a ``Transport`` (ina.host.transport) for ``ina.host.worker.Worker``."""

    def __init__(self, topology: Topology, host: str, endpoints: Endpoints, target: str):
        link = endpoints.of(host)
        if endpoints.claims is None:
            raise LabError("the embedded network's endpoints name no claims port: written "
                           "by an older inanet? start it again")
        spec = topology.hosts[host]
        edge, _ = topology.host_attachment(host)
        self.target = target
        self.mac, self.ip = spec.mac, spec.ip
        self.edge_mac = topology.switches[edge].mac
        self._ip = ip_int(spec.ip).to_bytes(4, "big")
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.sock.bind((link[0], 0))
        self.sock.connect(link)
        self.timeout: float | None = None
        try:
            self._claim = _claim(host, link[0], endpoints.claims, self.sock.getsockname()[1])
        except BaseException:
            self.sock.close()
            raise
        leases.hold(self)

    def send(self, payload: bytes, dst: str | None = None) -> None:
        frame = ina_frame(self.mac, self.edge_mac, self.ip, dst or self.target, payload)
        try:
            self.sock.send(frame)
        except (BlockingIOError, TimeoutError, ConnectionRefusedError) as exc:
            # A full buffer, or the network not (yet, or no longer) there: as a
            # frame lost on the link; retransmission or the call's timeout follows.
            LOG.debug("frame not sent on %s's link: %s", self.ip, exc)

    def recv(self, timeout: float) -> bytes | None:
        """The next INA payload for this host, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            if left != self.timeout:  # a syscall only when it changes
                self.sock.settimeout(left)
                self.timeout = left
            try:
                frame = self.sock.recv(65535)
            except (TimeoutError, BlockingIOError, ConnectionRefusedError):
                return None
            if self._for_me(frame):
                return frame[_PAYLOAD:]

    def _for_me(self, frame: bytes) -> bool:
        return (len(frame) >= _PAYLOAD + INA_HEADER_BYTES
                and int.from_bytes(frame[12:14], "big") == ETHERTYPE_IPV4
                and frame[_PROTO] == IP_PROTO_UDP and frame[_DST_IP:_DST_IP + 4] == self._ip
                and int.from_bytes(frame[_DPORT:_DPORT + 2], "big") == INA_UDP_PORT)

    def close(self) -> None:
        self.sock.close()
        self._claim.close()

    def __enter__(self) -> LinkTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _claim(host: str, address: str, port: int, udp_port: int) -> socket.socket:
    """A connection to the network's claims port holding ``host``'s link for the UDP
    port ``udp_port``; LabError if the network refuses (another process holds it)."""
    try:
        sock = socket.create_connection((address, port), timeout=CLAIM_TIMEOUT)
        sock.sendall(json.dumps({"claim": host, "port": udp_port}).encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            piece = sock.recv(4096)
            if not piece:
                raise OSError("the network closed the connection")
            answer += piece
    except OSError as exc:
        raise LabError(f"could not claim {host}'s link on the embedded network at "
                       f"{address}:{port}: {exc}") from exc
    reply = json.loads(answer)
    if "error" in reply:
        sock.close()
        raise LabError(f"{host}'s link on the embedded network: {reply['error']}")
    sock.settimeout(None)
    return sock


def on_loopback(config: WorkerConfig) -> WorkerConfig:
    """``config`` for a worker on the embedded network: the ring on hosts (a job no
    switch takes) joins its peers on this machine's loopback, not at their lab
    addresses."""
    return dataclasses.replace(config, addresses=("127.0.0.1",) * len(config.addresses))
