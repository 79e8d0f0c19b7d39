"""The worker's protocol logic: chunks, window, results, timeouts."""

import numpy as np
import pytest

from ina.constants import ELEMS_PER_PACKET, Flag, Op
from ina.wire import InaHeader, InaPacket, bit_of
from ina.worker import AllreduceSession, AllreduceTimeout, Worker, WorkerConfig

CONFIG = WorkerConfig(job_id=4, op=Op.SUM, pbm=bit_of(2), target="10.0.100.1", window=2)


def _result(seq: int, values: list[int], flags: Flag = Flag.RESULT, job_id: int = 4) -> bytes:
    header = InaHeader(job_id=job_id, seq=seq, pbm=0b11, count=len(values), flags=flags)
    return InaPacket(header, tuple(values)).pack()


def test_array_is_cut_into_packets_of_elems_per_packet() -> None:
    session = AllreduceSession(CONFIG, np.arange(ELEMS_PER_PACKET + 3), seq_base=10)
    packets = [InaPacket.unpack(p) for p in session.packets_to_send()]
    assert [(p.header.seq, p.header.count) for p in packets] == [(10, ELEMS_PER_PACKET), (11, 3)]
    assert packets[1].meaningful == (64, 65, 66) and packets[0].header.pbm == bit_of(2)


def test_window_limits_packets_in_flight() -> None:
    session = AllreduceSession(CONFIG, np.zeros(5 * ELEMS_PER_PACKET, dtype=np.int32))
    assert len(session.packets_to_send()) == 2
    assert session.packets_to_send() == []
    assert session.accept(_result(0, [0] * ELEMS_PER_PACKET))
    assert len(session.packets_to_send()) == 1


def test_results_fill_the_array_and_duplicates_are_ignored() -> None:
    session = AllreduceSession(CONFIG, np.array([1, 2, 3]))
    session.packets_to_send()
    assert session.accept(_result(0, [9, 8, 7]))
    assert not session.accept(_result(0, [0, 0, 0]))
    assert session.done and session.outcome().values.tolist() == [9, 8, 7]


def test_packets_of_other_jobs_and_non_results_are_ignored() -> None:
    session = AllreduceSession(CONFIG, np.array([1]))
    session.packets_to_send()
    assert not session.accept(_result(0, [5], job_id=5))
    assert not session.accept(_result(0, [5], flags=Flag.NONE))
    assert not session.accept(b"junk")
    assert not session.done


def test_overflow_flag_reaches_the_outcome() -> None:
    session = AllreduceSession(CONFIG, np.array([1]))
    session.packets_to_send()
    session.accept(_result(0, [5], flags=Flag.RESULT | Flag.OVERFLOW))
    assert session.outcome().overflow


def test_values_outside_int32_are_refused() -> None:
    with pytest.raises(ValueError, match="signed 32 bits"):
        AllreduceSession(CONFIG, np.array([2**31]))


class _SilentTransport:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, payload: bytes) -> None:
        self.sent.append(payload)

    def recv(self, timeout: float) -> bytes | None:
        return None


def test_worker_without_results_times_out_with_a_clear_error() -> None:
    transport = _SilentTransport()
    worker = Worker(CONFIG, transport, timeout=0.05)
    with pytest.raises(AllreduceTimeout, match="no result within 0.05s for 1 of 1 packets"):
        worker.allreduce([1, 2, 3])
    assert len(transport.sent) == 1


def test_sequence_numbers_continue_across_calls() -> None:
    class Echo(_SilentTransport):
        """Answers each packet with a result carrying the same values."""

        def recv(self, timeout: float) -> bytes | None:
            if not self.sent:
                return None
            pkt = InaPacket.unpack(self.sent.pop())
            return _result(pkt.header.seq, list(pkt.meaningful))

    worker = Worker(CONFIG, Echo(), timeout=1)
    assert worker.allreduce([1]).values.tolist() == [1]
    worker.allreduce([2])
    assert worker.next_seq == 2


def test_a_chunk_without_result_is_sent_again_with_backoff() -> None:
    session = AllreduceSession(CONFIG, np.array([1]), rto=0.5)
    first = session.packets_to_send(now=0.0)
    assert session.packets_to_send(now=0.4) == []
    assert session.packets_to_send(now=0.5) == first
    assert session.next_timer() == 1.5  # the second retry waits twice as long
    assert session.packets_to_send(now=1.5) == first
    assert session.retransmissions == 2


def test_the_window_slides_only_past_results() -> None:
    # Window 2: chunk 2 waits for chunk 0's result, even when chunk 1's is in.
    session = AllreduceSession(CONFIG, np.zeros(4 * ELEMS_PER_PACKET, dtype=np.int32))
    assert len(session.packets_to_send()) == 2
    session.accept(_result(1, [0] * ELEMS_PER_PACKET))
    assert session.packets_to_send() == []
    session.accept(_result(0, [0] * ELEMS_PER_PACKET))
    assert [InaPacket.unpack(p).header.seq for p in session.packets_to_send()] == [2, 3]
