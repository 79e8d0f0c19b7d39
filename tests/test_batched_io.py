"""Batched datagram I/O (ina.host.mmsg, UdpTransport's send_many and recv_many) and the
host benchmark's batched reflector: they carry exactly the datagrams that one sendto
or recvfrom each would, in order, and drop what a full queue refuses as a plain send
does."""

from __future__ import annotations

import ctypes
import errno
import itertools
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ina.bench.allreduce import wake_floor
from ina.bench.hostloop import reflector
from ina.host import mmsg
from ina.host.transport import BatchTransport, OneByOne, SharedTransport, UdpTransport, batched
from ina.protocol.codec import InaHeader
from ina.protocol.constants import INA_PAYLOAD_BYTES, INA_UDP_PORT, Flag

needs_mmsg = pytest.mark.skipif(not mmsg.available(), reason="no sendmmsg/recvmmsg here")
#: The reflector is compiled (ina.bench.hostloop).
needs_cc = pytest.mark.skipif(shutil.which("cc") is None,
                              reason="the reflector needs a C compiler: apt-get install gcc")
_PORTS = itertools.count(29100)


def _pair() -> tuple[UdpTransport, UdpTransport]:
    """Two transports on loopback addresses, each sending to the other."""
    port = next(_PORTS)
    return (UdpTransport("127.0.0.4", bind="127.0.0.3", port=port),
            UdpTransport("127.0.0.3", bind="127.0.0.4", port=port))


def _payloads(n: int) -> list[bytes]:
    """Datagrams of many lengths, each telling its index."""
    return [i.to_bytes(4, "big") + bytes([i % 251]) * (i * 37 % INA_PAYLOAD_BYTES)
            for i in range(n)]


def _drain(transport: UdpTransport, n: int, batches: bool) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 5
    while len(got) < n and time.monotonic() < deadline:
        if batches:
            got += transport.recv_many(0.5)
        else:
            payload = transport.recv(0.5)
            if payload is not None:
                got.append(payload)
    return got


@pytest.fixture
def pair() -> Iterator[tuple[UdpTransport, UdpTransport]]:
    a, b = _pair()
    with a, b:
        yield a, b


def test_a_udp_transport_sends_and_receives_in_batches(
        pair: tuple[UdpTransport, UdpTransport]) -> None:
    a, _ = pair
    assert isinstance(a, BatchTransport)
    assert batched(a) is a


@pytest.mark.parametrize("batches", [False, True])
def test_batches_carry_exactly_the_datagrams_of_one_send_and_recv_each(
        pair: tuple[UdpTransport, UdpTransport], batches: bool) -> None:
    a, b = pair
    sent = _payloads(200)  # more than a batch: several system calls each way
    if batches:
        a.send_many(sent)
    else:
        for payload in sent:
            a.send(payload)
    assert _drain(b, len(sent), batches) == sent


@needs_mmsg
def test_a_batch_received_holds_at_most_a_batch_and_a_short_one_what_is_queued(
        pair: tuple[UdpTransport, UdpTransport]) -> None:
    a, b = pair
    sent = _payloads(mmsg.BATCH + 5)
    a.send_many(sent)
    time.sleep(0.05)
    first = b.recv_many(1.0)
    assert first == sent[: mmsg.BATCH]
    assert b.recv_many(1.0) == sent[mmsg.BATCH:]  # the short batch: what was left
    assert b.recv_many(0.0) == []


def test_a_batch_received_waits_up_to_its_timeout_for_the_first_datagram(
        pair: tuple[UdpTransport, UdpTransport]) -> None:
    _, b = pair
    started = time.monotonic()
    assert b.recv_many(0.05) == []
    assert 0.04 <= time.monotonic() - started < 1.0


def test_a_batch_goes_to_the_address_it_is_sent_to(
        pair: tuple[UdpTransport, UdpTransport]) -> None:
    a, b = pair
    a.send_many([b"x"], dst="127.0.0.4")
    a.send_many([b"y"])  # the target again
    assert _drain(b, 2, batches=True) == [b"x", b"y"]


