// Malformed INA packets are dropped before any job sees them, and a host may
// only contribute as itself to a job it is a worker of.
control InaValidate(in headers_t hdr, inout metadata_t meta, in port_t port) {
    bool is_member = false;

    action member() {
        is_member = true;
    }

    action not_member() {
        is_member = false;
    }

    table job_members {
        key = {
            hdr.ina.job_id: exact @name("job_id");
            port: exact @name("ingress_port");
        }
        actions = { member; @defaultonly not_member; }
        const default_action = not_member();
        size = MAX_JOBS * MAX_PORTS;
    }

    apply {
        if (hdr.ina.version != INA_VERSION) {
            DROP(DROP_BAD_VERSION)
        } else if (hdr.ina.count == 0 || hdr.ina.count > ELEMS_PER_PACKET) {
            DROP(DROP_BAD_COUNT)
        } else if (hdr.ina.op != OP_SUM && hdr.ina.op != OP_MIN && hdr.ina.op != OP_MAX) {
            DROP(DROP_BAD_OP)
        } else if (hdr.ina.pbm == 0 || (hdr.ina.flags & FLAG_RESULT) != 0) {
            // Results travel in BIER only; a plain IPv4 "result" is forged.
            DROP(DROP_BAD_PBM)
        } else if (meta.from_host) {
            if (hdr.ina.pbm != meta.host_bit) {
                DROP(DROP_FORGED_PBM)
            } else {
                job_members.apply();
                if (!is_member) {
                    DROP(DROP_NOT_MEMBER)
                }
            }
        }
    }
}
