// Egress: BIER copies need work (mask, prune, cut to a completion, decapsulate),
// counted by outcome; then every packet that leaves by a port (not pruned, not to
// the CPU port) may be marked as congested (congestion.p4). No `return` here: p4c
// turns one into a flag that every packet would set and test.
#ifndef INA_EGRESS_P4
#define INA_EGRESS_P4

control InaEgress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t std) {
    counter(MAX_JOBS * JOB_STAT_STRIDE, CounterType.packets_and_bytes) job_stats;
    counter(SWITCH_STATS, CounterType.packets_and_bytes) switch_stats;

    BierEgress() bier;
    Congestion() congestion;

    apply {
        if (hdr.bier.isValid()) {
            bier.apply(hdr, meta, std);
            if (meta.bier_out == BIER_OUT_PRUNED) {
                switch_stats.count((bit<32>)SWITCH_STAT_BIER_COPY_PRUNED);
                mark_to_drop(std);
            } else {
                if ((meta.bier_out & BIER_OUT_DELIVERED) == BIER_OUT_SENT) {
                    switch_stats.count((bit<32>)SWITCH_STAT_BIER_COPY_SENT);
                } else {
                    switch_stats.count((bit<32>)SWITCH_STAT_BIER_COPY_DELIVERED);
                    if (meta.job_role != ROLE_NONE) {
                        job_stats.count(((bit<32>)meta.job_index << JOB_STAT_STRIDE_LOG2)
                                        | (bit<32>)JOB_STAT_DELIVERED);
                    }
                }
                if ((meta.bier_out & BIER_OUT_COMPLETION) != 0) {
                    switch_stats.count((bit<32>)SWITCH_STAT_COMPLETION_SENT);
                }
            }
        }
        // A pruned copy is still BIER (a delivered one is not); bier_out is set on
        // every BIER copy. The CPU port has no counter cell.
        if (std.egress_port < MAX_PORTS
                && (!hdr.bier.isValid() || meta.bier_out != BIER_OUT_PRUNED)) {
            congestion.apply(hdr, meta, std);
        }
    }
}

#endif
