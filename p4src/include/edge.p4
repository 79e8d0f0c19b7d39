// Ports that lead to hosts, the bit (BFR-id: set and bit) of the host on each, and which jobs
// each such host takes part in: a host contributes only as itself to a job it is
// a worker of, and injects BIER only as the server root of a job.
control Edge(in headers_t hdr, in port_t port, inout metadata_t meta) {
    // job_members, applied to a host's INA packets only, overrides the membership.
    action from_host(bitmap_t host_bit, bit<8> host_si) {
        meta.from_host = true;
        meta.host_bit = host_bit;
        meta.host_si = host_si;
        meta.membership = MEMBER_NONE;
    }

    action from_switch() {
        meta.from_host = false;
    }

    table host_ports {
        key = { port: exact @name("ingress_port"); }
        actions = { from_host; @defaultonly from_switch; }
        const default_action = from_switch();
        size = MAX_PORTS;
    }

    action member() {
        meta.membership = MEMBER_WORKER;
    }

    action bier_source() {
        meta.membership = MEMBER_ROOT;
    }

    action not_member() {
        meta.membership = MEMBER_NONE;
    }

    table job_members {
        key = {
            hdr.ina.job_id: exact @name("job_id");
            port: exact @name("ingress_port");
        }
        actions = { member; bier_source; @defaultonly not_member; }
        const default_action = not_member();
        size = MAX_JOBS * MAX_PORTS;
    }

    apply {
        host_ports.apply();
        if (meta.from_host && hdr.ina.isValid()) {
            job_members.apply();
        }
    }
}
