"""The Wireshark dissector (tools/wireshark/ina.lua) decodes the frames the project
builds: a worker's contribution over IPv4/UDP, a SYNC, and a result in RFC 8296
BIER (marked as congested: version 5's ecn), each field to the value it was
built with; display filters select by its
fields. (Its generated tables are checked against the constants in test_codegen.)
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from ina.protocol.bitmaps import bit_of, join_set
from ina.protocol.codec import InaHeader, ina_payload, nodata_payload
from ina.protocol.constants import (
    BIER_BIFT_ID,
    BIER_PROTO_IPV4,
    BITSTRING_BYTES,
    INA_HEADER_BYTES,
    INA_VERSION,
    Ecn,
    Flag,
    Op,
)
from ina.protocol.frames import Bier, bier_frame, ina_frame, udp_frame

from inatest import NO_TSHARK, TSHARK, dissect

pytestmark = pytest.mark.skipif(TSHARK is None, reason=NO_TSHARK)



class Payload(NamedTuple):
    """What ina_payload builds a worker's (or a root's) packet from."""

    job: int
    seq: int
    pbm: int  # over all sets
    values: list[int]
    op: Op = Op.SUM
    flags: Flag = Flag.NONE
    width: int = 32
    dest: int = 0
    ecn: Ecn = Ecn.NONE

    def pack(self) -> bytes:
        if self.flags & Flag.NODATA:
            payload = nodata_payload(self.job, self.seq, self.pbm, len(self.values), self.op,
                                     self.flags & ~Flag.NODATA, width=self.width,
                                     dest=self.dest)
        else:
            payload = ina_payload(self.job, self.seq, self.pbm, self.values, self.op,
                                  self.flags, width=self.width, dest=self.dest)
        header = replace(InaHeader.unpack(payload), ecn=self.ecn)
        return header.pack() + payload[INA_HEADER_BYTES:]


W1, W2, S1, S6 = (f"00:00:00:00:0{i}:0{i}" for i in (1, 2, 3, 4))
#: The frames of the capture, in order: what each was built with.
CONTRIBUTION = Payload(1, 42, bit_of(1), [7, -2, 2**31 - 1], Op.MAX)
SYNC = InaHeader(job_id=3, seq=9, pbm=bit_of(2), count=4242, flags=Flag.SYNC | Flag.ABORT,
                 gen=5)
RESULT_BIER = Bier(bitstring=0b1011, bift_id=BIER_BIFT_ID + 1, bfir_id=6, ttl=61)
RESULT = Payload(1, 42, join_set(1, 0b1011), [4, 8, 12], flags=Flag.RESULT, ecn=Ecn.CE)
#: Version 4: 16-bit elements for dest 3; a completion (NODATA) in BIER.
WIDE16 = Payload(2, 77, bit_of(1), [-(2**15), -1, 2**15 - 1], Op.MIN, width=16, dest=3)
COMPLETION = Payload(2, 77, bit_of(1) | bit_of(2), [0, 0, 0], Op.MIN,
                     Flag.RESULT | Flag.NODATA, width=16, dest=3)
FIELDS = ("ip.src", "ina.version", "ina.op", "ina.flags", "ina.flags.result",
          "ina.flags.sync", "ina.flags.abort", "ina.job", "ina.seq", "ina.count", "ina.si",
          "ina.gen", "ina.pbm", "ina.bfr_id", "ina.value", "ina.dest", "ina.width",
          "ina.value16", "ina.flags.nodata", "udp.length", "bier.bift_id", "bier.si",
          "bier.ttl", "bier.bsl", "bier.proto", "bier.bfir_id", "bier.bitstring",
          "bier.bfr_id", "ina.ecn", "ina.ecn.ce")


def _frames() -> list[bytes]:
    return [
        ina_frame(W1, S1, "10.0.0.1", "10.0.100.1", CONTRIBUTION.pack()),
        ina_frame(W2, S1, "10.0.0.2", "10.0.100.1", SYNC.pack()),
        bier_frame(S6, S1, "10.0.100.6", RESULT_BIER, RESULT.pack()),
        udp_frame(W1, S1, "10.0.0.1", "10.0.0.2", 5000, 5001, b"not INA"),
        ina_frame(W1, S1, "10.0.0.1", "10.0.100.1", WIDE16.pack()),
        bier_frame(S6, S1, "10.0.100.6", Bier(bitstring=0b11), COMPLETION.pack()),
    ]


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("wireshark")
    path = directory / "frames.pcap"
    wrpcap(str(path), [Ether(frame) for frame in _frames()])
    yield path
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def rows(capture: Path) -> list[dict[str, list[str]]]:
    return dissect(capture, FIELDS)


def _hex(bits: int) -> str:
    return bits.to_bytes(BITSTRING_BYTES, "big").hex()


def test_a_contribution_decodes_to_what_it_was_built_with(
        rows: list[dict[str, list[str]]]) -> None:
    row = rows[0]
    assert row["ip.src"] == ["10.0.0.1"]
    assert row["ina.version"] == [str(INA_VERSION)] and row["ina.op"] == [str(int(Op.MAX))]
    assert row["ina.ecn"] == ["0x00"] and row["ina.ecn.ce"] == ["0"]
    assert (row["ina.dest"], row["ina.width"], row["ina.value16"]) == (["0"], ["32"], [])
    assert row["ina.flags"] == ["0x00"] and row["ina.flags.result"] == ["0"]
    assert (row["ina.job"], row["ina.seq"], row["ina.count"]) == (["1"], ["42"], ["3"])
    assert (row["ina.si"], row["ina.gen"]) == (["0"], ["0"])
    assert row["ina.pbm"] == [_hex(1)] and row["ina.bfr_id"] == ["1"]
    assert row["ina.value"] == [str(v) for v in CONTRIBUTION.values]
    assert row["bier.bift_id"] == []


def test_a_sync_decodes_its_flags_and_carries_no_values(
        rows: list[dict[str, list[str]]]) -> None:
    row = rows[1]
    assert row["ina.flags"] == [f"0x{int(SYNC.flags):02x}"]
    assert row["ina.flags.sync"] == ["1"] and row["ina.flags.abort"] == ["1"]
    assert (row["ina.job"], row["ina.seq"], row["ina.count"], row["ina.gen"]) == \
        (["3"], ["9"], ["4242"], ["5"])
    assert row["ina.bfr_id"] == ["2"] and row["ina.value"] == []


def test_a_bier_result_decodes_the_bier_header_and_the_packet_inside(
        rows: list[dict[str, list[str]]]) -> None:
    row = rows[2]
    assert row["bier.bift_id"] == [str(RESULT_BIER.bift_id)] and row["bier.si"] == ["1"]
    assert row["bier.ttl"] == ["61"] and row["bier.bfir_id"] == ["6"]
    assert row["bier.bsl"] == [str(RESULT_BIER.bsl)]
    assert row["bier.proto"] == [str(BIER_PROTO_IPV4)]
    assert row["bier.bitstring"] == [_hex(0b1011)]
    assert row["bier.bfr_id"] == ["257", "258", "260"]  # set 1: BFR-ids 257..512
    assert row["ip.src"] == ["10.0.100.6"] and row["ina.flags.result"] == ["1"]
    assert row["ina.si"] == ["1"] and row["ina.bfr_id"] == ["257", "258", "260"]
    assert row["ina.value"] == [str(v) for v in RESULT.values]
    assert row["ina.ecn"] == ["0x01"] and row["ina.ecn.ce"] == ["1"]  # marked as congested


def test_16_bit_values_decode_as_such(rows: list[dict[str, list[str]]]) -> None:
    row = rows[4]
    assert (row["ina.dest"], row["ina.width"], row["ina.count"]) == (["3"], ["16"], ["3"])
    assert row["ina.value16"] == [str(v) for v in WIDE16.values] and row["ina.value"] == []


def test_a_completion_is_the_header_alone(rows: list[dict[str, list[str]]]) -> None:
    row = rows[5]
    assert row["ina.flags.nodata"] == ["1"] and row["ina.flags.result"] == ["1"]
    assert row["ina.value"] == [] and row["ina.value16"] == []
    assert row["udp.length"] == [str(8 + INA_HEADER_BYTES)] and row["ina.dest"] == ["3"]


def test_a_frame_of_another_udp_port_is_not_taken_for_ina(
        rows: list[dict[str, list[str]]]) -> None:
    assert rows[3]["ip.src"] == ["10.0.0.1"] and rows[3]["ina.job"] == []


@pytest.mark.parametrize("display_filter,seqs", [
    ("ina.flags.result == 1", ["42", "77"]),  # a flag's field is in every packet: test its value
    ("ina.job == 3", ["9"]),
    ("bier.si == 1 && ina.value == 8", ["42"]),
    ("ina && !bier", ["42", "9", "77"]),
    ("ina.flags.nodata == 1", ["77"]),
    ("ina.width == 16", ["77", "77"]),
    ("ina.ecn.ce == 1", ["42"]),
])
def test_display_filters_select_frames_by_the_dissectors_fields(
        capture: Path, display_filter: str, seqs: list[str]) -> None:
    assert [r["ina.seq"][0] for r in dissect(capture, ["ina.seq"], display_filter)] == seqs
