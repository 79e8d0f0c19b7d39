// The controller's packet-out header on CPU_PORT; Ethernet, then BIER (RFC 8296)
// or IPv4; UDP to INA_UDP_PORT carries INA (a link probe is Ethernet alone).
// A header cut short stops here with error.PacketTooShort; ingress drops it.
#ifndef INA_PARSER_P4
#define INA_PARSER_P4

parser InaParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t std) {
    state start {
        transition select(std.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }

    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_BIER: parse_bier;
            default: accept;
        }
    }

    state parse_bier {
        packet.extract(hdr.bier);
        transition select(hdr.bier.proto) {
            BIER_PROTO_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        // Options are not parsed; ingress refuses such packets.
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (5, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            INA_UDP_PORT: parse_ina;
            default: accept;
        }
    }

    // A call's SYNC and its REPLY carry no array (their count is the worker's nonce),
    // nor does a NODATA packet (a worker's bit alone, a cell without data, a completion).
    state parse_ina {
        packet.extract(hdr.ina);
        transition select(hdr.ina.flags) {
            FLAG_SYNC &&& FLAG_SYNC: accept;
            FLAG_NODATA &&& FLAG_NODATA: accept;
            default: parse_data;
        }
    }

    state parse_data {
        packet.extract(hdr.data);
        transition accept;
    }
}

#endif
