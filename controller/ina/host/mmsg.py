"""Batched datagram I/O: sendmmsg(2) and recvmmsg(2) through ctypes on Linux, so that
a worker (ina.host.transport.UdpTransport) and the host benchmark's reflector
(ina.cli.inabench) pay one system call for a batch of packets instead of one each.

``Datagrams`` is a socket's preallocated batch: BATCH slots of SLOT_BYTES bytes, each
with room for its sender's address. ``receive`` fills slots with what is queued (no
waiting); ``reflect`` sends the first slots back to their senders (edited in place);
``send`` sends a list of payloads to one address. Where the C library has no
sendmmsg/recvmmsg (not Linux), ``available()`` is False and the callers do one
sendto or recvfrom per datagram, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import socket
import struct
from collections.abc import Sequence

from ina.protocol.constants import INA_PAYLOAD_BYTES

LOG = logging.getLogger(__name__)
#: Datagrams per system call at most.
BATCH = 64
#: Bytes of one slot: room for any INA payload; a longer datagram is cut to this
#: (MSG_TRUNC), which no reader of an INA payload sees (none reads past
#: INA_PAYLOAD_BYTES), and is logged.
SLOT_BYTES = 2048
assert SLOT_BYTES > INA_PAYLOAD_BYTES
MSG_DONTWAIT = 0x40
MSG_TRUNC = 0x20
MSG_WAITFORONE = 0x10000
#: Errors on which a send of one datagram is dropped, as a full queue drops it on the
#: wire: the send buffer is full (non-blocking), or the kernel's queue (ENOBUFS).
DROPPED = (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS)
#: A struct sockaddr_in (the largest address a slot receives: IPv4).
_SOCKADDR_BYTES = 16
_SOCKADDR_IN = struct.Struct("=H2s4s8x")


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _PayloadIovec(ctypes.Structure):
    """An iovec whose base is a bytes object's buffer (ctypes keeps the object alive
    while the field holds it)."""

    _fields_ = [("iov_base", ctypes.c_char_p), ("iov_len", ctypes.c_size_t)]


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

    ``buffer`` holds slot ``i`` at ``[i * SLOT_BYTES, (i + 1) * SLOT_BYTES)``; after
    ``receive`` returned ``n``, ``lengths[:n]`` (via ``length``) are the datagrams'
    lengths and each slot's address is its sender's."""

    def __init__(self, sock: socket.socket, batch: int = BATCH, slot_bytes: int = SLOT_BYTES):
        if _LIBC is None:
            raise OSError(errno.ENOSYS, "no sendmmsg/recvmmsg on this system")
        self.libc = _LIBC
        self.sock = sock
        self.batch = batch
        self.slot_bytes = slot_bytes
        self.buffer = bytearray(batch * slot_bytes)
        self.view = memoryview(self.buffer)
        self._data = (ctypes.c_char * len(self.buffer)).from_buffer(self.buffer)
        self._names = ctypes.create_string_buffer(batch * _SOCKADDR_BYTES)
        self._iovs = (_Iovec * batch)()
        self._msgs = (_Mmsghdr * batch)()
        self._out_iovs = (_PayloadIovec * batch)()
        self._out_msgs = (_Mmsghdr * batch)()
        self._to = ctypes.create_string_buffer(_SOCKADDR_BYTES)
        self._to_key: tuple[str, int] | None = None
        base, names = ctypes.addressof(self._data), ctypes.addressof(self._names)
        for i in range(batch):
            self._iovs[i].iov_base = base + i * slot_bytes
            self._iovs[i].iov_len = slot_bytes
            hdr = self._msgs[i].msg_hdr
            hdr.msg_name = names + i * _SOCKADDR_BYTES
            hdr.msg_namelen = _SOCKADDR_BYTES
            hdr.msg_iov = ctypes.addressof(self._iovs[i])
            hdr.msg_iovlen = 1
            out = self._out_msgs[i].msg_hdr
            out.msg_name = ctypes.addressof(self._to)
            out.msg_namelen = _SOCKADDR_BYTES
            out.msg_iov = ctypes.addressof(self._out_iovs[i])
            out.msg_iovlen = 1

    def receive(self, limit: int | None = None, wait: bool = False) -> int:
        """The datagrams queued on the socket, up to ``limit`` (default: the batch),
        into the first slots: how many (0: none queued). Without waiting; or, with
        ``wait`` on a blocking socket, until at least one is there."""
        n = self.batch if limit is None else min(limit, self.batch)
        for i in range(n):
            self._msgs[i].msg_hdr.msg_namelen = _SOCKADDR_BYTES
        flags = MSG_WAITFORONE if wait else MSG_DONTWAIT
        got = self.libc.recvmmsg(self.sock.fileno(), self._msgs, n, flags, None)
        if got < 0:
            err = ctypes.get_errno()
            if err in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                return 0
            raise OSError(err, os.strerror(err))
        for i in range(got):
            if self._msgs[i].msg_hdr.msg_flags & MSG_TRUNC:
                LOG.debug("a datagram longer than %d bytes was cut", self.slot_bytes)
        return int(got)

    def length(self, i: int) -> int:
        """Bytes of the datagram in slot ``i`` (at most the slot's)."""
        return min(int(self._msgs[i].msg_len), self.slot_bytes)

    def payload(self, i: int) -> bytes:
        """A copy of the datagram in slot ``i``."""
        lo = i * self.slot_bytes
        return bytes(self.view[lo: lo + self.length(i)])

    def reflect(self, n: int) -> int:
        """Send the first ``n`` slots back to their senders, each as long as it came
        (after any edits in place): how many the kernel took (the others dropped)."""
        for i in range(n):
            self._iovs[i].iov_len = self.length(i)
        try:
            return self._sendmmsg(self._msgs, n)
        finally:
            for i in range(n):
                self._iovs[i].iov_len = self.slot_bytes

    def send(self, payloads: Sequence[bytes], address: tuple[str, int]) -> int:
        """Send ``payloads`` to ``address`` (IPv4) in batches: how many the kernel took
        (a datagram it refused on a full queue is dropped, as sendto's caller drops it)."""
        if address != self._to_key:
            self._to.raw = sockaddr_in(*address)
            self._to_key = address
        sent = 0
        for lo in range(0, len(payloads), self.batch):
            part = payloads[lo: lo + self.batch]
            iovs = self._out_iovs
            for i, payload in enumerate(part):
                iov = iovs[i]
                iov.iov_base = payload if type(payload) is bytes else bytes(payload)
                iov.iov_len = len(payload)
            sent += self._sendmmsg(self._out_msgs, len(part))
            for i in range(len(part)):
                iovs[i].iov_base = None  # no reference kept to what was sent
        return sent

    def _sendmmsg(self, msgs: ctypes.Array[_Mmsghdr], n: int) -> int:
        """sendmmsg of ``msgs[:n]`` until all are sent or dropped: how many were sent."""
        size = ctypes.sizeof(_Mmsghdr)
        base, done, sent = ctypes.addressof(msgs), 0, 0
        while done < n:
            r = self.libc.sendmmsg(self.sock.fileno(), base + done * size, n - done, 0)
            if r < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR:
                    continue
                if err not in DROPPED:
                    raise OSError(err, os.strerror(err))
                LOG.debug("send dropped: %s", os.strerror(err))
                done += 1  # this one is as good as lost on the wire
                continue
            done += r
            sent += r
        return sent
