"""The INA header and RFC 8296 BIER header: encodings and round trips."""

from dataclasses import replace

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from ina.protocol.bitmaps import bfr_ids_of, bit_of, format_bitmap, join_set, set_of, split_sets
from ina.protocol.codec import InaHeader, InaPacket, ina_payload, nodata_payload
from ina.protocol.constants import (
    BIER_BIFT_ID,
    BIER_HEADER_LAYOUT,
    ELEMS16_PER_PACKET,
    ELEMS_PER_PACKET,
    INA_HEADER_BYTES,
    INA_HEADER_LAYOUT,
    INA_PAYLOAD_BYTES,
    INA_UDP_PORT,
    INA_VERSION,
    MAX_BFR_ID,
    Ecn,
    Flag,
    Op,
)
from ina.protocol.frames import Bier, bier_frame, ina_frame, parse_frame
from ina.protocol.scapy_layers import BIER, INA, ecn_names, flag_names


def test_ina_payload_round_trips_with_negative_values() -> None:
    values = [-(2**31), -1, 0, 1, 2**31 - 1]
    payload = ina_payload(7, 123456, bit_of(3), values, Op.MIN, Flag.OVERFLOW)
    pkt = InaPacket.unpack(payload)
    assert len(payload) == INA_PAYLOAD_BYTES
    assert pkt.header == InaHeader(job_id=7, seq=123456, pbm=0b100, count=5, op=Op.MIN,
                                   flags=Flag.OVERFLOW)
    assert pkt.meaningful == tuple(values)
    assert set(pkt.values[5:]) == {0}


def test_ina_header_matches_the_scapy_layer() -> None:
    payload = ina_payload(513, 2**32 - 1, bit_of(256) | bit_of(1), [5, -6], Op.MAX)
    dissected = INA(payload)
    header = (dissected.job_id, dissected.seq, dissected.count, dissected.op)
    assert header == (513, 2**32 - 1, 2, 3)
    assert dissected.pbm == (1 << 255) | 1
    assert dissected.values[:2] == [5, -6]
    assert raw(dissected) == payload


def test_bier_header_matches_rfc8296_layout() -> None:
    header = Bier(bitstring=bit_of(1) | bit_of(4), ttl=9, bfir_id=77)
    encoded = header.pack()
    # Nibble 0101, version 0, BSL 3 (256 bits) open the second word.
    assert encoded[4] == 0x50 and encoded[5] >> 4 == 3
    assert Bier.unpack(encoded) == header
    assert raw(BIER(bitstring=0b1001, ttl=9, bfir_id=77)) == encoded


def test_bitmaps_use_rfc8279_bit_order() -> None:
    assert bit_of(1) == 1 and bit_of(8) == 0x80
    assert bfr_ids_of(bit_of(2) | bit_of(5)) == [2, 5]
    # The draft prints w1 leftmost: 11000000 is w1 and w2.
    assert format_bitmap(bit_of(1) | bit_of(2), 8) == "11000000"


def test_parse_frame_reads_what_scapy_builds() -> None:
    pkt = (Ether(src="00:00:00:00:00:01", dst="02:00:00:00:00:01")
           / IP(src="10.0.0.1", dst="10.0.100.1")
           / UDP(sport=INA_UDP_PORT, dport=INA_UDP_PORT)
           / INA(job_id=2, seq=5, count=1, pbm=1, values=[42] + [0] * 63))
    frame = parse_frame(raw(pkt))
    assert frame.error is None
    assert frame.ina is not None and frame.ina.job_id == 2
    assert frame.values is not None and frame.values[0] == 42
    assert frame.pack() == raw(pkt)


def test_truncated_array_is_a_parser_error() -> None:
    full = ina_frame("00:00:00:00:00:01", "02:00:00:00:00:01", "10.0.0.1", "10.0.100.1",
                     ina_payload(1, 0, 1, [1, 2, 3]))
    frame = parse_frame(full[:-8])
    assert frame.error == "PacketTooShort"
    assert frame.ina is not None and frame.values is None


def test_bitmaps_over_all_sets_split_into_one_bitstring_per_set() -> None:
    bitmap = bit_of(1) | bit_of(256) | bit_of(257) | bit_of(1024)
    assert split_sets(bitmap) == {0: bit_of(1) | bit_of(256), 1: 1, 3: 1 << 255}
    assert sum(join_set(si, bits) for si, bits in split_sets(bitmap).items()) == bitmap
    assert set_of(256) == 0 and set_of(257) == 1


