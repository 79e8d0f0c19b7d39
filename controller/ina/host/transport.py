"""How a worker's packets reach the network: a ``Transport`` sends INA payloads to
the worker's edge switch (or another address) and receives what comes back.

``UdpTransport`` is a UDP socket on the INA port, on a lab host. Others: the
reference model's (ina.model.network.ModelTransport) and a host's link to the
embedded network (ina.host.link.LinkTransport).

``SharedTransport`` lets the workers of several jobs in one process share one such
transport (a host's INA port can be bound once, and the embedded network answers the
one address that last sent on a host's link): each job gets a view
(``SharedTransport.view``) that receives only its own packets, by the INA header's
job id.
"""

from __future__ import annotations

import errno
import logging
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ina.errors import UsageError
from ina.host import mmsg
from ina.protocol.constants import INA_UDP_PORT

LOG = logging.getLogger(__name__)
#: The IPv4 ECN field's ECT(0) codepoint (the low two bits of the TOS byte).
ECT0 = 0x02


class Transport(Protocol):
    def send(self, payload: bytes, dst: str | None = None) -> None:
        """Send to ``dst`` (default: the worker's edge switch)."""

    def recv(self, timeout: float) -> bytes | None:
        """One received INA payload, or None after ``timeout`` seconds."""


@runtime_checkable
class BatchTransport(Transport, Protocol):
    """A transport that also sends and receives many datagrams a call (a worker's
    window does: ina.host.call)."""

    def send_many(self, payloads: Sequence[bytes], dst: str | None = None) -> None:
        """Send each of ``payloads``, in order, as ``send`` would."""

    def recv_many(self, timeout: float) -> list[bytes]:
        """The received INA payloads that are queued (at least one, waiting up to
        ``timeout`` seconds for it; none after that), in order of arrival."""


class OneByOne:
    """Any transport as a ``BatchTransport``: one ``send`` per payload, and one
    ``recv`` per ``recv_many`` (a list of one payload, or none), so that it sees the
    very calls it saw before batches."""

    def __init__(self, transport: Transport):
        self.transport = transport

    def send(self, payload: bytes, dst: str | None = None) -> None:
        self.transport.send(payload, dst)

    def recv(self, timeout: float) -> bytes | None:
        return self.transport.recv(timeout)

    def send_many(self, payloads: Sequence[bytes], dst: str | None = None) -> None:
        for payload in payloads:
            self.transport.send(payload, dst)

    def recv_many(self, timeout: float) -> list[bytes]:
        payload = self.transport.recv(timeout)
        return [] if payload is None else [payload]


