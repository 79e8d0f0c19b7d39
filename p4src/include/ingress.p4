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

    // Every metadata field that some path reads before it sets it, in one place.
    action init_metadata() {
        meta.membership = MEMBER_NONE;
        meta.to_me = false;
        meta.job_role = ROLE_NONE;
        meta.job_stat = JOB_STAT_NONE;
        meta.job_stat2 = JOB_STAT_NONE;
        meta.drop_reason = SWITCH_STAT_NONE;
        meta.consumed = false;
        meta.multicast = false;
        meta.bier_result = false;
    }

    apply {
        init_metadata();
        edge.apply(hdr, std.ingress_port, meta);
        // The job's entry, looked up once for BIER and IPv4 alike (a table can be
        // applied in one place only); it only sets metadata.
        if (hdr.ina.isValid()) {
            jobs.apply(hdr.ina.job_id, hdr.ina.si, meta);
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
            addresses.apply(hdr.ipv4.dst_addr, meta);
            if (hdr.ina.isValid()) {
                ina_validate.apply(hdr, meta);
                if (meta.drop_reason == SWITCH_STAT_NONE) {
                    if (meta.job_role == ROLE_TRANSIT) {
                        meta.job_stat = JOB_STAT_TRANSIT;
                    } else if (meta.job_role != ROLE_NONE) {
                        aggregation.apply(hdr, meta, std);
                    }
                }
            }
            if (meta.drop_reason == SWITCH_STAT_NONE && !meta.consumed && !meta.multicast) {
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
            job_stats.count(meta.job_stat_base + (bit<32>)meta.job_stat);
        }
        if (meta.job_stat2 != JOB_STAT_NONE) {
            job_stats.count(meta.job_stat_base + (bit<32>)meta.job_stat2);
        }
        if (meta.drop_reason != SWITCH_STAT_NONE) {
            switch_stats.count((bit<32>)meta.drop_reason);
            mark_to_drop(std);
        } else if (meta.consumed) {
            mark_to_drop(std);
        }
    }
}