def test_a_bitmap_beyond_the_last_set_is_refused() -> None:
    with pytest.raises(ValueError, match="BFR-id"):
        bit_of(MAX_BFR_ID + 1)
    with pytest.raises(ValueError, match="beyond BFR-id"):
        split_sets(1 << MAX_BFR_ID)


def test_a_worker_in_set_1_sends_its_set_and_its_bit_in_it() -> None:
    header = InaPacket.unpack(ina_payload(3, 0, bit_of(258), [1])).header
    assert (header.si, header.pbm) == (1, 0b10)
    assert INA(ina_payload(3, 0, bit_of(258), [1])).si == 1


def test_a_contribution_spanning_two_sets_cannot_be_encoded() -> None:
    with pytest.raises(ValueError, match="spans 2 BIER sets"):
        ina_payload(3, 0, bit_of(1) | bit_of(257), [1])


def test_bier_bift_id_names_the_set() -> None:
    header = Bier.for_set(2, 0b1)
    assert header.bift_id == BIER_BIFT_ID + 2 and Bier.unpack(header.pack()).si == 2


def test_a_sync_is_an_ina_header_alone_in_scapy_and_in_the_parser() -> None:
    from ina.protocol.frames import ina_frame

    payload = InaHeader(job_id=3, seq=0, pbm=1, count=77, flags=Flag.SYNC).pack()
    frame = parse_frame(ina_frame("00:00:00:00:00:01", "02:00:00:00:00:01", "10.0.0.1",
                                  "10.0.100.6", payload))
    assert frame.error is None and frame.lanes is None and frame.ina is not None
    dissected = INA(payload)
    assert dissected.count == 77 and dissected.flags == Flag.SYNC
    assert raw(dissected) == payload


# --- scapy's one-line summaries (captures read with rdpcap) --------------------------

def _summary_of(frame: bytes) -> str:
    return str(Ether(frame).summary())


def test_an_ina_packet_summary_names_every_header_field_and_the_flags() -> None:
    header = InaHeader(job_id=1, seq=42, pbm=0b11, count=256, flags=Flag.RESULT | Flag.SYNC,
                       gen=1)
    frame = ina_frame("00:00:00:00:00:01", "00:00:00:00:01:00", "10.0.0.1", "10.0.100.1",
                      header.pack())
    assert _summary_of(frame).endswith(
        "/ INA job=1 seq=42 flags=RESULT|SYNC op=SUM count=256 si=0 gen=1 dest=0 width=32 "
        "ecn=NONE pbm=0x3")


def test_an_ina_packet_summary_shows_the_ip_addresses() -> None:
    frame = ina_frame("00:00:00:00:00:01", "00:00:00:00:01:00", "10.0.0.1", "10.0.100.1",
                      ina_payload(3, 7, bit_of(1), [1], Op.MAX))
    assert " 10.0.0.1 > 10.0.100.1 udp " in _summary_of(frame)


def test_no_flags_and_unknown_bits_are_shown_as_such() -> None:
    assert "flags=NONE " in INA(flags=0).summary()
    assert "flags=OVERFLOW|NODATA " in INA(flags=0x82).summary()
    # Every bit of the 8 is a flag since version 4 (NODATA); beyond them, a number.
    assert flag_names(0x182) == "OVERFLOW|NODATA|0x100"


def test_a_bier_result_summary_shows_the_bier_header_in_hex() -> None:
    bier = Bier.for_set(2, 0b1011_0000)
    bier.bfir_id = 5
    frame = bier_frame("00:00:00:00:01:00", "00:00:00:00:02:00", "10.0.100.6", bier,
                       ina_payload(1, 9, bit_of(513), [4], flags=Flag.RESULT))
    assert (f"BIER bift_id={BIER_BIFT_ID + 2:#x} si=2 bfir_id=5 bitstring=0xb0 "
            in _summary_of(frame))
    assert _summary_of(frame).endswith(
        "flags=RESULT op=SUM count=1 si=2 gen=0 dest=0 width=32 ecn=NONE pbm=0x1")


