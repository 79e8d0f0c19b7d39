// The jobs this switch takes part in. All job state the controller sets is
// action data here: BMv2's P4Runtime server cannot write registers.
//
// A node below the root lies within one BIER set, since its result travels in
// one packet: its entry holds that set's A-BM. A root may span several sets;
// then its vat_sets entries hold the A-BM of each, and it completes a cell when
// every one of them is full. Each action also tells whether the packet is
// addressed to this switch (node_ip is its loopback), which spares the packets
// of a deployed job the lookup of the switch's addresses.
#ifndef INA_JOBS_P4
#define INA_JOBS_P4

control Jobs(in bit<16> job_id, in bit<8> si, in ipv4_addr_t dst, inout metadata_t meta) {
    // lap (2W, W = slot_mask + 1) and, at the root, reach (5W) bound the
    // job's window (aggregation.p4): numbers the controller works out once, so that
    // no packet does.
    action vat_node(bit<8> job_index, bit<16> slot_base, bit<16> slot_mask, bit<32> lap,
                    bit<32> epoch, bit<8> gen, ipv4_addr_t node_ip, ipv4_addr_t parent_ip,
                    bit<8> set_id, bitmap_t abm) {
        meta.job_role = ROLE_AGGREGATOR;
        meta.job_index = job_index;
        meta.node_si = set_id;
        meta.abm = abm;
        meta.slot_base = slot_base;
        meta.slot_mask = slot_mask;
        meta.lap = lap;
        meta.epoch = epoch;
        meta.gen = gen;
        meta.node_ip = node_ip;
        meta.parent_ip = parent_ip;
        meta.to_me = dst == node_ip;
    }

    // sets == 1: the job's A-BM is abm, in set set_id. sets > 1: vat_sets has it.
    action vat_root(bit<8> job_index, bit<8> sets, bit<16> slot_base,
                    bit<16> slot_mask, bit<32> lap, bit<32> reach, bit<32> epoch, bit<8> gen,
                    ipv4_addr_t node_ip, bit<8> set_id, bitmap_t abm) {
        meta.job_role = ROLE_ROOT;
        meta.job_index = job_index;
        meta.sets = sets;
        meta.node_si = set_id;
        meta.abm = abm;
        meta.slot_base = slot_base;
        meta.slot_mask = slot_mask;
        meta.lap = lap;
        meta.reach = reach;
        meta.epoch = epoch;
        meta.gen = gen;
        meta.node_ip = node_ip;
        meta.to_me = dst == node_ip;
    }

    // Not a VAT node here, but the job's packets cross: count them per job.
    action transit(bit<8> job_index, ipv4_addr_t node_ip) {
        meta.job_role = ROLE_TRANSIT;
        meta.job_index = job_index;
        meta.to_me = dst == node_ip;
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
        meta.node_si = si;
        meta.abm = abm;
    }

    // The root covers no worker of this set: A-BM & P-BM is zero.
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
        if (meta.job_role == ROLE_ROOT && meta.sets != 1) {
            vat_sets.apply();
        }
    }
}

#endif
