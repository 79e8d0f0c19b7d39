"""Host-based AllReduce, to measure INA against: a parameter server and a ring.

Both use TCP between hosts (reliable, as INA's retransmissions are) and plain
IPv4 forwarding through the switches. Arrays are int32. The parameter server sums;
the ring (ina.host.ring) reduces with SUM, MIN or MAX as the switches do, which is
also how a worker reduces a job that no switch can aggregate (ina.host.onhosts).
The benchmark runs them on hosts with ``python -m ina.cli.baselines``.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

import numpy as np

from ina.host.ring import Array, Ring, connect, recv_exact
from ina.protocol.arith import combine
from ina.protocol.constants import Op

_LEN = struct.Struct("!Q")
#: TCP/IP on Ethernet: a full segment carries 1448 payload bytes in a 1514-byte frame.
TCP_WIRE_PER_BYTE = 1514 / 1448


def _send_array(sock: socket.socket, values: Array) -> None:
    data = values.astype(">i4").tobytes()
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_array(sock: socket.socket) -> Array:
    (n,) = _LEN.unpack(recv_exact(sock, _LEN.size))
    return np.frombuffer(recv_exact(sock, n), dtype=">i4").astype(np.int32)


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


def ps_worker(server: str, port: int, values: Array, timeout: float = 60.0,
              ready: Callable[[], None] = lambda: None) -> Array:
    """Send ``values`` to the parameter server and return the sum; ``ready`` is called
    once connected (the benchmark times what follows)."""
    with connect((server, port), timeout) as sock:
        ready()
        _send_array(sock, values)
        return _recv_array(sock)


def ring_allreduce(rank: int, hosts: list[str], port: int, values: Array,
                   timeout: float = 60.0, ready: Callable[[], None] = lambda: None,
                   op: Op = Op.SUM) -> Array:
    """Reduce-scatter then all-gather around the ring of ``hosts``, rank r listening
    on ``port + r`` (see Ring). ``ready`` is called once the ring's connections are
    up (as a training loop keeps them from step to step)."""
    with Ring(rank, [(h, port + r) for r, h in enumerate(hosts)], timeout) as ring:
        ready()
        return ring.allreduce(values, op)[0]
