// The jobs this switch takes part in. All job state the controller sets is
// action data here: BMv2's P4Runtime server cannot write registers.
//
// A VAT node's A-BM is kept per BIER set (vat_sets). A node below the root lies
// within one set, since its result travels in one packet; the root's A-BM may
// span several sets, and it completes a cell when every one of them is full.
control Jobs(in bit<16> job_id, in bit<8> si, inout metadata_t meta) {
    action vat_node(bit<8> job_index, bit<16> slot_base, bit<16> slot_mask,
                    bit<32> epoch, ipv4_addr_t node_ip, ipv4_addr_t parent_ip) {
        meta.job_role = ROLE_AGGREGATOR;
        meta.job_stat_base = (bit<32>)job_index << JOB_STAT_STRIDE_LOG2;
        meta.job_group = JOB_GROUP_BASE + (bit<16>)job_index;
        meta.sets = 1;
        meta.slot_base = slot_base;
        meta.slot_mask = slot_mask;
        meta.epoch = epoch;
        meta.node_ip = node_ip;
        meta.parent_ip = parent_ip;
    }

    action vat_root(bit<8> job_index, bit<8> sets, bit<16> slot_base,
                    bit<16> slot_mask, bit<32> epoch, ipv4_addr_t node_ip) {
        meta.job_role = ROLE_ROOT;
        meta.job_stat_base = (bit<32>)job_index << JOB_STAT_STRIDE_LOG2;
        meta.job_group = JOB_GROUP_BASE + (bit<16>)job_index;
        meta.sets = sets;
        meta.slot_base = slot_base;
        meta.slot_mask = slot_mask;
        meta.epoch = epoch;
        meta.node_ip = node_ip;
    }

    // Not a VAT node here, but the job's packets cross: count them per job.
    action transit(bit<8> job_index) {
        meta.job_role = ROLE_TRANSIT;
        meta.job_stat_base = (bit<32>)job_index << JOB_STAT_STRIDE_LOG2;
        meta.job_group = JOB_GROUP_BASE + (bit<16>)job_index;
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

    action set_abm(bitmap_t abm) {
        meta.abm = abm;
    }

    // The node covers no worker of this set: A-BM & P-BM is zero.
    action no_set() {
        meta.abm = 0;
    }

    table vat_sets {
        key = {
            job_id: exact @name("job_id");
            si: exact @name("si");
        }
        actions = { set_abm; @defaultonly no_set; }
        const default_action = no_set();
        size = MAX_JOBS * BIER_SETS;
    }

    apply {
        vat_jobs.apply();
        if (meta.job_role == ROLE_AGGREGATOR || meta.job_role == ROLE_ROOT) {
            vat_sets.apply();
        }
    }
}
