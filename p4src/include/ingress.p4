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

#define COUNT_JOB_STAT(i) \
    if (meta.job_events[i:i] == 1) { job_stats.count(job_base + i); }

    apply {
        edge.apply(hdr, std.ingress_port, meta);
        // The job's entry, looked up once for BIER and IPv4 alike (a table can be
        // applied in one place only); it only sets metadata.
        if (hdr.ina.isValid()) {
            jobs.apply(hdr.ina.job_id, hdr.ina.si, meta);
        }
        if (std.parser_error != error.NoError) {
            DROP(DROP_PARSER_ERROR)
        } else if (hdr.ipv4.isValid() && std.checksum_error == 1) {
            DROP(DROP_IP_CHECKSUM)
        } else if (hdr.bier.isValid()) {
            bier.apply(hdr, meta, std);
            if (!meta.drop && meta.job_role != ROLE_NONE) {
                JOB_EVENT(BIER_RECEIVED)
            }
        } else if (hdr.ipv4.isValid() && hdr.ipv4.ihl == 5) {
            addresses.apply(hdr.ipv4.dst_addr, meta);
            if (hdr.ina.isValid()) {
                ina_validate.apply(hdr, meta);
                if (!meta.drop) {
                    if (meta.job_role == ROLE_TRANSIT) {
                        JOB_EVENT(TRANSIT)
                    } else if (meta.job_role != ROLE_NONE) {
                        aggregation.apply(hdr, meta, std);
                    }
                }
            }
            if (!meta.drop && !meta.consumed && !meta.multicast) {
                if (meta.to_me) {
                    if (hdr.ina.isValid()) {
                        DROP(DROP_UNKNOWN_JOB)
                    } else {
                        DROP(DROP_NOT_SUPPORTED)
                    }
                } else {
                    routing.apply(hdr, meta, std);
                }
            }
        } else {
            DROP(DROP_NOT_SUPPORTED)
        }

        if (meta.job_role != ROLE_NONE) {
            bit<32> job_base = (bit<32>)meta.job_index << JOB_STAT_STRIDE_LOG2;
            INA_FOR_EACH_JOB_STAT(COUNT_JOB_STAT)
        }
        if (meta.drop) {
            switch_stats.count((bit<32>)meta.drop_reason);
            mark_to_drop(std);
        } else if (meta.consumed) {
            mark_to_drop(std);
        }
    }
}
