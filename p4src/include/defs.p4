// Types, roles and the small macros every control shares.
#ifndef INA_DEFS_P4
#define INA_DEFS_P4

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<9>  port_t;
typedef bit<BITSTRING_BITS> bitmap_t;

// What this switch is for the packet's job (set by the vat_jobs table).
#define ROLE_NONE       0
#define ROLE_TRANSIT    1
#define ROLE_AGGREGATOR 2
#define ROLE_ROOT       3

// What a host port is to the packet's job (job_members in edge.p4).
#define MEMBER_NONE   0
#define MEMBER_WORKER 1
#define MEMBER_ROOT   2

// What egress did with a BIER copy.
#define BIER_OUT_NONE      0
#define BIER_OUT_PRUNED    1
#define BIER_OUT_SENT      2
#define BIER_OUT_DELIVERED 3

// A drop with a switch-wide reason; InaIngress counts it once and drops.
#define DROP(reason) meta.drop = true; meta.drop_reason = SWITCH_STAT_##reason;
// A per-job event; InaIngress counts each one set, in the job's counter block.
#define JOB_EVENT(stat) meta.job_events = meta.job_events | (16w1 << JOB_STAT_##stat);
// A packet a job check refused: counted for the job, then dropped.
#define JOB_DROP(stat) JOB_EVENT(stat) meta.consumed = true;

#endif
