"""Host-based AllReduce, to measure INA against: a parameter server and a ring.

Both use TCP between hosts (reliable, as INA's retransmissions are) and plain
IPv4 forwarding through the switches. Arrays are int32; SUM only. The benchmark
runs them on hosts with ``python -m ina.cli.baselines``.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from ina.protocol.arith import wrap_int32

Array = npt.NDArray[np.int32]
_LEN = struct.Struct("!Q")
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


def _wrap_sum(a: Array, b: Array) -> Array:
    """a + b with the switches' int32 wrap-around."""
    return wrap_int32(a.astype(np.int64) + b).astype(np.int32)


def ps_server(port: int, workers: int) -> None:
    """Accept ``workers`` connections, sum their arrays, send the sum to each."""
    with socket.create_server(("0.0.0.0", port), backlog=workers) as srv:
        conns = [srv.accept()[0] for _ in range(workers)]
        total: Array | None = None
        for conn in conns:
            values = _recv_array(conn)
            total = values if total is None else _wrap_sum(total, values)
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


def ring_allreduce(rank: int, hosts: list[str], port: int, values: Array,
                   timeout: float = 60.0, ready: Callable[[], None] = lambda: None) -> Array:
    """Reduce-scatter then all-gather around the ring of ``hosts``: N-1 steps each,
    every worker sending 2(N-1)/N of the array in all. ``ready`` is called once the
    ring's connections are up (as a training loop keeps them from step to step)."""
    n = len(hosts)
    segments = np.array_split(values.copy(), n)
    if n == 1:
        ready()
        return values.copy()
    with socket.create_server(("0.0.0.0", port + rank)) as srv:
        accepted: list[socket.socket] = []
        acceptor = threading.Thread(target=lambda: accepted.append(srv.accept()[0]))
        acceptor.start()
        succ = _connect((hosts[(rank + 1) % n], port + (rank + 1) % n), timeout)
        acceptor.join(timeout)
        pred = accepted[0]
        with succ, pred:
            ready()
            # Reduce-scatter: at step k send segment r-k, add the one received into r-k-1;
            # afterwards rank r holds the sum of segment r+1. All-gather passes them on.
            for phase in ("reduce", "gather"):
                for k in range(n - 1):
                    send_idx = (rank - k + (0 if phase == "reduce" else 1)) % n
                    recv_idx = (send_idx - 1) % n
                    sender = threading.Thread(target=_send_array,
                                              args=(succ, segments[send_idx]))
                    sender.start()
                    incoming = _recv_array(pred)
                    sender.join()
                    segments[recv_idx] = (_wrap_sum(segments[recv_idx], incoming)
                                          if phase == "reduce" else incoming)
    return np.concatenate(segments)