def batched(transport: Transport) -> BatchTransport:
    """``transport`` if it sends and receives in batches, else ``OneByOne`` of it."""
    return transport if isinstance(transport, BatchTransport) else OneByOne(transport)


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
    """A UDP socket on INA_UDP_PORT: sends to the worker's edge switch, receives results.

    A ``BatchTransport``: on Linux, ``send_many`` and ``recv_many`` take a system call
    per batch (sendmmsg, recvmmsg: ina.host.mmsg); elsewhere one per datagram."""

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
        self.batch = mmsg.Datagrams(self.sock) if mmsg.available() else None
        # The batch's buffers are one per transport: one thread at a time uses them
        # (the jobs of a SharedTransport send from threads of their own).
        self._batch_lock = threading.Lock()
        self._poll = select.poll()
        self._poll.register(self.sock, select.POLLIN)

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

    def send_many(self, payloads: Sequence[bytes], dst: str | None = None) -> None:
        if self.batch is None:
            for payload in payloads:
                self.send(payload, dst)
            return
        # A datagram the kernel refuses on a full queue is dropped, as ``send`` drops
        # it (mmsg.DROPPED); retransmission recovers it.
        with self._batch_lock:
            self.batch.send(payloads, (dst or self.target, self.port))

    def recv_many(self, timeout: float) -> list[bytes]:
        batch = self.batch
        if batch is None:
            payload = self.recv(timeout)
            return [] if payload is None else [payload]
        # Waits as ``recv``'s socket timeout does: poll(2), in whole milliseconds up;
        # at once if something is queued (the window drained the socket just before).
        if timeout > 0 and not self._poll.poll(timeout * 1000.0):
            return []
        with self._batch_lock:
            return batch.payloads(batch.receive())

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> UdpTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Where the job id lies in an INA payload (the header's bytes 2 and 3).
_JOB_ID = slice(2, 4)


def _owner(payload: bytes) -> int:
    """The job a received payload is of (-1: too short to say)."""
    return int.from_bytes(payload[_JOB_ID], "big") if len(payload) >= 4 else -1


class RawTransport(Transport, Protocol):
    def close(self) -> None: ...


class SharedTransport:
    """One transport for the workers of several jobs in one process (the ranks of a
    torch program are workers of every process group they belong to, each group a
    job): ``view(job_id)`` is a ``Transport`` that sends through the shared one and
    receives only the packets of ``job_id``.

    No thread of its own: a view whose queue is empty while no other view reads
    becomes the reader and hands each packet of another job to that job's queue
    (waking its receiver); one job alone reads the socket directly, as it would
    without sharing. Packets of a job without a view are dropped and counted
    (``strays``), as a host's socket would drop them."""

    def __init__(self, raw: RawTransport):
        self.raw = raw
        self._batched = batched(raw)
        self._cond = threading.Condition()
        self._queues: dict[int, deque[bytes]] = {}
        self._reading = False
        self.strays = 0

    def view(self, job_id: int) -> JobView:
        with self._cond:
            if job_id in self._queues:
                raise UsageError(f"job {job_id} has a view of this transport already")
            self._queues[job_id] = deque()
        return JobView(self, job_id)

    def drop(self, job_id: int) -> None:
        """No more packets for ``job_id`` (its view closed)."""
        with self._cond:
            self._queues.pop(job_id, None)
            self._cond.notify_all()

    @property
    def jobs(self) -> list[int]:
        with self._cond:
            return sorted(self._queues)

    def recv_for(self, job_id: int, timeout: float) -> bytes | None:
        """``job_id``'s next packet (``recv_many_for``, one)."""
        got = self.recv_many_for(job_id, timeout, one=True)
        return got[0] if got else None

    def recv_many_for(self, job_id: int, timeout: float, one: bool = False) -> list[bytes]:
        """``job_id``'s queued packets (``one``: the first), else what the socket
        brings for it within ``timeout`` (as the reader), else none."""
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._cond:
            while True:
                queue = self._queues.get(job_id)
                if queue is None:
                    return []  # the view is closed
                if queue:
                    if one:
                        return [queue.popleft()]
                    got = list(queue)
                    queue.clear()
                    return got
                if not self._reading:
                    self._reading = True
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._cond.wait(left)
        try:
            return self._read(job_id, deadline, one)
        finally:
            with self._cond:
                self._reading = False
                self._cond.notify_all()  # another view may read now

    def _read(self, job_id: int, deadline: float, one: bool) -> list[bytes]:
        """As the reader: packets from the socket (a batch at a time, one if ``one``)
        until some are ``job_id``'s, handing the others' to their queues; none at
        ``deadline``."""
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            if one:
                payload = self.raw.recv(left)
                batch = [] if payload is None else [payload]
            else:
                batch = self._batched.recv_many(left)
            if not batch:
                return []
            owners = [_owner(payload) for payload in batch]
            mine = [p for p, owner in zip(batch, owners, strict=True) if owner == job_id]
            if len(mine) < len(batch):
                with self._cond:
                    for payload, owner in zip(batch, owners, strict=True):
                        if owner == job_id:
                            continue
                        queue = self._queues.get(owner)
                        if queue is None:
                            self.strays += 1
                        else:
                            queue.append(payload)
                    self._cond.notify_all()
            if mine:
                return mine
            if time.monotonic() >= deadline:
                return []

    def close(self) -> None:
        self.raw.close()


class JobView:
    """One job's side of a ``SharedTransport``: a ``BatchTransport`` that sends and
    receives in batches if the shared transport does (the job's packets of one
    batch, or all that wait in its queue)."""

    def __init__(self, shared: SharedTransport, job_id: int):
        self.shared = shared
        self.job_id = job_id
        self._raw = batched(shared.raw)

    def send(self, payload: bytes, dst: str | None = None) -> None:
        self.shared.raw.send(payload, dst)

    def recv(self, timeout: float) -> bytes | None:
        return self.shared.recv_for(self.job_id, timeout)

    def send_many(self, payloads: Sequence[bytes], dst: str | None = None) -> None:
        self._raw.send_many(payloads, dst)

    def recv_many(self, timeout: float) -> list[bytes]:
        return self.shared.recv_many_for(self.job_id, timeout)

    def close(self) -> None:
        """No more packets for this job (the shared transport stays open)."""
        self.shared.drop(self.job_id)
