// Why an INA packet is refused, if it is: a malformed packet is dropped before any
// job sees it, and a host may only send from its own address (or a SYNC's answer
// and a notice would go where it says) and contribute as itself to a job it is a
// worker of (edge.p4 looked it up). InaIngress applies this only to packets its quick
// test of a valid contribution does not pass: control packets (SYNC, REPLY,
// ABORT) and refused ones.
#ifndef INA_INA_VALIDATE_P4
#define INA_INA_VALIDATE_P4

control InaValidate(in headers_t hdr, inout metadata_t meta) {
    apply {
        if (hdr.ina.version != INA_VERSION) {
            meta.drop_reason = SWITCH_STAT_DROP_BAD_VERSION;
        } else if (hdr.ina.width != WIDTH32 && hdr.ina.width != WIDTH16) {
            meta.drop_reason = SWITCH_STAT_DROP_BAD_WIDTH;
        } else if ((hdr.ina.count == 0
                    || (hdr.ina.width == WIDTH32 && hdr.ina.count > ELEMS_PER_PACKET)
                    || hdr.ina.count > ELEMS16_PER_PACKET)
                   && (hdr.ina.flags & FLAG_SYNC) == 0) {
            meta.drop_reason = SWITCH_STAT_DROP_BAD_COUNT;
        } else if (hdr.ina.op != OP_SUM && hdr.ina.op != OP_MIN && hdr.ina.op != OP_MAX) {
            meta.drop_reason = SWITCH_STAT_DROP_BAD_OP;
        } else if (hdr.ina.pbm == 0 || hdr.ina.si >= (bit<8>)BIER_SETS
                   || (hdr.ina.flags & FLAG_RESULT) != 0) {
            // Results travel in BIER only; a plain IPv4 "result" is forged.
            meta.drop_reason = SWITCH_STAT_DROP_BAD_PBM;
        } else if (hdr.ina.dest > MAX_BFR_ID) {
            meta.drop_reason = SWITCH_STAT_DROP_BAD_DEST;
        } else if (meta.from_host) {
            if (hdr.ipv4.src_addr != meta.host_ip) {
                meta.drop_reason = SWITCH_STAT_DROP_SPOOFED_SOURCE;
            } else if ((hdr.ina.flags & FLAG_REPLY) != 0) {
                // Only a job's server root answers its workers' SYNCs.
                if (meta.membership != MEMBER_ROOT) {
                    meta.drop_reason = SWITCH_STAT_DROP_FORGED_PBM;
                }
            } else if (hdr.ina.pbm != meta.host_bit || hdr.ina.si != meta.host_si) {
                meta.drop_reason = SWITCH_STAT_DROP_FORGED_PBM;
            } else if (meta.membership != MEMBER_WORKER
                       && meta.membership != MEMBER_ON_HOSTS) {
                meta.drop_reason = SWITCH_STAT_DROP_NOT_MEMBER;
            }
        }
    }
}

#endif
