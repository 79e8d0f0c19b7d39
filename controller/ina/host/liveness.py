"""Whether the processes of a job's ranks are still there, told by their kernels.

A heartbeat written by a Python thread stops while another thread of its process
holds the GIL (one long C call), and its peers would declare a slow rank dead. So
liveness here is a TCP connection from every rank to every other: each rank listens
on a port of its own (never accepting: the kernel completes a connection and holds
it in the listener's queue whatever the process does), publishes the port in the
store, and connects to every other rank's. When a process ends, however it ends,
its kernel closes its listener and resets every connection waiting in it; so a
connection that reads as closed or reset (``gone``) is a peer whose process is gone,
and nothing else is. A rank that is only slow keeps its connections; a call that
waits on it waits on, up to the process group's timeout.

A child forked by a rank (a DataLoader's workers) would hold the listener and the
connections after the rank died, and keep it alive to its peers: a child closes its
copies as it starts (ina.host.leases).
"""

from __future__ import annotations

import logging
import select
import socket
from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from ina.errors import UsageError
from ina.host import leases

LOG = logging.getLogger(__name__)
#: How long a rank tries to connect to a peer's listener at the start.
CONNECT_TIMEOUT = 30.0


class KeyStore(Protocol):
    """The part of torch.distributed.Store liveness uses."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def wait(self, keys: list[str], timeout: timedelta) -> None: ...


class Liveness:
    """This rank's connections to every other rank of ``size`` (``address``: where it
    listens, an address its peers reach)."""

    def __init__(self, store: KeyStore, rank: int, size: int, address: str,
                 timeout: timedelta = timedelta(seconds=120)):
        self.rank, self.size = rank, size
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._peers: dict[int, socket.socket] = {}
        try:
            self._listener.bind((address, 0))
            self._listener.listen(max(size, 1))
            store.set(f"ina/live/{rank}", f"{address}:{self._listener.getsockname()[1]}")
            keys = [f"ina/live/{r}" for r in range(size) if r != rank]
            store.wait(keys, timeout)
            for r in range(size):
                if r != rank:
                    self._peers[r] = self._connect(r, store.get(f"ina/live/{r}").decode())
        except BaseException:
            self.close()
            raise
        leases.hold(self)

    def _connect(self, rank: int, where: str) -> socket.socket:
        host, _, port = where.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            raise UsageError(f"rank {self.rank} could not reach rank {rank} at {where} "
                             f"to watch that it lives: {exc}") from exc
        sock.setblocking(False)
        return sock

    def gone(self, ranks: Sequence[int] | None = None) -> list[int]:
        """Those of ``ranks`` (default: every other rank) whose process has ended: its
        connection reads as closed or reset. Never blocks."""
        wanted = [r for r in (range(self.size) if ranks is None else ranks)
                  if r in self._peers]
        socks = {self._peers[r]: r for r in wanted}
        if not socks:
            return []
        readable, _, _ = select.select(list(socks), [], [], 0)
        ended = []
        for sock in readable:
            try:
                if sock.recv(1, socket.MSG_PEEK) == b"":
                    ended.append(socks[sock])
            except BlockingIOError:
                continue
            except OSError:  # reset: the peer's listener closed with its process
                ended.append(socks[sock])
        return sorted(ended)

    def close(self) -> None:
        for sock in [self._listener, *self._peers.values()]:
            sock.close()
        self._peers.clear()
