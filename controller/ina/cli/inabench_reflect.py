"""The host benchmark's other end (``inabench reflect``, hidden): a process that
answers INA packets as a root would, for ina.bench.allreduce's reflector."""

from __future__ import annotations

import socket
import time

from ina.host import mmsg
from ina.protocol.constants import INA_UDP_PORT, Flag

# --- The host benchmark's other end --------------------------------------------------------


def reflect(address: str, gap: float = 0.0) -> None:
    """Answer every INA packet sent to ``address`` as a root would: SYNCs with
    their proposal (as a root answers the first SYNC of a plan), contributions with
    themselves as the result (the host benchmark's other end,
    ina.bench.allreduce.host_rate). In batches (recvmmsg, sendmmsg) where the system
    has them, so that the reflector is not what the benchmark measures; or, with a
    ``gap``, one at a time at least ``gap`` seconds apart, as a CPU-bound switch
    answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind((address, INA_UDP_PORT))
        print("ready", flush=True)
        if gap <= 0 and mmsg.available():
            _reflect_batched(mmsg.Datagrams(sock))
        due = 0.0
        while True:
            data, sender = sock.recvfrom(65535)
            packet = bytearray(data)
            packet[1] |= answer_flag(packet[1])
            if gap > 0:
                due = max(due + gap, time.monotonic())
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
            sock.sendto(packet, sender)


def answer_flag(flags: int) -> int:
    """The flag a root's answer adds to a packet with ``flags``: REPLY to a SYNC,
    RESULT to a contribution."""
    return _REPLY if flags & _SYNC else _RESULT


_SYNC, _REPLY, _RESULT = int(Flag.SYNC), int(Flag.REPLY), int(Flag.RESULT)


def _reflect_batched(batch: mmsg.Datagrams) -> None:
    """``reflect``'s loop a batch at a time: each received slot edited in place and
    sent back to its sender."""
    buffer, slot = batch.buffer, batch.slot_bytes
    while True:
        n = batch.receive(wait=True)
        for i in range(n):
            at = i * slot + 1
            buffer[at] |= answer_flag(buffer[at])
        batch.reflect(n)
