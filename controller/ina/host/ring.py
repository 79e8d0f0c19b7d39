"""The hosts' ring: an authenticated ring of TCP connections among a job's hosts that
reduces int32 arrays with the data plane's semantics (SUM, MIN, MAX). A worker reduces
a job that no switch aggregates on it (ina.host.onhosts); the benchmarks' ring
baseline is it too (ina.host.baselines).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import socket
import struct
import threading
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ina.errors import RingError
from ina.protocol.arith import combine
from ina.protocol.constants import Op

LOG = logging.getLogger(__name__)
Array = npt.NDArray[np.int32]
#: A ring message's header: the overflow flag and the payload's length in bytes.
_MESSAGE = struct.Struct("!?Q")
#: A ring connection's first bytes, from the connecting side: the protocol, the ring's
#: tag, the rank it claims and its nonce.
_MAGIC = b"INAr"
_HELLO = struct.Struct("!4sIH16s")
#: The accepting side's answer: its nonce and its proof of the ring's key.
_CHALLENGE = struct.Struct("!16s32s")
#: The connecting side's proof of the ring's key.
_PROOF = struct.Struct("!32s")
#: Bytes of a message's authentication tag (HMAC-SHA256, truncated).
_TAG_BYTES = 16
#: Seconds a connection to a ring port may take to authenticate itself: a peer does
#: it at once; a connection that stalls is closed, so the real peer is not kept out.
HANDSHAKE_TIMEOUT = 5.0


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock``; ConnectionError if it closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def connect(address: tuple[str, int], timeout: float,
            source: tuple[str, int] | None = None) -> socket.socket:
    """A connection to a peer that may still be starting: retried until it listens;
    from ``source`` if given."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection(address, timeout=timeout, source_address=source)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)  # the peer is starting: poll until it listens


