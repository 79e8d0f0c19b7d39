// The jobs this switch takes part in. All job state the controller sets is
// action data here: BMv2's P4Runtime server cannot write registers.
control Jobs(in bit<16> job_id, inout metadata_t meta) {
    action vat_node(bit<8> job_index, bitmap_t abm, bit<16> slot_base,
                    bit<16> slot_mask, bit<32> epoch, ipv4_addr_t node_ip,
                    ipv4_addr_t parent_ip) {
        meta.job_role = ROLE_AGGREGATOR;
        meta.job_index = job_index;
        meta.abm = abm;
        meta.slot_base = slot_base;
        meta.slot_mask = slot_mask;
        meta.epoch = epoch;
        meta.node_ip = node_ip;
        meta.parent_ip = parent_ip;
    }

    action vat_root(bit<8> job_index, bitmap_t abm, bit<16> slot_base,
                    bit<16> slot_mask, bit<32> epoch, ipv4_addr_t node_ip) {
        meta.job_role = ROLE_ROOT;
        meta.job_index = job_index;
        meta.abm = abm;
        meta.slot_base = slot_base;
        meta.slot_mask = slot_mask;
        meta.epoch = epoch;
        meta.node_ip = node_ip;
    }

    // Not a VAT node here, but the job's packets cross: count them per job.
    action transit(bit<8> job_index) {
        meta.job_role = ROLE_TRANSIT;
        meta.job_index = job_index;
    }

    action no_job() {
        meta.job_role = ROLE_NONE;
    }

    table vat_jobs {
        key = { job_id: exact @name("job_id"); }
        actions = { vat_node; vat_root; transit; @defaultonly no_job; }
        const default_action = no_job();
        size = MAX_JOBS;
    }

    apply { vat_jobs.apply(); }
}
