"""BIER forwarding state (RFC 8279) computed for Figure 1 and checked by hand."""

from ina.protocol.bitmaps import format_bitmap
from ina.spec.bier import bift, port_fbms
from ina.spec.topology import Topology


def _fbm_text(topology: Topology, switch: str) -> dict[str, str]:
    """F-BM per neighbour, in the draft's notation (w1 leftmost)."""
    ports = topology.ports(switch)
    return {ports[p].node: format_bitmap(f, 8) for p, f in port_fbms(topology, switch).items()}


def test_figure1_fbms_match_a_hand_derived_table(figure1: Topology) -> None:
    # Derived by hand from the drawing: each neighbour's F-BM is the set of
    # servers reached through it.
    expected = {
        "s7": {"s5": "11110000", "s6": "00001111"},
        "s5": {"s7": "00001111", "s1": "11000000", "s2": "00110000"},
        "s6": {"s7": "11110000", "s3": "00001100", "s4": "00000011"},
        "s1": {"s5": "00111111", "w1": "10000000", "w2": "01000000"},
        "s2": {"s5": "11001111", "w3": "00100000", "w4": "00010000"},
        "s3": {"s6": "11110011", "w5": "00001000", "w6": "00000100"},
        "s4": {"s6": "11111100", "w7": "00000010", "w8": "00000001"},
    }
    assert {sw: _fbm_text(figure1, sw) for sw in expected} == expected


def test_figure1_bift_rows_name_the_neighbour_toward_each_bfer(figure1: Topology) -> None:
    rows = {r.bfr_id: (r.neighbor, format_bitmap(r.fbm, 8)) for r in bift(figure1, "s5")}
    assert rows[1] == ("s1", "11000000")
    assert rows[3] == ("s2", "00110000")
    assert rows[8] == ("s7", "00001111")


def test_fbms_of_each_switch_are_disjoint_and_cover_every_bfer(figure1: Topology) -> None:
    everyone = (1 << 8) - 1
    for sw in figure1.switches:
        fbms = list(port_fbms(figure1, sw).values())
        union = 0
        for f in fbms:
            assert union & f == 0, sw
            union |= f
        assert union == everyone, sw
