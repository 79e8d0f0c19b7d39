// BIER forwarding, egress half (RFC 8279 6.5 in one pass): each copy's BitString
// is ANDed with the F-BM of its port in the packet's set. F-BMs of different
// ports are disjoint, so every BFER gets one copy; copies left empty are pruned.
// A host port decapsulates and addresses the inner IPv4 packet to its host.
//
// A root's result arrives as one copy per (port, set), the set as replication
// id: each copy first gets the job's A-BM in that set as its BitString.
//
// A packet whose dest names one worker (a BFR-id: bit (dest - 1) mod 256 of set
// (dest - 1) div 256) keeps its array only on copies whose BitString, after the
// port's F-BM, holds that bit; every other copy leaves as a completion: no array,
// NODATA, the IPv4 and UDP lengths shortened (the IPv4 checksum is recomputed on
// the way out), counted. With dest 0 every copy keeps its array.
#ifndef INA_BIER_EGRESS_P4
#define INA_BIER_EGRESS_P4

control BierEgress(inout headers_t hdr, inout metadata_t meta, in standard_metadata_t std) {
    action result_set(bitmap_t abm) {
        hdr.bier.bitstring = abm;
        hdr.bier.bift_id = BIER_BIFT_ID + (bit<20>)meta.bier_si;
        hdr.ina.si = meta.bier_si;
        hdr.ina.pbm = abm;
    }

    // The job has no worker in this copy's set.
    action no_result_set() {
        hdr.bier.bitstring = 0;
    }

    table result_sets {
        key = {
            hdr.ina.job_id: exact @name("job_id");
            meta.bier_si: exact @name("si");
        }
        actions = { result_set; @defaultonly no_result_set; }
        const default_action = no_result_set();
        size = MAX_JOBS * BIER_SETS;
    }

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

    // A port with no F-BM in this set must not get an unmasked copy.
    action prune() {
        meta.bier_out = BIER_OUT_PRUNED;
    }

    // Not toward dest: the copy leaves without its array.
    action cut_array() {
        hdr.data.setInvalid();
        hdr.ina.flags = hdr.ina.flags | FLAG_NODATA;
        hdr.ipv4.total_len = hdr.ipv4.total_len - ARRAY_BYTES;
        hdr.udp.length = hdr.udp.length - ARRAY_BYTES;
        hdr.udp.checksum = 0;
        meta.bier_out = meta.bier_out | BIER_OUT_COMPLETION;
    }

    // Not toward dest, and cut already (upstream), or a result without data.
    action completion() {
        meta.bier_out = meta.bier_out | BIER_OUT_COMPLETION;
    }

    table bier_ports {
        key = {
            std.egress_port: exact @name("egress_port");
            meta.bier_si: exact @name("si");
        }
        actions = { to_bfr; to_host; @defaultonly prune; }
        const default_action = prune();
        size = MAX_PORTS * BIER_SETS;
    }

    apply {
        if (meta.bier_result) {
            meta.bier_si = (bit<8>)std.egress_rid;
            result_sets.apply();
        } else {
            meta.bier_si = (bit<8>)(hdr.bier.bift_id - BIER_BIFT_ID);  // ingress checked it
        }
        bier_ports.apply();
        if (hdr.bier.bitstring == 0) {
            meta.bier_out = BIER_OUT_PRUNED;
        } else {
            if (hdr.ina.isValid() && hdr.ina.dest != 0
                    && ((bit<8>)((hdr.ina.dest - 1) >> 8) != meta.bier_si
                        || (hdr.bier.bitstring & ((bitmap_t)1 << (bit<8>)(hdr.ina.dest - 1)))
                           == 0)) {
                if (hdr.data.isValid()) {
                    cut_array();
                } else {
                    completion();
                }
            }
            if ((meta.bier_out & BIER_OUT_DELIVERED) == BIER_OUT_DELIVERED) {
                hdr.bier.setInvalid();
                hdr.ethernet.ether_type = ETHERTYPE_IPV4;
            }
        }
    }
}

#endif
