"""Host-based AllReduce, to measure INA against: a parameter server and a ring.

Both use TCP between hosts (reliable, as INA's retransmissions are) and plain
IPv4 forwarding through the switches. Arrays are int32; SUM only.

    python -m ina.baselines ps-server --port P --workers N --size S
    python -m ina.baselines ps-worker --server IP --port P --random S --seed K
    python -m ina.baselines ring --rank R --hosts IP0,IP1,... --port P --random S --seed K

Each worker prints one JSON line: its elapsed seconds and a digest of the result.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from ina.arrays import digest, random_array
from ina.protocol.arith import wrap_int32

Array = npt.NDArray[np.int32]
_LEN = struct.Struct("!Q")


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


def wait_for_go() -> None:
    """Say ``ready`` on stdout and wait for a line on stdin: the benchmark starts every
    worker's clock at once, after each is set up (no start-up skew in the figures)."""
    print("ready", flush=True)
    sys.stdin.readline()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ina.baselines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("ps-server")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--workers", type=int, required=True)
    for name in ("ps-worker", "ring"):
        w = sub.add_parser(name)
        w.add_argument("--port", type=int, required=True)
        w.add_argument("--random", type=int, required=True, metavar="SIZE")
        w.add_argument("--seed", type=int, default=0)
        w.add_argument("--wait-go", action="store_true",
                       help="once connected, say 'ready' and wait for a line on stdin")
        if name == "ps-worker":
            w.add_argument("--server", required=True)
        else:
            w.add_argument("--rank", type=int, required=True)
            w.add_argument("--hosts", required=True, help="comma-separated IPs, in ring order")
    args = p.parse_args(argv)
    if args.cmd == "ps-server":
        ps_server(args.port, args.workers)
        return 0
    values = random_array(args.random, args.seed)
    started = [time.monotonic()]

    def ready() -> None:
        if args.wait_go:
            wait_for_go()
        started[0] = time.monotonic()

    if args.cmd == "ps-worker":
        result = ps_worker(args.server, args.port, values, ready=ready)
    else:
        result = ring_allreduce(args.rank, args.hosts.split(","), args.port, values, ready=ready)
    elapsed = time.monotonic() - started[0]
    print(json.dumps({"elapsed": elapsed, "sha256": digest(result), "values": int(result.size)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
