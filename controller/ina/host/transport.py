"""How a worker's packets reach the network: a ``Transport`` sends INA payloads to
the worker's edge switch (or another address) and receives what comes back.

``UdpTransport`` is a UDP socket on the INA port, on a lab host. Others: the
reference model's (ina.model.network.ModelTransport) and a host's link to the
embedded network (ina.host.link.LinkTransport).
"""

from __future__ import annotations

import errno
import logging
import socket
from typing import Protocol

from ina.protocol.constants import INA_UDP_PORT

LOG = logging.getLogger(__name__)
#: The IPv4 ECN field's ECT(0) codepoint (the low two bits of the TOS byte).
ECT0 = 0x02


class Transport(Protocol):
    def send(self, payload: bytes, dst: str | None = None) -> None:
        """Send to ``dst`` (default: the worker's edge switch)."""

    def recv(self, timeout: float) -> bytes | None:
        """One received INA payload, or None after ``timeout`` seconds."""


def is_local_address(address: str) -> bool:
    """Whether this machine (its network namespace) has an interface with this IPv4
    address: a UDP socket can be bound to it (nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return False
            raise
    return True


class UdpTransport:
    """A UDP socket on INA_UDP_PORT: sends to the worker's edge switch, receives results."""

    def __init__(self, target: str, bind: str = "0.0.0.0", port: int = INA_UDP_PORT):
        self.target = target
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        # A window of packets waiting in a slow link's queue still counts against
        # the socket's send buffer: room for several windows.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        # ECN-capable (ECT(0), RFC 3168): a switch on the way that is not an INA node
        # marks congestion as CE in the IPv4 header, which the next INA switch folds
        # into the INA header's mark (ina.host.congestion reads that).
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ECT0)
        self.sock.bind((bind, port))
        self.timeout: float | None = None

    def send(self, payload: bytes, dst: str | None = None) -> None:
        try:
            self.sock.sendto(payload, (dst or self.target, self.port))
        except (BlockingIOError, TimeoutError) as exc:
            # The send buffer is full (the socket is non-blocking or has a timeout
            # for recv): as good as lost on the wire; retransmission recovers it.
            LOG.debug("send buffer full, packet dropped: %s", exc)
        except OSError as exc:
            if exc.errno != errno.ENOBUFS:
                raise
            # The kernel dropped it (a full queue, a lossy link): likewise.
            LOG.debug("send dropped by the kernel: %s", exc)

    def recv(self, timeout: float) -> bytes | None:
        timeout = max(timeout, 0.0)
        if timeout != self.timeout:  # a syscall only when it changes
            self.sock.settimeout(timeout)
            self.timeout = timeout
        try:
            data, _ = self.sock.recvfrom(65535)
        except (TimeoutError, BlockingIOError):
            return None
        return data

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> UdpTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