@needs_mmsg
def test_a_datagram_longer_than_a_slot_is_cut_to_it(
        pair: tuple[UdpTransport, UdpTransport]) -> None:
    a, b = pair
    a.send(bytes(range(256)) * 20)  # 5120 bytes
    got = _drain(b, 1, batches=True)
    assert got == [(bytes(range(256)) * 20)[: mmsg.SLOT_BYTES]]


def test_a_payload_longer_than_a_slot_is_sent_whole_and_in_order(
        pair: tuple[UdpTransport, UdpTransport]) -> None:
    a, b = pair
    sent = [b"first", bytes(range(256)) * 12, b"last"]
    a.send_many(sent)
    assert _drain(b, 3, batches=False) == sent  # recvfrom: nothing cut


class _FakeLibc:
    """sendmmsg that takes ``steps`` in turn: a count of messages sent, or an errno."""

    def __init__(self, steps: list[int | str]):
        self.steps = steps
        self.calls: list[int] = []  # messages offered to each call

    def sendmmsg(self, fd: int, msgs: int, n: int, flags: int) -> int:
        self.calls.append(n)
        step = self.steps.pop(0)
        if isinstance(step, str):
            ctypes.set_errno(getattr(errno, step))
            return -1
        return min(step, n)


@needs_mmsg
@pytest.mark.parametrize("error", ["EAGAIN", "ENOBUFS"])
def test_a_datagram_refused_on_a_full_queue_is_dropped_and_the_rest_sent(
        pair: tuple[UdpTransport, UdpTransport], monkeypatch: Any, error: str) -> None:
    a, _ = pair
    assert a.batch is not None
    fake = _FakeLibc([2, error, 10])
    monkeypatch.setattr(a.batch, "libc", fake)
    assert a.batch.send(_payloads(6), ("127.0.0.4", 1)) == 5
    assert fake.calls == [6, 4, 3]  # 2 sent, the third dropped, the last 3 sent


@needs_mmsg
def test_a_full_send_buffer_is_waited_for_within_the_sockets_timeout_as_sendto_does(
        pair: tuple[UdpTransport, UdpTransport], monkeypatch: Any) -> None:
    a, _ = pair
    assert a.batch is not None
    a.sock.settimeout(0.5)  # as after a recv with a timeout: sendto would wait for room
    fake = _FakeLibc([2, "EAGAIN", 10])
    monkeypatch.setattr(a.batch, "libc", fake)
    assert a.batch.send(_payloads(6), ("127.0.0.4", 1)) == 6  # none dropped
    assert fake.calls == [6, 4, 4]


@needs_mmsg
def test_a_send_error_other_than_a_full_queue_is_raised(
        pair: tuple[UdpTransport, UdpTransport], monkeypatch: Any) -> None:
    a, _ = pair
    assert a.batch is not None
    monkeypatch.setattr(a.batch, "libc", _FakeLibc(["EINTR", "EHOSTUNREACH"]))
    with pytest.raises(OSError) as raised:
        a.batch.send(_payloads(3), ("127.0.0.4", 1))
    assert raised.value.errno == errno.EHOSTUNREACH


class _Scripted:
    """A transport that records its calls and hands out scripted payloads."""

    def __init__(self, received: list[bytes | None]):
        self.received = received
        self.calls: list[tuple[str, Any]] = []

    def send(self, payload: bytes, dst: str | None = None) -> None:
        self.calls.append(("send", payload))

    def recv(self, timeout: float) -> bytes | None:
        self.calls.append(("recv", timeout))
        return self.received.pop(0)


def test_a_transport_without_batches_sees_one_call_per_datagram() -> None:
    raw = _Scripted([b"r1", None])
    io = batched(raw)
    assert isinstance(io, OneByOne)
    io.send_many([b"a", b"b"])
    assert io.recv_many(0.5) == [b"r1"]
    assert io.recv_many(0.0) == []
    assert raw.calls == [("send", b"a"), ("send", b"b"), ("recv", 0.5), ("recv", 0.0)]


def _answered(flags: int) -> int:
    """The flags a root's answer carries for a packet with ``flags``: REPLY added to
    a SYNC, RESULT to a contribution (NODATA's too)."""
    return flags | int(Flag.REPLY if flags & Flag.SYNC else Flag.RESULT)