# --- the layouts the dissector is generated from --------------------------------------

def _fields_of(header: bytes, layout: tuple[tuple[str, int], ...]) -> dict[str, int]:
    value, left = int.from_bytes(header, "big"), 8 * len(header)
    fields = {}
    for name, bits in layout:
        left -= bits
        fields[name] = value >> left & ((1 << bits) - 1)
    return fields


def test_the_ina_header_layout_is_where_the_codec_writes_each_field() -> None:
    header = InaHeader(job_id=0x1234, seq=0x89ABCDEF, pbm=(1 << 255) | 5, count=0x0102,
                       op=Op.MIN, flags=Flag.RESULT | Flag.REPLAN, version=0xA, si=7, gen=0xFE,
                       dest=0x0F0E, width=16, ecn=Ecn(0x81))
    fields = _fields_of(header.pack(), INA_HEADER_LAYOUT)
    assert fields == {name: int(getattr(header, name)) for name, _ in INA_HEADER_LAYOUT}


def test_the_bier_header_layout_is_where_the_frames_write_each_field() -> None:
    bier = Bier(bitstring=(1 << 200) | 3, ttl=0x3C, bift_id=0xABCDE, tc=5, s=0, nibble=0x5,
                version=0x9, bsl=0x3, entropy=0x12345, oam=2, rsv=1, dscp=0x2A, proto=0x15,
                bfir_id=0xBEEF)
    fields = _fields_of(bier.pack(), BIER_HEADER_LAYOUT)
    assert fields == {name: getattr(bier, name) for name, _ in BIER_HEADER_LAYOUT}


# --- version 4: dest, width, NODATA -------------------------------------------------------

def test_a_16_bit_payload_round_trips_with_edge_values_and_dest() -> None:
    values = [-(2**15), -1, 0, 1, 2**15 - 1] * 100 + [5]  # 501 values
    payload = ina_payload(7, 9, bit_of(2), values, Op.SUM, width=16, dest=4096)
    assert len(payload) == INA_PAYLOAD_BYTES
    pkt = InaPacket.unpack(payload)
    assert pkt.header == InaHeader(job_id=7, seq=9, pbm=0b10, count=501, dest=4096, width=16)
    assert pkt.meaningful == tuple(values) and set(pkt.values[501:]) == {0}
    assert len(pkt.values) == ELEMS16_PER_PACKET
    assert InaPacket(pkt.header, pkt.values).pack() == payload


def test_payloads_refuse_what_the_switches_would() -> None:
    with pytest.raises(ValueError, match="16-bit"):
        ina_payload(1, 0, 1, [2**15], width=16)
    with pytest.raises(ValueError, match=f"1..{ELEMS16_PER_PACKET}"):
        ina_payload(1, 0, 1, [0] * (ELEMS16_PER_PACKET + 1), width=16)
    with pytest.raises(ValueError, match=f"1..{ELEMS_PER_PACKET}"):
        ina_payload(1, 0, 1, [0] * (ELEMS_PER_PACKET + 1))
    with pytest.raises(ValueError, match="32 or 16"):
        ina_payload(1, 0, 1, [0], width=8)
    with pytest.raises(ValueError, match="BFR-id"):
        ina_payload(1, 0, 1, [0], dest=MAX_BFR_ID + 1)
    with pytest.raises(ValueError, match=f"1..{ELEMS16_PER_PACKET}"):
        nodata_payload(1, 0, 1, 0, width=16)


def test_a_nodata_contribution_is_the_header_alone_everywhere() -> None:
    payload = nodata_payload(3, 11, bit_of(258), 300, Op.MAX, width=16, dest=2)
    assert len(payload) == INA_HEADER_BYTES
    pkt = InaPacket.unpack(payload)
    assert pkt.header == InaHeader(job_id=3, seq=11, pbm=0b10, si=1, count=300, op=Op.MAX,
                                   flags=Flag.NODATA, dest=2, width=16)
    assert pkt.values == () and pkt.pack() == payload and not pkt.header.has_array
    frame = parse_frame(ina_frame("00:00:00:00:00:01", "02:00:00:00:00:01", "10.0.0.1",
                                  "10.0.100.6", payload + b"junk"))
    assert frame.error is None and frame.lanes is None and frame.payload == b"junk"
    dissected = INA(payload)
    assert (dissected.flags, dissected.width, dissected.dest) == (Flag.NODATA, 16, 2)
    assert raw(dissected) == payload


