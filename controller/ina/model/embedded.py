"""The reference model served as a network on this machine: the embedded network.

Users without BMv2 still run the real thing: the same controller writes the same
entries into the model's switches, and worker processes (the torch backend,
``inaworker --embedded``) exchange the same frames with them. Each host of the
topology gets one UDP socket on the loopback, the far end of that host's link:
an Ethernet frame sent to it is put on the host's link (``ModelNetwork.send``),
and every frame the model delivers to the host goes back to the process on it.

One host, one process: a process claims a host's link over a TCP connection to
the network's claims port (``{"claim": host, "port": its UDP port}``, one JSON
line; ina.host.link does it), and holds it while that connection is open, which
its kernel closes when the process ends, however it ends. While a link is held,
only the holder's UDP port may send on it (anything else is a stranger's, dropped
and counted) and only the holder gets its frames; a second claim is refused,
saying so. A restarted worker claims the link again once the old process is gone.
A host whose link nobody holds has nobody listening: its frames are dropped, as a
host with no socket open would drop them.

``EmbeddedNetwork`` binds the sockets and deploys the jobs; ``serve`` moves frames
until told to stop. ``Endpoints`` is what a worker needs to reach its host's link;
``spawn`` starts the network in a child process (``inanet``) and returns them.

The network also deploys jobs on request: with ``jobs_socket``, it serves the job
service (ina.control.jobservice, ina.spec.jobservice) on that Unix socket, from the
same loop that moves the frames (so a deploy never races a packet through the
model). A torch program's process groups become jobs this way, each torn down when
its group is destroyed or when the connection that asked for it closes: the rank
that asked ended, or was killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import selectors
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ina.control.jobservice import JobService, lasting
from ina.errors import LabError, UsageError
from ina.host.link import Endpoints as Endpoints  # where it lived first: ina.torch imports it here
from ina.model.harness import initialised_network
from ina.model.network import Impairment
from ina.spec.job import Job, JobSpec
from ina.spec.jobservice import MAX_LINE, decode, encode
from ina.spec.topology import Topology

LOG = logging.getLogger(__name__)
#: How long ``spawn`` waits for the network to be up (import, init, deploy).
SPAWN_TIMEOUT = 60.0
#: Datagrams taken from one socket before the others get their turn.
BATCH = 64
#: Largest frame a link carries (a BIER result is about 1.2 kB).
MAX_FRAME = 16384
#: Answers a job service client may leave unread before the network stops reading
#: its requests (until it reads): one client that never reads holds up nobody.
MAX_UNREAD = 64 * 1024
#: Bytes of requests read from one client at a turn of the loop: every other client,
#: and every host's link, gets its turn between two of a flooding client's.
REQUEST_CHUNK = 4096


@dataclass
class LinkStats:
    frames_in: int = 0  # frames hosts put on their links
    frames_out: int = 0  # frames delivered to hosts' sockets
    undelivered: int = 0  # frames for a host whose link nobody holds
    strangers: int = 0  # frames sent on a host's link by a process that does not hold it
    refused_claims: int = 0  # claims of a link held by another process, or malformed


@dataclass(eq=False)
class _Client:
    """A connection to the job service: what it sent of its next line, and the
    answers not yet sent (it may not read: nothing here waits for it)."""

    sock: socket.socket
    pending: bytearray = field(default_factory=bytearray)
    out: bytearray = field(default_factory=bytearray)


@dataclass(eq=False)
class _Claim:
    """A connection to the claims port: what it sent of its claim, and the host whose
    link it holds (None: not yet, or refused)."""

    sock: socket.socket
    pending: bytearray = field(default_factory=bytearray)
    host: str | None = None


class EmbeddedNetwork:
    """The model's switches with the controller's base state and ``jobs`` deployed,
    one UDP socket per host on ``address``."""

    def __init__(self, topology: Topology, jobs: Sequence[JobSpec | Job] = (),
                 address: str = "127.0.0.1", impairment: Impairment | None = None,
                 jobs_socket: Path | None = None):
        self.topology = topology
        self.net, self.controller = initialised_network(topology, impairment)
        self.deployed: list[Job] = []
        for spec in jobs:
            deployment = asyncio.run(self.controller.deploy(spec))
            if deployment.job is not None:
                self.deployed.append(deployment.job)
        self.sockets: dict[str, socket.socket] = {}
        self.peers: dict[str, tuple[str, int]] = {}  # the UDP address holding each link
        self._holders: dict[str, _Claim] = {}  # the claim holding each link
        self.stats = LinkStats()
        self.selector = selectors.DefaultSelector()
        self.service = JobService(lambda: lasting(self.controller))
        self._loop = asyncio.new_event_loop()
        self._listener: socket.socket | None = None
        self.jobs_socket = jobs_socket
        try:
            if jobs_socket is not None:
                self._listener = _unix_listener(jobs_socket)
                self.selector.register(self._listener, selectors.EVENT_READ, "listen")
            self._claims = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._claims.bind((address, 0))
            self._claims.listen()
            self._claims.setblocking(False)
            self.selector.register(self._claims, selectors.EVENT_READ, "claims")
            for host in topology.hosts:
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
                sock.bind((address, 0))
                sock.setblocking(False)
                self.sockets[host] = sock
                self.selector.register(sock, selectors.EVENT_READ, host)
        except OSError:
            self.close()
            raise
        self.endpoints = Endpoints(address, {h: s.getsockname()[1]
                                             for h, s in self.sockets.items()},
                                   None if jobs_socket is None else str(jobs_socket),
                                   self._claims.getsockname()[1])
        # A socket pair that wakes ``serve`` when ``stop`` is called from elsewhere.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopped = threading.Event()

    def serve(self, until: IO[bytes] | None = None) -> None:
        """Move frames until ``stop`` is called (or ``until``, a stream, reaches its
        end: the spawning process is gone)."""
        if until is not None:
            self.selector.register(until, selectors.EVENT_READ, "until")
        while not self._stopped.is_set():
            for key, events in self.selector.select():
                if key.data is None:
                    self._stopped.set()
                elif key.data == "until":
                    if until is not None and not until.readline():
                        self._stopped.set()
                elif key.data == "listen":
                    self._accept()
                elif key.data == "claims":
                    self._accept_claim()
                elif isinstance(key.data, _Client):
                    if events & selectors.EVENT_WRITE:
                        self._flush(key.data)
                    if events & selectors.EVENT_READ:
                        self._request(key.data)
                elif isinstance(key.data, _Claim):
                    self._claim(key.data)
                else:
                    self._carry(key.data, key.fileobj)  # type: ignore[arg-type]
            self._deliver()

    def _carry(self, host: str, sock: socket.socket) -> None:
        """What ``host``'s link brought from the process that holds it, into the
        network (a stranger's frames are dropped and counted)."""
        for _ in range(BATCH):
            try:
                frame, peer = sock.recvfrom(MAX_FRAME)
            except BlockingIOError:
                return
            if self.peers.get(host) != peer:
                self.stats.strangers += 1
                continue
            self.stats.frames_in += 1
            if len(frame) >= 14:  # a runt is not a frame; the model would refuse it too
                self.net.send(host, frame)

    def _deliver(self) -> None:
        """Every frame the network delivered to a host, to its socket's peer."""
        while self.net.release_held():
            pass
        for host, inbox in self.net.inbox.items():
            if not inbox:
                continue
            peer = self.peers.get(host)
            sock = self.sockets[host]
            while inbox:
                frame = inbox.popleft()
                if peer is None:
                    self.stats.undelivered += 1
                    continue
                try:
                    sock.sendto(frame, peer)
                    self.stats.frames_out += 1
                except (BlockingIOError, ConnectionRefusedError):
                    self.stats.undelivered += 1  # a full socket, a peer gone: as a lossy link

    # --- claims: one process a host --------------------------------------------------

    def _accept_claim(self) -> None:
        try:
            sock, _ = self._claims.accept()
        except OSError:
            return
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, _Claim(sock))

    def _claim(self, claim: _Claim) -> None:
        """What a claim connection sent: its claim, answered once; its end (the
        process that held a link is gone) frees the link."""
        try:
            data = claim.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data or claim.host is not None or len(claim.pending) + len(data) > 4096:
            self._unclaim(claim)
            return
        claim.pending += data
        if b"\n" not in claim.pending:
            return
        line = bytes(claim.pending[: claim.pending.index(b"\n")])
        answer = self._grant(claim, line)
        with contextlib.suppress(OSError):  # gone: its end comes next
            claim.sock.send(json.dumps(answer).encode() + b"\n")

    def _grant(self, claim: _Claim, line: bytes) -> dict[str, str]:
        try:
            request = json.loads(line)
            host, port = str(request["claim"]), int(request["port"])
        except (ValueError, KeyError, TypeError):
            self.stats.refused_claims += 1
            return {"error": "not a claim: send {\"claim\": HOST, \"port\": UDP_PORT}"}
        if host not in self.sockets:
            self.stats.refused_claims += 1
            return {"error": f"the embedded network has no host {host}"}
        if host in self._holders:
            self.stats.refused_claims += 1
            return {"error": f"{host}'s link is held by another process (UDP port "
                             f"{self.peers[host][1]}): one process a host; is another "
                             f"worker running as {host}?"}
        peer_ip = claim.sock.getpeername()[0]
        claim.host = host
        self._holders[host] = claim
        self.peers[host] = (peer_ip, port)
        return {"ok": host}

    def _unclaim(self, claim: _Claim) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(claim.sock)
        claim.sock.close()
        if claim.host is not None and self._holders.get(claim.host) is claim:
            del self._holders[claim.host]
            self.peers.pop(claim.host, None)

    # --- the job service ---------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, _Client(sock))

    def _request(self, client: _Client) -> None:
        """What a client sent: each whole line a request, answered at once (the
        frames wait meanwhile; the answer goes as the client reads it); at its end,
        its jobs torn down."""
        try:
            data = client.sock.recv(REQUEST_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data or len(client.pending) + len(data) > MAX_LINE:
            self._drop(client)
            return
        client.pending += data
        while (end := client.pending.find(b"\n")) >= 0:
            line = bytes(client.pending[:end])
            del client.pending[:end + 1]
            try:
                answer = self._loop.run_until_complete(self.service.handle(client,
                                                                           decode(line)))
            except ValueError as exc:
                answer = {"error": f"not a request: {exc}"}
            except Exception as exc:  # a bug must not end the network
                LOG.exception("job service request failed")
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            client.out += encode(answer)
        self._flush(client)

    def _flush(self, client: _Client) -> None:
        """Send what the client's socket takes of its answers; wait for it to read the
        rest (and stop reading its requests while MAX_UNREAD are unread)."""
        try:
            sent = client.sock.send(client.out) if client.out else 0
        except BlockingIOError:
            sent = 0
        except OSError:
            self._drop(client)
            return
        del client.out[:sent]
        events = selectors.EVENT_WRITE if client.out else 0
        if len(client.out) < MAX_UNREAD:
            events |= selectors.EVENT_READ
        self.selector.modify(client.sock, events, client)

    def _drop(self, client: _Client) -> None:
        """A client gone (or over its line's limit): its jobs torn down."""
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(client.sock)
        client.sock.close()
        self._loop.run_until_complete(self.service.release(client))

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):  # closed already: nothing to wake
            self._wake_w.send(b"\0")

    def close(self) -> None:
        for key in list(self.selector.get_map().values()):
            if isinstance(key.data, _Client | _Claim):
                key.data.sock.close()
        if hasattr(self, "_claims"):
            self._claims.close()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            if self.jobs_socket is not None:
                self.jobs_socket.unlink(missing_ok=True)
        self._loop.close()
        for sock in self.sockets.values():
            sock.close()
        for end in ("_wake_r", "_wake_w"):
            if hasattr(self, end):
                getattr(self, end).close()
        self.selector.close()

    def __enter__(self) -> EmbeddedNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class SpawnedNetwork:
    """An embedded network in a child process: it ends when ``close`` closes its
    stdin, or when this process dies (the pipe closes with it)."""

    process: subprocess.Popen[bytes]
    endpoints: Endpoints

    def close(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.close()
                self.process.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> SpawnedNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unix_listener(path: Path) -> socket.socket:
    """A listening Unix socket at ``path``, made 0600 as it is bound (never reachable
    wider); UsageError if ``path`` is taken (see ``_stale_socket_removed``)."""
    _stale_socket_removed(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot serve the job service on {path}: "
                         f"{exc.strerror or exc}") from exc
    finally:
        os.umask(old)
    sock.listen()
    return sock


def _stale_socket_removed(path: Path) -> None:
    """Remove ``path`` if it is a socket nobody serves (a network that ended without
    removing it); UsageError if it is another kind of file (never replaced) or a
    socket some process serves (another network's: never taken over)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"cannot serve the job service on {path}: {exc}") from exc
    if not stat.S_ISSOCK(mode):
        raise UsageError(f"{path} exists and is not a socket: it is not replaced (give "
                         "another --jobs-socket)")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            path.unlink(missing_ok=True)  # stale: its network is gone
            return
        except OSError as exc:
            raise UsageError(f"cannot serve the job service on {path}: {exc}") from exc
    raise UsageError(f"another process serves {path} (another inanet?): it is not taken "
                     "over")


def spawn(topology: str | Path, jobs: Sequence[str | Path], *, loss: float = 0.0, seed: int = 0,
          extra: Sequence[str] = ()) -> SpawnedNetwork:
    """Start ``inanet`` for ``topology`` with ``jobs`` deployed; once it is up, its
    endpoints."""
    argv = [sys.executable, "-m", "ina.cli.inanet", "-t", str(topology),
            *(a for j in jobs for a in ("--job", str(j))), "--until-stdin-closes",
            *(("--loss", str(loss), "--seed", str(seed)) if loss else ()), *extra]
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert process.stdout is not None
    ready = _readline(process.stdout, SPAWN_TIMEOUT)
    if not ready:
        process.kill()
        _, err = process.communicate()
        raise LabError("the embedded network did not start: "
                       + (err.decode().strip() or f"exit code {process.returncode}"))
    return SpawnedNetwork(process, Endpoints.from_json(ready.decode()))


def _readline(stream: IO[bytes], timeout: float) -> bytes:
    """A line from ``stream``, or b"" if none comes within ``timeout`` seconds."""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        if not sel.select(timeout):
            return b""
    return stream.readline()