class Ring:
    """A ring of TCP connections among ``addresses`` (one (ip, port) per rank): each
    rank listens on its own and connects to its successor's. ``allreduce`` reduces
    an int32 array around it with the data plane's semantics (op SUM, MIN or MAX),
    as often as wanted while the ring is open: reduce-scatter then all-gather, N-1
    steps each, every rank sending 2(N-1)/N of the array in all.

    SUM wraps around int32 and reports an overflow as the switches do: if some
    partial sum, of two int32 values, left the int32 range on its way (a switch adds
    one contribution at a time to a cell and flags the wrap, ina.protocol.lanes).
    MIN and MAX compare signed. ``timeout`` bounds every wait for a peer:
    connecting, accepting, and each step; a peer that is gone or slow raises
    ConnectionError or TimeoutError (OSError).

    Peers are authenticated: whoever reaches a rank's port (any host of the
    network, since the port follows from the job id) could otherwise take a
    predecessor's place and feed its values into every rank's result.

    - A rank accepts a connection only from its predecessor's address. A host that
      is not on the path between the two cannot open a TCP connection with
      another host's address (it never sees the answer to its SYN, whose sequence
      number is random), so this keeps out every other host of the network.
    - Both ends then prove that they hold the ring's key (HMAC-SHA256 over a fresh
      nonce from each end, for its role and ranks), the connecting end second, so
      neither end learns anything it could replay. The key derives from ``secret``
      (``WorkerConfig.ring_secret``: what the job's launcher handed its workers,
      $INA_RING_SECRET) and from the ring itself (tag, addresses). With a secret,
      every message also carries a tag of a key of this connection and its position
      in the stream, so nothing can be injected into it either. Without one, the
      key is known to anyone who knows the job: the proof then stops nothing the
      address check does not (and messages carry no tag, which would cost CPU and
      protect nothing), so a process on a worker's own host, or on the path, could
      still take its place.
    - Every message's size is checked against what the protocol allows before it
      is read: the handshake's are fixed, and a segment's is exactly its values
      (every rank splits an array of the same length the same way).

    Why not a secret agreed through the switches (each worker adding a random value
    to a reduction of the call, whose result BIER delivers to the job's workers
    only): a job that no switch can take runs on hosts from its first call, with no
    reduction on switches before its ring, so there is nothing to agree through
    them; and a call moved to hosts midway can leave some workers without the last
    result (lost with the switch that failed), who could then not prove the key,
    failing a call that can succeed. The address check already keeps out every host
    that is not on the path; the rest needs a secret the workers get from outside
    the network (their launcher), which no observer of the switches' traffic has.

    A connection refused (not from the predecessor's address, a wrong or missing
    proof, a malformed hello) is counted in ``refused``, logged, closed, and the
    rank keeps waiting for its predecessor; a connection that stalls is closed
    after HANDSHAKE_TIMEOUT. A peer that breaks the protocol later ends the call
    with RingError. Either way the call is exact or fails: its values never come
    from anyone but the ring's ranks."""

    def __init__(self, rank: int, addresses: Sequence[tuple[str, int]], timeout: float = 60.0,
                 tag: int = 0, secret: bytes = b""):
        self.rank = rank
        self.addresses = list(addresses)
        self.timeout = timeout
        self.tag = tag  # both ends of a connection must give the same (a job id, say)
        self.succ: _Channel | None = None
        self.pred: _Channel | None = None
        #: Why each connection that was not the predecessor's was refused.
        self.refused: list[str] = []
        ring = b"|".join(f"{host}:{port}".encode() for host, port in self.addresses)
        self._key = hmac.digest(secret, b"ina ring v1|" + struct.pack("!I", tag) + b"|" + ring,
                                hashlib.sha256)
        self._tagged = bool(secret)  # messages tagged (see above)

    @property
    def size(self) -> int:
        return len(self.addresses)

    def _proof(self, role: bytes, connector: int, nonces: bytes) -> bytes:
        return hmac.digest(self._key, role + struct.pack("!HH", connector, self.size) + nonces,
                           hashlib.sha256)

    def _refuse(self, conn: socket.socket, peer: str, why: str) -> None:
        self.refused.append(f"{peer}: {why}")
        LOG.warning("ring of tag %d, rank %d: refused a connection from %s: %s", self.tag,
                    self.rank, peer, why)
        conn.close()

    def _admit(self, conn: socket.socket, pred_rank: int) -> _Channel | None:
        """The predecessor's channel, if ``conn`` proves to be it (else refused)."""
        host = conn.getpeername()[0]
        peer = f"{host}:{conn.getpeername()[1]}"
        if host != self.addresses[pred_rank][0]:
            self._refuse(conn, peer, f"not the address of rank {pred_rank} "
                                     f"({self.addresses[pred_rank][0]})")
            return None
        conn.settimeout(min(self.timeout, HANDSHAKE_TIMEOUT))
        try:
            magic, tag, rank, nonce_c = _HELLO.unpack(recv_exact(conn, _HELLO.size))
            if (magic, tag, rank) != (_MAGIC, self.tag, pred_rank):
                self._refuse(conn, peer, f"not rank {pred_rank} of this ring (hello "
                                         f"{magic!r}, tag {tag}, rank {rank})")
                return None
            nonce_s = secrets.token_bytes(16)
            nonces = nonce_c + nonce_s
            conn.sendall(_CHALLENGE.pack(nonce_s, self._proof(b"acceptor", rank, nonces)))
            (proof,) = _PROOF.unpack(recv_exact(conn, _PROOF.size))
        except (OSError, struct.error) as exc:
            self._refuse(conn, peer, f"no valid handshake ({exc or type(exc).__name__})")
            return None
        if not hmac.compare_digest(proof, self._proof(b"connector", rank, nonces)):
            self._refuse(conn, peer, "wrong proof of the ring's key")
            return None
        conn.settimeout(self.timeout)
        return _Channel(conn, self._session_key(nonces))

    def _session_key(self, nonces: bytes) -> bytes | None:
        if not self._tagged:
            return None
        return hmac.digest(self._key, b"session" + nonces, hashlib.sha256)

    def _join(self, conn: socket.socket, succ_rank: int) -> _Channel:
        """Authenticate the connection to the successor (RingError if it cannot
        prove that it holds the ring's key: its port is held by someone else)."""
        nonce_c = secrets.token_bytes(16)
        conn.sendall(_HELLO.pack(_MAGIC, self.tag, self.rank, nonce_c))
        nonce_s, proof = _CHALLENGE.unpack(recv_exact(conn, _CHALLENGE.size))
        nonces = nonce_c + nonce_s
        if not hmac.compare_digest(proof, self._proof(b"acceptor", self.rank, nonces)):
            host, port = self.addresses[succ_rank]
            self.refused.append(f"{host}:{port}: wrong proof of the ring's key")
            raise RingError(f"the port of rank {succ_rank} ({host}:{port}) answered without "
                            "the ring's key: someone else holds it")
        conn.sendall(_PROOF.pack(self._proof(b"connector", self.rank, nonces)))
        return _Channel(conn, self._session_key(nonces))

    def open(self) -> None:
        """Listen on this rank's address, connect to the successor's and accept the
        predecessor's connection, each authenticated (ConnectionError or
        TimeoutError if either does not come within ``timeout``)."""
        n = self.size
        if n == 1:
            return
        pred_rank, succ_rank = (self.rank - 1) % n, (self.rank + 1) % n
        with socket.create_server(self.addresses[self.rank], backlog=n) as srv:
            accepted: list[_Channel] = []
            failed: list[BaseException] = []
            deadline = time.monotonic() + self.timeout

            def accept() -> None:
                while (left := deadline - time.monotonic()) > 0:
                    try:
                        srv.settimeout(left)
                        conn, _ = srv.accept()
                    except OSError as exc:
                        failed.append(exc)
                        return
                    channel = self._admit(conn, pred_rank)
                    if channel is not None:
                        accepted.append(channel)
                        return

            acceptor = threading.Thread(target=accept, daemon=True)
            acceptor.start()
            # A failure here leaves the acceptor to time out on its own (daemon).
            # From this rank's own address, which is all its successor accepts.
            succ = connect(self.addresses[succ_rank], self.timeout,
                            (self.addresses[self.rank][0], 0))
            succ.settimeout(self.timeout)
            try:
                self.succ = self._join(succ, succ_rank)
            except (OSError, struct.error) as exc:
                succ.close()
                self.close()
                if isinstance(exc, OSError):
                    raise
                raise RingError(f"rank {succ_rank} did not answer as a ring peer") from exc
            acceptor.join(max(0.0, deadline - time.monotonic()) + HANDSHAKE_TIMEOUT)
            if not accepted:
                self.close()
                host, port = self.addresses[pred_rank]
                raise TimeoutError(f"no connection from rank {pred_rank} ({host}:{port}) "
                                   f"within {self.timeout:g}s"
                                   + (f": {failed[0]}" if failed else "")
                                   + (f" ({len(self.refused)} connections refused)"
                                      if self.refused else ""))
            self.pred = accepted[0]

    def allreduce(self, values: npt.ArrayLike, op: Op = Op.SUM) -> tuple[Array, bool]:
        """Every rank's ``values`` reduced with ``op``, and whether a SUM overflowed."""
        array = np.asarray(values, dtype=np.int32)
        n = self.size
        if n == 1:
            return array.copy(), False
        assert self.succ is not None and self.pred is not None, "the ring is not open"
        segments = np.array_split(array.copy(), n)
        overflow = [False] * n
        # Reduce-scatter: at step k send segment r-k, combine the one received into
        # r-k-1; afterwards rank r holds the reduction of segment r+1. All-gather
        # passes them on, with their overflow flags.
        for phase in ("reduce", "gather"):
            for k in range(n - 1):
                send_idx = (self.rank - k + (0 if phase == "reduce" else 1)) % n
                recv_idx = (send_idx - 1) % n
                sent: list[BaseException] = []
                sender = threading.Thread(target=self.succ.send_safely, daemon=True, args=(
                    segments[send_idx], overflow[send_idx], sent))
                sender.start()
                incoming, flag = self.pred.receive(segments[recv_idx].size)
                sender.join(self.timeout)
                if sent:
                    raise sent[0]
                if sender.is_alive():
                    raise TimeoutError(f"the successor took no data for {self.timeout:g}s")
                if phase == "reduce":
                    segments[recv_idx], wrapped = combine(op, segments[recv_idx], incoming)
                    overflow[recv_idx] |= flag or wrapped
                else:
                    segments[recv_idx], overflow[recv_idx] = incoming, flag
        return np.concatenate(segments), any(overflow)

    def close(self) -> None:
        for channel in (self.succ, self.pred):
            if channel is not None:
                channel.sock.close()
        self.succ = self.pred = None

    def __enter__(self) -> Ring:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Channel:
    """One authenticated ring connection; data flows one way on it (the connecting
    rank sends, the accepting one receives). Each message is its header, its
    payload and, with a ``key``, a tag: HMAC-SHA256 with the connection's key over
    the message's number in the stream, header and payload (so none can be forged,
    dropped, repeated or reordered unnoticed)."""

    def __init__(self, sock: socket.socket, key: bytes | None):
        self.sock = sock
        self._key = key
        self._count = 0

    def _tag(self, header: bytes, payload: bytes) -> bytes:
        if self._key is None:
            return b""
        mac = hmac.new(self._key, struct.pack("!Q", self._count) + header, hashlib.sha256)
        mac.update(payload)
        self._count += 1
        return mac.digest()[:_TAG_BYTES]

    def send(self, values: Array, flag: bool) -> None:
        payload = values.astype(">i4").tobytes()
        header = _MESSAGE.pack(flag, len(payload))
        self.sock.sendall(header + payload + self._tag(header, payload))

    def send_safely(self, values: Array, flag: bool, failed: list[BaseException]) -> None:
        try:
            self.send(values, flag)
        except OSError as exc:
            failed.append(exc)

    def receive(self, values: int) -> tuple[Array, bool]:
        """A message of exactly ``values`` int32 and its flag; RingError if it is not
        (its size is checked before its payload is read) or its tag is wrong."""
        header = recv_exact(self.sock, _MESSAGE.size)
        flag, nbytes = _MESSAGE.unpack(header)
        if nbytes != 4 * values:
            raise RingError(f"a peer sent a message of {nbytes} bytes for a segment of "
                            f"{values} values ({4 * values} bytes): not the same array, or "
                            "not a ring peer")
        payload = recv_exact(self.sock, nbytes)
        tag = recv_exact(self.sock, _TAG_BYTES) if self._key is not None else b""
        if not hmac.compare_digest(tag, self._tag(header, payload)):
            raise RingError("a message from the predecessor failed authentication: the "
                            "connection was tampered with")
        return np.frombuffer(payload, dtype=">i4").astype(np.int32), bool(flag)
