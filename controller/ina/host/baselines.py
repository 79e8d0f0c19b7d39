"""Host-based AllReduce, to measure INA against: a parameter server and a ring.

Both use TCP between hosts (reliable, as INA's retransmissions are) and plain
IPv4 forwarding through the switches. Arrays are int32. The parameter server sums;
the ring (``Ring``) reduces with SUM, MIN or MAX as the switches do, which is also
how a worker reduces a job that no switch can aggregate (ina.host.worker). The
benchmark runs them on hosts with ``python -m ina.cli.baselines``.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from ina.protocol.arith import combine
from ina.protocol.constants import Op

Array = npt.NDArray[np.int32]
_LEN = struct.Struct("!Q")
_FLAG = struct.Struct("!?")
#: A ring connection's first bytes: the ring's tag and the connecting rank.
_HELLO = struct.Struct("!IH")
#: TCP/IP on Ethernet: a full segment carries 1448 payload bytes in a 1514-byte frame.
TCP_WIRE_PER_BYTE = 1514 / 1448


def _send_array(sock: socket.socket, values: Array) -> None:
    data = values.astype(">i4").tobytes()
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def _recv_array(sock: socket.socket) -> Array:
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    return np.frombuffer(_recv_exact(sock, n), dtype=">i4").astype(np.int32)


def ps_server(port: int, workers: int) -> None:
    """Accept ``workers`` connections, sum their arrays, send the sum to each."""
    with socket.create_server(("0.0.0.0", port), backlog=workers) as srv:
        conns = [srv.accept()[0] for _ in range(workers)]
        total: Array | None = None
        for conn in conns:
            values = _recv_array(conn)
            total = values if total is None else combine(Op.SUM, total, values)[0]
        assert total is not None
        for conn in conns:
            _send_array(conn, total)
            conn.close()


def _connect(address: tuple[str, int], timeout: float) -> socket.socket:
    """A connection to a peer that may still be starting: retried until it listens."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection(address, timeout=timeout)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)  # the peer is starting: poll until it listens


def ps_worker(server: str, port: int, values: Array, timeout: float = 60.0,
              ready: Callable[[], None] = lambda: None) -> Array:
    """Send ``values`` to the parameter server and return the sum; ``ready`` is called
    once connected (the benchmark times what follows)."""
    with _connect((server, port), timeout) as sock:
        ready()
        _send_array(sock, values)
        return _recv_array(sock)


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
    ConnectionError or TimeoutError (OSError)."""

    def __init__(self, rank: int, addresses: Sequence[tuple[str, int]], timeout: float = 60.0,
                 tag: int = 0):
        self.rank = rank
        self.addresses = list(addresses)
        self.timeout = timeout
        self.tag = tag  # both ends of a connection must give the same (a job id, say)
        self.succ: socket.socket | None = None
        self.pred: socket.socket | None = None

    @property
    def size(self) -> int:
        return len(self.addresses)

    def open(self) -> None:
        """Listen on this rank's address, connect to the successor's and accept the
        predecessor's connection (ConnectionError or TimeoutError if either does
        not come within ``timeout``)."""
        n = self.size
        if n == 1:
            return
        pred_rank, succ_rank = (self.rank - 1) % n, (self.rank + 1) % n
        hello = _HELLO.pack(self.tag, self.rank)
        with socket.create_server(self.addresses[self.rank], backlog=n) as srv:
            srv.settimeout(self.timeout)
            accepted: list[socket.socket] = []
            failed: list[BaseException] = []

            def accept() -> None:
                deadline = time.monotonic() + self.timeout
                while time.monotonic() < deadline:
                    try:
                        conn, _ = srv.accept()
                        conn.settimeout(self.timeout)
                        if _HELLO.unpack(_recv_exact(conn, _HELLO.size)) == (self.tag,
                                                                             pred_rank):
                            accepted.append(conn)
                            return
                        conn.close()  # not our predecessor (another job's, a stale one)
                    except OSError as exc:
                        failed.append(exc)
                        return

            acceptor = threading.Thread(target=accept, daemon=True)
            acceptor.start()
            # A failure here leaves the acceptor to time out on its own (daemon).
            succ = _connect(self.addresses[succ_rank], self.timeout)
            succ.settimeout(self.timeout)
            self.succ = succ
            try:
                succ.sendall(hello)
            except OSError:
                self.close()
                raise
            acceptor.join(self.timeout)
            if not accepted:
                self.close()
                host, port = self.addresses[pred_rank]
                raise TimeoutError(f"no connection from rank {pred_rank} ({host}:{port}) "
                                   f"within {self.timeout:g}s"
                                   + (f": {failed[0]}" if failed else ""))
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
                sender = threading.Thread(target=_send_flagged, daemon=True, args=(
                    self.succ, segments[send_idx], overflow[send_idx], sent))
                sender.start()
                incoming, flag = _recv_flagged(self.pred)
                sender.join(self.timeout)
                if sent:
                    raise sent[0]
                if sender.is_alive():
                    raise TimeoutError(f"the successor took no data for {self.timeout:g}s")
                if incoming.size != segments[recv_idx].size:
                    raise ConnectionError(f"a peer sent {incoming.size} values for a segment "
                                          f"of {segments[recv_idx].size}: not the same array")
                if phase == "reduce":
                    segments[recv_idx], wrapped = combine(op, segments[recv_idx], incoming)
                    overflow[recv_idx] |= flag or wrapped
                else:
                    segments[recv_idx], overflow[recv_idx] = incoming, flag
        return np.concatenate(segments), any(overflow)

    def close(self) -> None:
        for conn in (self.succ, self.pred):
            if conn is not None:
                conn.close()
        self.succ = self.pred = None

    def __enter__(self) -> Ring:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _send_flagged(sock: socket.socket, values: Array, flag: bool,
                  failed: list[BaseException]) -> None:
    try:
        sock.sendall(_FLAG.pack(flag))
        _send_array(sock, values)
    except OSError as exc:
        failed.append(exc)


def _recv_flagged(sock: socket.socket) -> tuple[Array, bool]:
    (flag,) = _FLAG.unpack(_recv_exact(sock, _FLAG.size))
    return _recv_array(sock), bool(flag)


def ring_allreduce(rank: int, hosts: list[str], port: int, values: Array,
                   timeout: float = 60.0, ready: Callable[[], None] = lambda: None,
                   op: Op = Op.SUM) -> Array:
    """Reduce-scatter then all-gather around the ring of ``hosts``, rank r listening
    on ``port + r`` (see Ring). ``ready`` is called once the ring's connections are
    up (as a training loop keeps them from step to step)."""
    with Ring(rank, [(h, port + r) for r, h in enumerate(hosts)], timeout) as ring:
        ready()
        return ring.allreduce(values, op)[0]
