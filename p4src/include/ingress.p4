// Ingress: every packet is either BIER (replicated by bier_ingress/bier_egress),
// INA over IPv4 (checked, then handled by its job's VAT node if this switch has
// one), or plain IPv4 (routed). Drops are counted here, once, by reason.
control InaIngress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t std) {
    counter(MAX_JOBS * JOB_STAT_STRIDE, CounterType.packets_and_bytes) job_stats;
    counter(SWITCH_STATS, CounterType.packets_and_bytes) switch_stats;

    Edge() edge;
    Addresses() addresses;
    InaValidate() ina_validate;
    Jobs() jobs;
    Aggregation() aggregation;
    Routing() routing;
    BierIngress() bier;

    // Every metadata field that some path reads before it sets it, in one place
    // (membership and bier_result are set on the paths that read them; a packet
    // leaves by multicast when std.mcast_grp is set).
    action init_metadata() {
        meta.job_role = ROLE_NONE;
        meta.job_stat = JOB_STAT_NONE;
        meta.job_stat2 = JOB_STAT_NONE;
        meta.drop_reason = SWITCH_STAT_NONE;
        meta.consumed = false;
    }

    apply {
        init_metadata();
        edge.apply(hdr, std.ingress_port, meta);
        // The job's entry, looked up once for BIER and IPv4 alike (a table can be
        // applied in one place only); it only sets metadata.
        if (hdr.ina.isValid()) {
            jobs.apply(hdr.ina.job_id, hdr.ina.si, hdr.ipv4.dst_addr, meta);
        }
        if (std.parser_error != error.NoError) {
            meta.drop_reason = SWITCH_STAT_DROP_PARSER_ERROR;
        } else if (hdr.ipv4.isValid() && std.checksum_error == 1) {
            meta.drop_reason = SWITCH_STAT_DROP_IP_CHECKSUM;
        } else if (hdr.bier.isValid()) {
            bier.apply(hdr, meta, std);
            if (meta.drop_reason == SWITCH_STAT_NONE && meta.job_role != ROLE_NONE) {
                meta.job_stat = JOB_STAT_BIER_RECEIVED;
            }
        } else if (hdr.ipv4.isValid() && hdr.ipv4.ihl == 5) {
            if (meta.job_role == ROLE_NONE) {
                addresses.apply(hdr.ipv4.dst_addr, meta);  // a job's entry told already
            }
            if (hdr.ina.isValid()) {
                // A valid contribution passes this one test (a condition costs BMv2
                // less than any action); anything else is sorted out by InaValidate.
                if (hdr.ina.version != INA_VERSION
                        || (hdr.ina.flags & (FLAG_SYNC | FLAG_RESULT | FLAG_REPLY)) != 0
                        || hdr.ina.count == 0 || hdr.ina.count > ELEMS_PER_PACKET
                        || (hdr.ina.op != OP_SUM && hdr.ina.op != OP_MIN
                            && hdr.ina.op != OP_MAX)
                        || hdr.ina.pbm == 0 || hdr.ina.si >= (bit<8>)BIER_SETS
                        || (meta.from_host && (hdr.ina.pbm != meta.host_bit
                                               || hdr.ina.si != meta.host_si
                                               || meta.membership != MEMBER_WORKER))) {
                    ina_validate.apply(hdr, meta);
                }
                if (meta.drop_reason == SWITCH_STAT_NONE) {
                    if (meta.job_role == ROLE_TRANSIT) {
                        meta.job_stat = JOB_STAT_TRANSIT;
                    } else if (meta.job_role != ROLE_NONE) {
                        aggregation.apply(hdr, meta, std);
                    }
                }
            }
            if (meta.drop_reason == SWITCH_STAT_NONE && !meta.consumed && std.mcast_grp == 0) {
                if (!meta.to_me) {
                    routing.apply(hdr, meta, std);
                } else if (hdr.ina.isValid()) {
                    meta.drop_reason = SWITCH_STAT_DROP_UNKNOWN_JOB;
                } else {
                    meta.drop_reason = SWITCH_STAT_DROP_NOT_SUPPORTED;
                }
            }
        } else {
            meta.drop_reason = SWITCH_STAT_DROP_NOT_SUPPORTED;
        }

        // At most two events per packet for its job: what happened to it, and what
        // a VAT node then sent.
        if (meta.job_stat != JOB_STAT_NONE) {
            job_stats.count(((bit<32>)meta.job_index << JOB_STAT_STRIDE_LOG2)
                            | (bit<32>)meta.job_stat);
        }
        if (meta.job_stat2 != JOB_STAT_NONE) {
            job_stats.count(((bit<32>)meta.job_index << JOB_STAT_STRIDE_LOG2)
                            | (bit<32>)meta.job_stat2);
        }
        if (meta.drop_reason != SWITCH_STAT_NONE) {
            switch_stats.count((bit<32>)meta.drop_reason);
            mark_to_drop(std);
        } else if (meta.consumed) {
            mark_to_drop(std);
        }
    }
}
