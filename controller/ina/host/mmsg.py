"""Batched datagram I/O: sendmmsg(2) and recvmmsg(2) through ctypes on Linux, so that
a worker (ina.host.transport.UdpTransport) pays one system call for a batch of
packets instead of one each.

``Datagrams`` is a socket's preallocated batch: BATCH slots of SLOT_BYTES bytes, each
with room for its sender's address. ``receive`` fills slots with what is queued (no
waiting); ``send`` sends a list of payloads to one address. Where the C library has no
sendmmsg/recvmmsg (not Linux), ``available()`` is False and the callers do one
sendto or recvfrom per datagram, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import select
import socket
import struct
from collections.abc import Sequence

from ina.errors import UsageError
from ina.protocol.constants import INA_PAYLOAD_BYTES

LOG = logging.getLogger(__name__)
#: Datagrams per system call at most.
BATCH = 64
#: Bytes of one slot: room for any INA payload; a longer datagram received is cut to
#: this, which no reader of an INA payload sees (none reads past INA_PAYLOAD_BYTES).
#: Sent, it goes alone, whole (sendto).
SLOT_BYTES = 2048
assert SLOT_BYTES > INA_PAYLOAD_BYTES
MSG_DONTWAIT = 0x40
MSG_WAITFORONE = 0x10000
#: Errors on which a send of one datagram is dropped, as a full queue drops it on the
#: wire: the send buffer is full (non-blocking), or the kernel's queue (ENOBUFS).
DROPPED = (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS)
_FULL = (errno.EAGAIN, errno.EWOULDBLOCK)
#: A struct sockaddr_in (the largest address a slot receives: IPv4).
_SOCKADDR_BYTES = 16
_SOCKADDR_IN = struct.Struct("=H2s4s8x")


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint32),
                ("msg_iov", ctypes.c_void_p), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _Msghdr), ("msg_len", ctypes.c_uint)]


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        for fn in (libc.sendmmsg, libc.recvmmsg):
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    except (OSError, AttributeError, TypeError):
        return None
    libc.recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int,
                              ctypes.c_void_p]
    return libc


_LIBC = _libc()


def available() -> bool:
    """Whether this system has sendmmsg and recvmmsg (Linux)."""
    return _LIBC is not None


def sockaddr_in(address: str, port: int) -> bytes:
    """A struct sockaddr_in for an IPv4 address and port."""
    return _SOCKADDR_IN.pack(socket.AF_INET, port.to_bytes(2, "big"),
                             socket.inet_aton(address))


class Datagrams:
    """A socket's batch of BATCH preallocated slots for recvmmsg and sendmmsg.

    ``buffer`` holds received slot ``i`` at ``[i * SLOT_BYTES, (i + 1) * SLOT_BYTES)``;
    after ``receive`` returned ``n``, ``length(i)`` is slot ``i``'s datagram's length
    and its address its sender's. Sends copy their payloads into slots of their own.
    The headers live in Python buffers so that lengths are read and written through
    memoryviews, not a ctypes object per access."""

    def __init__(self, sock: socket.socket, batch: int = BATCH, slot_bytes: int = SLOT_BYTES):
        if _LIBC is None:
            raise OSError(errno.ENOSYS, "no sendmmsg/recvmmsg on this system")
        if sock.family != socket.AF_INET:
            raise UsageError("batched datagrams take an IPv4 socket")
        self.libc = _LIBC
        self.sock = sock
        self.batch = batch
        self.slot_bytes = slot_bytes
        self.buffer = bytearray(batch * slot_bytes)
        self.view = memoryview(self.buffer)
        self.out = bytearray(batch * slot_bytes)
        self._out_view = memoryview(self.out)
        self._names = bytearray(batch * _SOCKADDR_BYTES)
        self._to = bytearray(_SOCKADDR_BYTES)
        self._to_key: tuple[str, int] | None = None
        self._in = _Vector(batch, self.buffer, slot_bytes, self._names, _SOCKADDR_BYTES)
        self._outv = _Vector(batch, self.out, slot_bytes, self._to, 0)

    def receive(self, limit: int | None = None, wait: bool = False) -> int:
        """The datagrams queued on the socket, up to ``limit`` (default: the batch),
        into the first slots: how many (0: none queued). Without waiting; or, with
        ``wait`` on a blocking socket, until at least one is there. (An IPv4
        sender's address fills its slot's 16 bytes: the kernel writes back the same
        length, so the slots need no resetting.)"""
        n = self.batch if limit is None else min(limit, self.batch)
        flags = MSG_WAITFORONE if wait else MSG_DONTWAIT
        got = self.libc.recvmmsg(self.sock.fileno(), self._in.msgs, n, flags, None)
        if got < 0:
            err = ctypes.get_errno()
            if err in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                return 0
            raise OSError(err, os.strerror(err))
        return int(got)

    def length(self, i: int) -> int:
        """Bytes of the datagram in slot ``i`` (at most the slot's)."""
        return min(self._in.received(i), self.slot_bytes)

    def payload(self, i: int) -> bytes:
        """A copy of the datagram in slot ``i``."""
        lo = i * self.slot_bytes
        return bytes(self.view[lo: lo + self.length(i)])

    def payloads(self, n: int) -> list[bytes]:
        """Copies of the datagrams in the first ``n`` slots."""
        view, slot, lengths = self.view, self.slot_bytes, self._in.lengths
        at, step = self._in.len_at, self._in.len_step
        return [bytes(view[i * slot: i * slot + min(lengths[at + i * step], slot)])
                for i in range(n)]

    def send(self, payloads: Sequence[bytes], address: tuple[str, int]) -> int:
        """Send ``payloads`` to ``address`` (IPv4), in order, in batches: how many the
        kernel took (one it refused on a full queue is dropped, as sendto's caller
        drops it). A payload longer than a slot goes alone, by sendto."""
        if address != self._to_key:
            self._to[:] = sockaddr_in(*address)
            self._to_key = address
        out, slot, vec = self._out_view, self.slot_bytes, self._outv
        lens, at, step = vec.iov_lens, vec.iov_at, vec.iov_step
        sent = n = 0
        for payload in payloads:
            size = len(payload)
            if size > slot:
                sent += self._sendmmsg(vec.msgs, n) + self._sendto(payload, address)
                n = 0
                continue
            out[n * slot: n * slot + size] = payload
            lens[at + n * step] = size
            n += 1
            if n == self.batch:
                sent += self._sendmmsg(vec.msgs, n)
                n = 0
        return sent + self._sendmmsg(vec.msgs, n)

    def _sendto(self, payload: bytes, address: tuple[str, int]) -> int:
        try:
            self.sock.sendto(payload, address)
        except OSError as exc:
            if exc.errno not in DROPPED:
                raise
            LOG.debug("send dropped: %s", exc)
            return 0
        return 1

    def _writable(self) -> bool:
        """After a full send buffer: whether it has room within the socket's timeout,
        as sendto waits on a socket with a timeout (none: no wait, the send is
        dropped, as sendto raises at once on a non-blocking socket)."""
        timeout = self.sock.gettimeout()
        if not timeout:
            return False
        poll = select.poll()
        poll.register(self.sock, select.POLLOUT)
        return bool(poll.poll(timeout * 1000.0))

    def _sendmmsg(self, msgs: ctypes.Array[_Mmsghdr], n: int) -> int:
        """sendmmsg of ``msgs[:n]`` until all are sent or dropped: how many were sent."""
        size = ctypes.sizeof(_Mmsghdr)
        base, done, sent = ctypes.addressof(msgs), 0, 0
        while done < n:
            r = self.libc.sendmmsg(self.sock.fileno(), base + done * size, n - done, 0)
            if r < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR or (err in _FULL and self._writable()):
                    continue
                if err not in DROPPED:
                    raise OSError(err, os.strerror(err))
                LOG.debug("send dropped: %s", os.strerror(err))
                done += 1  # this one is as good as lost on the wire
                continue
            done += r
            sent += r
        return sent


class _Vector:
    """``batch`` message headers (struct mmsghdr), each with one iovec on a slot of
    ``data`` and an address in ``names`` (``name_bytes`` each; 0: all share
    ``names``), in Python buffers read and written through memoryviews."""

    def __init__(self, batch: int, data: bytearray, slot: int, names: bytearray,
                 name_bytes: int):
        msg, iov = ctypes.sizeof(_Mmsghdr), ctypes.sizeof(_Iovec)
        self.header_bytes = bytearray(batch * msg)
        self.iov_bytes = bytearray(batch * iov)
        self.msgs = (_Mmsghdr * batch).from_buffer(self.header_bytes)
        iovs = (_Iovec * batch).from_buffer(self.iov_bytes)
        # Held, so that the buffers cannot be resized under the addresses.
        self._data = (ctypes.c_char * len(data)).from_buffer(data)
        self._names = (ctypes.c_char * len(names)).from_buffer(names)
        base, name_base = ctypes.addressof(self._data), ctypes.addressof(self._names)
        for i in range(batch):
            iovs[i].iov_base = base + i * slot
            iovs[i].iov_len = slot
            hdr = self.msgs[i].msg_hdr
            hdr.msg_name = name_base + i * name_bytes
            hdr.msg_namelen = _SOCKADDR_BYTES
            hdr.msg_iov = ctypes.addressof(iovs[i])
            hdr.msg_iovlen = 1
        self.lengths = memoryview(self.header_bytes).cast("I")  # msg_len: what came
        self.len_at = _Mmsghdr.msg_len.offset // 4
        self.len_step = msg // 4
        # iov_len (a size_t): what to send.
        self.iov_lens = memoryview(self.iov_bytes).cast(
            "Q" if ctypes.sizeof(ctypes.c_size_t) == 8 else "I")
        self.iov_step = iov // ctypes.sizeof(ctypes.c_size_t)
        self.iov_at = _Iovec.iov_len.offset // ctypes.sizeof(ctypes.c_size_t)

    def received(self, i: int) -> int:
        return int(self.lengths[self.len_at + i * self.len_step])

    def set_length(self, i: int, size: int) -> None:
        self.iov_lens[self.iov_at + i * self.iov_step] = size
