"""The ring on hosts admits only the ring's ranks: a connection from another address,
without the ring's key, or that breaks the protocol is refused and counted, and the
ring forms with the real peer; a message of the wrong size or with a wrong tag ends
the call with an error. Ranks on 127.0.0.10.. (loopback addresses of their own)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from ina.errors import RingError
from ina.host import ring as ring_module
from ina.host.ring import _HELLO, _MAGIC, Array, Ring, _Channel
from ina.model.harness import reduce_arrays
from ina.protocol.constants import Op

N = 4
JOB = 7
SECRET = b"the job's secret"


def _addresses() -> list[tuple[str, int]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        base = int(s.getsockname()[1]) % 20000 + 20000
    return [(f"127.0.0.{10 + r}", base + r) for r in range(N)]


def _arrays() -> list[Array]:
    rng = np.random.default_rng(3)
    return [rng.integers(-(2**20), 2**20, 1000, dtype=np.int32) for _ in range(N)]


class Ranks:
    """The ring's ranks, each in a thread; rank 1 starts first, alone, so that an
    impostor can reach its port before its predecessor does; the others start with
    ``finish``."""

    def __init__(self, addresses: list[tuple[str, int]], secret: bytes = SECRET):
        self.rings = [Ring(r, addresses, timeout=10, tag=JOB, secret=secret) for r in range(N)]
        self.arrays = _arrays()
        self.results: dict[int, Array | BaseException] = {}
        self.threads = [threading.Thread(target=self._run, args=(r,)) for r in range(N)]
        self.threads[1].start()

    def _run(self, rank: int) -> None:
        try:
            with self.rings[rank] as ring:
                self.results[rank] = ring.allreduce(self.arrays[rank], Op.SUM)[0]
        except BaseException as exc:  # noqa: BLE001 (checked by the test)
            self.results[rank] = exc

    def finish(self) -> list[Array]:
        for r in (0, 2, 3):
            self.threads[r].start()
        for t in self.threads:
            t.join(30)
        for r in range(N):
            assert isinstance(self.results.get(r), np.ndarray), self.results.get(r)
        return [self.results[r] for r in range(N)]  # type: ignore[misc]

    def exact(self) -> bool:
        expected = reduce_arrays(Op.SUM, self.arrays)
        return all(np.array_equal(r, expected) for r in self.finish())


def _impostor(source: str, target: tuple[str, int],
              act: Callable[[socket.socket], None]) -> socket.socket:
    """A connection from ``source`` to ``target`` as soon as it listens, that does
    ``act`` and stays open."""
    deadline = time.monotonic() + 10
    while True:
        try:
            sock = socket.create_connection(target, timeout=10, source_address=(source, 0))
            break
        except ConnectionRefusedError:  # the rank is starting
            assert time.monotonic() < deadline, f"nothing listens on {target}"
            time.sleep(0.01)
    act(sock)
    return sock


def _hello_as_rank_0(sock: socket.socket) -> None:
    sock.sendall(_HELLO.pack(_MAGIC, JOB, 0, b"\0" * 16))


def test_an_impostor_from_another_address_is_refused_and_the_sum_is_exact() -> None:
    addresses = _addresses()
    ranks = Ranks(addresses)
    with _impostor("127.0.0.99", addresses[1], _hello_as_rank_0):
        assert ranks.exact()
    assert len(ranks.rings[1].refused) == 1 and "not the address of rank 0" in \
        ranks.rings[1].refused[0]


def test_an_impostor_from_the_predecessors_address_without_the_key_is_refused() -> None:
    addresses = _addresses()
    ranks = Ranks(addresses)

    def guess(sock: socket.socket) -> None:
        _hello_as_rank_0(sock)
        sock.recv(48)  # the challenge
        sock.sendall(b"\0" * 32)  # a proof it cannot compute

    with _impostor(addresses[0][0], addresses[1], guess):
        assert ranks.exact()
    assert ["wrong proof" in why for why in ranks.rings[1].refused] == [True]


def test_an_impostor_sending_a_huge_length_first_is_refused_and_the_sum_is_exact() -> None:
    addresses = _addresses()
    ranks = Ranks(addresses)

    def huge(sock: socket.socket) -> None:  # as the ring's data messages began before
        sock.sendall(struct.pack("!?Q", False, 2**62) + b"\xff" * 64)

    with _impostor(addresses[0][0], addresses[1], huge):
        assert ranks.exact()
    assert ["not rank 0 of this ring" in why for why in ranks.rings[1].refused] == [True]


def test_a_connection_that_says_nothing_is_dropped_and_the_ring_still_forms(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ring_module, "HANDSHAKE_TIMEOUT", 0.2)
    addresses = _addresses()
    ranks = Ranks(addresses)
    with _impostor(addresses[0][0], addresses[1], lambda sock: None):
        assert ranks.exact()
    assert ["no valid handshake" in why for why in ranks.rings[1].refused] == [True]


def test_ranks_with_different_secrets_do_not_form_a_ring() -> None:
    addresses = _addresses()
    rings = [Ring(r, addresses[:2], timeout=2, tag=JOB, secret=SECRET if r else b"other")
             for r in range(2)]
    errors: list[BaseException] = []

    def run(ring: Ring) -> None:
        try:
            ring.open()
        except OSError as exc:
            errors.append(exc)
        finally:
            ring.close()

    threads = [threading.Thread(target=run, args=(ring,)) for ring in rings]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(errors) == 2 and any(isinstance(e, RingError) for e in errors)


def _channels() -> tuple[_Channel, _Channel]:
    a, b = socket.socketpair()
    return _Channel(a, b"k" * 32), _Channel(b, b"k" * 32)


def test_a_message_larger_than_its_segment_ends_the_call_before_it_is_read() -> None:
    sender, receiver = _channels()
    sender.sock.sendall(struct.pack("!?Q", False, 2**62))  # and nothing more
    with pytest.raises(RingError, match="bytes for a segment of 4 values"):
        receiver.receive(4)


def test_a_message_whose_tag_is_wrong_ends_the_call() -> None:
    sender, receiver = _channels()
    sender._key = b"x" * 32  # as if someone else wrote into the connection
    sender.send(np.arange(4, dtype=np.int32), False)
    with pytest.raises(RingError, match="failed authentication"):
        receiver.receive(4)
