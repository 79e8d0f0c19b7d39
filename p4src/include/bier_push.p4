// An RFC 8296 header in front of the packet's IPv4 one, BitString bits in set si:
// a root's result (aggregation.p4) and a worker's own values (ingress.p4) alike.
// BFIR-id 0: the BFIR is a switch, not a host with a BFR-id.
#ifndef INA_BIER_PUSH_P4
#define INA_BIER_PUSH_P4

void bier_push(inout headers_t hdr, in bit<8> si, in bitmap_t bits) {
    hdr.bier.setValid();
    hdr.bier.bift_id = BIER_BIFT_ID + (bit<20>)si;
    hdr.bier.tc = 0;
    hdr.bier.s = 1;
    hdr.bier.ttl = BIER_INITIAL_TTL;
    hdr.bier.nibble = BIER_NIBBLE;
    hdr.bier.version = BIER_VERSION;
    hdr.bier.bsl = BIER_BSL_CODE;
    hdr.bier.entropy = 0;
    hdr.bier.oam = 0;
    hdr.bier.rsv = 0;
    hdr.bier.dscp = 0;
    hdr.bier.proto = BIER_PROTO_IPV4;
    hdr.bier.bfir_id = 0;
    hdr.bier.bitstring = bits;
    hdr.ethernet.ether_type = ETHERTYPE_BIER;
}

#endif
