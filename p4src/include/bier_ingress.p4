// BIER forwarding, ingress half: check the header (its BIFT-id names one of our
// sets), spend one TTL, and hand the packet to a multicast group: its job's on
// this switch (the ports toward its workers), or that of every BIER port. Egress
// masks each copy with the F-BM of its port in the packet's set.
#ifndef INA_BIER_INGRESS_P4
#define INA_BIER_INGRESS_P4

control BierIngress(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t std) {
    apply {
        // A worker's own values were put in BIER by ingress, and checked there.
        if (meta.from_host && !meta.owned && meta.membership != MEMBER_ROOT) {
            // Hosts are BFERs behind this switch; only a job's server root injects.
            meta.drop_reason = SWITCH_STAT_DROP_BIER_FROM_HOST;
        } else if (meta.from_host && !meta.owned
                   && (!hdr.ipv4.isValid() || hdr.ipv4.src_addr != meta.host_ip)) {
            meta.drop_reason = SWITCH_STAT_DROP_SPOOFED_SOURCE;  // a server root, from its address
        } else if (hdr.bier.nibble != BIER_NIBBLE || hdr.bier.version != BIER_VERSION
                   || hdr.bier.bsl != BIER_BSL_CODE || hdr.bier.bift_id < BIER_BIFT_ID
                   || hdr.bier.bift_id >= BIER_BIFT_ID + (bit<20>)BIER_SETS
                   || hdr.bier.bitstring == 0) {
            meta.drop_reason = SWITCH_STAT_DROP_BIER_MALFORMED;
        } else if (hdr.bier.ttl <= 1) {
            meta.drop_reason = SWITCH_STAT_DROP_BIER_TTL;
        } else {
            hdr.bier.ttl = hdr.bier.ttl - 1;
            if ((meta.job_role == ROLE_TRANSIT || meta.job_role == ROLE_AGGREGATOR)
                    && hdr.ina.op != OP_COPY) {
                // The job's group: copies only toward its workers, down its tree
                // from the root. A worker's own values may have to go up: every port.
                std.mcast_grp = JOB_GROUP_BASE + (bit<16>)meta.job_index;
            } else {
                std.mcast_grp = BIER_MCAST_GROUP;
            }
            meta.bier_result = false;  // the root's copies per set only (aggregation.p4)
        }
    }
}

#endif
