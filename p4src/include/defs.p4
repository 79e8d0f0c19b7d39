// Types and the codes the controls share (protocol constants: generated.p4).
#ifndef INA_DEFS_P4
#define INA_DEFS_P4

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<9>  port_t;

// What this switch is for the packet's job (set by the vat_jobs table).
const bit<2> ROLE_NONE = 0;
const bit<2> ROLE_TRANSIT = 1;
const bit<2> ROLE_AGGREGATOR = 2;
const bit<2> ROLE_ROOT = 3;

// What a host port is to the packet's job (job_members in edge.p4).
const bit<2> MEMBER_NONE = 0;
const bit<2> MEMBER_WORKER = 1;
const bit<2> MEMBER_ROOT = 2;
const bit<2> MEMBER_ON_HOSTS = 3;

// What egress did with a BIER copy (the low two bits) ...
const bit<3> BIER_OUT_PRUNED = 1;
const bit<3> BIER_OUT_SENT = 2;
const bit<3> BIER_OUT_DELIVERED = 3;
// ... and whether it left as a completion (not toward the packet's dest: no array).
const bit<3> BIER_OUT_COMPLETION = 4;

#endif