def test_a_16_bit_packet_in_scapy_and_in_the_parser() -> None:
    values = list(range(-250, 250))
    payload = ina_payload(2, 5, bit_of(1), values, Op.MIN, width=16)
    dissected = INA(payload)
    assert dissected.width == 16 and dissected.values16[:500] == values
    assert raw(dissected) == payload
    assert raw(INA(job_id=2, seq=5, count=500, op=Op.MIN, pbm=1, width=16,
                   values16=values)) == payload
    frame = parse_frame(ina_frame("00:00:00:00:00:01", "02:00:00:00:00:01", "10.0.0.1",
                                  "10.0.100.6", payload))
    assert frame.values is not None and list(frame.values[:500]) == values
    assert frame.pack()[-INA_PAYLOAD_BYTES:] == payload


def test_the_new_fields_follow_gen_before_the_pbm() -> None:
    header = InaHeader(job_id=1, seq=2, pbm=1, count=3, gen=4, dest=0x0506, width=16,
                       ecn=Ecn.CE)
    packed = header.pack()
    assert packed[11:16] == bytes([4, 5, 6, 16, 1]) and len(packed) == INA_HEADER_BYTES == 48
    assert packed[16:] == (1).to_bytes(32, "big")
    assert InaHeader.unpack(packed) == header


# --- version 5: ecn, the congestion marks ----------------------------------------------

def test_version_5_carries_the_congestion_mark_in_the_byte_after_width() -> None:
    assert INA_VERSION >= 5
    payload = ina_payload(7, 9, bit_of(2), [1, 2, 3])
    assert InaPacket.unpack(payload).header.ecn == Ecn.NONE  # a worker sends none
    marked = replace(InaHeader.unpack(payload), ecn=Ecn.CE).pack() + payload[INA_HEADER_BYTES:]
    assert marked[15] == int(Ecn.CE) and marked[:15] == payload[:15]
    assert InaPacket.unpack(marked).header.ecn == Ecn.CE
    assert InaHeader.unpack(bytes(15) + b"\xff" + bytes(32)).ecn == 0xFF  # kept, unknown bits too


def test_the_congestion_mark_round_trips_through_scapy_and_the_parser() -> None:
    header = InaHeader(job_id=3, seq=5, pbm=0b1, count=2, flags=Flag.RESULT, ecn=Ecn.CE)
    payload = InaPacket(header, (4, 5)).pack()
    dissected = INA(payload)
    assert int(dissected.ecn) == int(Ecn.CE) and raw(dissected) == payload
    assert raw(INA(job_id=3, seq=5, pbm=1, count=2, flags=int(Flag.RESULT), ecn=1,
                   values=[4, 5])) == payload
    assert " ecn=CE pbm=0x1" in dissected.summary()
    frame = parse_frame(ina_frame("00:00:00:00:00:01", "02:00:00:00:00:01", "10.0.0.1",
                                  "10.0.100.6", payload))
    assert frame.ina == header and frame.pack()[-INA_PAYLOAD_BYTES:] == payload


def test_marks_are_shown_by_name_and_unknown_bits_as_a_number() -> None:
    assert (ecn_names(0), ecn_names(1), ecn_names(0x81)) == ("NONE", "CE", "CE|0x80")


# --- version 6: five lanes (version 7 adds QUERY, same layout) ---------------------------

def test_version_6_packets_carry_320_values_in_five_lanes_and_fit_a_1500_byte_mtu() -> None:
    assert INA_VERSION in (6, 7)
    wide = ina_payload(1, 0, 1, list(range(320)))
    narrow = ina_payload(1, 0, 1, list(range(640)), width=16)
    assert len(wide) == len(narrow) == 48 + 5 * 2048 // 8
    assert InaPacket.unpack(wide).values[-1] == 319
    in_bier = bier_frame("00:00:00:00:01:00", "00:00:00:00:02:00", "10.0.100.6",
                         Bier.for_set(0, 0b11), wide)
    assert len(in_bier) - 14 == 44 + 20 + 8 + 48 + 1280 <= 1500  # Ethernet's payload
