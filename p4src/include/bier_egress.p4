// BIER forwarding, egress half (RFC 8279 6.5 in one pass): each copy's BitString
// is ANDed with the F-BM of its port. F-BMs of different ports are disjoint, so
// every BFER gets one copy; copies left empty are pruned. A host port
// decapsulates and addresses the inner IPv4 packet to its host.
control BierEgress(inout headers_t hdr, inout metadata_t meta, in standard_metadata_t std) {
    action to_bfr(bitmap_t fbm, mac_addr_t smac, mac_addr_t dmac) {
        hdr.bier.bitstring = hdr.bier.bitstring & fbm;
        hdr.ethernet.src_addr = smac;
        hdr.ethernet.dst_addr = dmac;
        meta.bier_out = BIER_OUT_SENT;
    }

    action to_host(bitmap_t fbm, mac_addr_t smac, mac_addr_t dmac, ipv4_addr_t host_ip) {
        hdr.bier.bitstring = hdr.bier.bitstring & fbm;
        hdr.ethernet.src_addr = smac;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.dst_addr = host_ip;
        meta.bier_out = BIER_OUT_DELIVERED;
    }

    // A port with no F-BM must not get an unmasked copy.
    action prune() {
        meta.bier_out = BIER_OUT_PRUNED;
    }

    table bier_ports {
        key = { std.egress_port: exact @name("egress_port"); }
        actions = { to_bfr; to_host; @defaultonly prune; }
        const default_action = prune();
        size = MAX_PORTS;
    }

    apply {
        bier_ports.apply();
        if (hdr.bier.bitstring == 0) {
            meta.bier_out = BIER_OUT_PRUNED;
        } else if (meta.bier_out == BIER_OUT_DELIVERED) {
            hdr.bier.setInvalid();
            hdr.ethernet.ether_type = ETHERTYPE_IPV4;
        }
    }
}