def _reflected(address: str, packets: int, gap: float = 0.0) -> tuple[int, float]:
    """A burst of ``packets`` sent to a reflector on ``address`` (answering one a
    ``gap``), each answered as a root would (checked): (answers, seconds from the
    first send to the last answer)."""
    with reflector(gap, address), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(5)
        kinds = (Flag.SYNC, Flag.NONE, Flag.SYNC | Flag.ABORT, Flag.NODATA)
        sent = [InaHeader(job_id=1, seq=i, pbm=1, count=1, flags=kinds[i % len(kinds)]
                          ).pack() + bytes(8) for i in range(packets)]
        started = time.monotonic()
        for packet in sent:
            sock.sendto(packet, (address, INA_UDP_PORT))
        got = [sock.recv(2048) for _ in sent]
        took = time.monotonic() - started
    for packet, answer in zip(sent, got, strict=True):
        assert answer[1] == _answered(packet[1])
        assert answer[:1] + answer[2:] == packet[:1] + packet[2:]
    return len(got), took


@needs_cc
def test_the_reflector_answers_every_packet_of_a_burst() -> None:
    assert _reflected("127.0.0.5", 300)[0] == 300


@needs_cc
def test_a_paced_reflector_answers_a_burst_one_packet_a_gap() -> None:
    """As a CPU-bound switch: never two answers within the gap (the burst takes at
    least a gap per answer after the first), every one answered."""
    answers, took = _reflected("127.0.0.6", 20, gap=0.01)
    assert answers == 20 and took >= 19 * 0.01


@needs_cc
def test_the_wake_floor_loop_has_every_packet_answered_one_a_gap() -> None:
    """inabench host's floor: every packet answered (it raises on a silence of a
    second), paced by the reflector's gap, its CPU per packet measured."""
    floor = wake_floor(packets=40, gap=0.002, address="127.0.0.7")
    assert floor.packets_per_s <= 1 / 0.002 * 1.05
    assert floor.cpu_us_per_packet is not None and floor.cpu_us_per_packet > 0


def test_a_jobs_view_of_a_shared_transport_sends_in_its_batches_and_receives_its_own(
        pair: tuple[UdpTransport, UdpTransport]) -> None:
    a, b = pair
    shared = SharedTransport(b)
    view = shared.view(3)
    assert isinstance(view, BatchTransport)
    sent = [InaHeader(job_id=job, seq=i, pbm=1, count=1).pack() for i, job in
            enumerate([3, 4, 3])]
    a.send_many(sent)
    assert _received(view, 2) == [sent[0], sent[2]]  # job 4's has no view: a stray
    assert shared.strays == 1
    view.send_many([b"one", b"two"])
    assert _drain(a, 2, batches=True) == [b"one", b"two"]


def test_a_jobs_view_takes_every_packet_another_view_queued_for_it_in_one_batch(
        pair: tuple[UdpTransport, UdpTransport]) -> None:
    a, b = pair
    shared = SharedTransport(b)
    three, four = shared.view(3), shared.view(4)
    sent = [InaHeader(job_id=job, seq=i, pbm=1, count=1).pack() for i, job in
            enumerate([3, 4, 3, 4, 3, 4])]
    a.send_many(sent)
    # Job 4's last packet comes after every one of job 3's: read, they are queued.
    assert _received(four, 3) == sent[1::2]
    assert three.recv_many(0.0) == sent[0::2]


def _received(view: BatchTransport, count: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < count:
        batch = view.recv_many(1.0)
        assert batch, f"{len(got)} of {count} received"
        got += batch
    return got


def test_threads_sending_batches_through_one_transport_do_not_mix_their_datagrams(
        pair: tuple[UdpTransport, UdpTransport]) -> None:
    a, b = pair
    batches = [[bytes([t]) * 600 + i.to_bytes(2, "big") for i in range(250)] for t in range(4)]

    def send(payloads: list[bytes]) -> None:
        for lo in range(0, len(payloads), 50):
            a.send_many(payloads[lo: lo + 50])

    threads = [threading.Thread(target=send, args=(p,)) for p in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = _drain(b, 1000, batches=True)
    assert sorted(got) == sorted(p for ps in batches for p in ps)
    for ps in batches:  # each thread's in its order
        assert [p for p in got if p[0] == ps[0][0]] == ps
