// What each port leads to, as the controller declared it: a host (its bit, BFR-id
// set and address) or another switch. A port it did not declare carries nothing
// (ingress drops and counts all of it): a host there would be trusted as a
// switch. Which jobs each host takes part in: a host contributes only as itself,
// from its own address, to a job it is a worker of, and injects BIER only as the
// server root of a job (a worker's own values are put in BIER here: ingress.p4). A host's INA packets of each of its jobs are policed by
// a meter on its job_members entry (rate and burst set by the controller), so
// that a flood from one host cannot take its parent, or the links' probes.
#ifndef INA_EDGE_P4
#define INA_EDGE_P4

control Edge(in headers_t hdr, in port_t port, inout metadata_t meta) {
    action from_host(bitmap_t host_bit, bit<8> host_si, ipv4_addr_t host_ip) {
        meta.from_host = true;
        meta.host_bit = host_bit;
        meta.host_si = host_si;
        meta.host_ip = host_ip;
        meta.membership = MEMBER_NONE;  // job_members, for a host's INA packets
    }

    action from_switch() {
        meta.from_host = false;
    }

    action undeclared() {
        meta.from_host = false;
        meta.drop_reason = SWITCH_STAT_DROP_UNDECLARED_PORT;
    }

    table host_ports {
        key = { port: exact @name("ingress_port"); }
        actions = { from_host; from_switch; @defaultonly undeclared; }
        const default_action = undeclared();
        size = MAX_PORTS;
    }

    // Executed on every hit of job_members: METER_RED over the entry's rate.
    direct_meter<bit<2>>(MeterType.packets) member_meter;

    // A worker of the job: its contributions go to its parent VAT node, its SYNCs to
    // the job's root, both in the job plan's generation gen. Hosts need not know
    // the VAT: a new plan rewrites this entry, and the worker is told (REPLAN).
    // slots is the job's window, which the controller reads back to re-plan the
    // job when its VAT nodes are gone (the switches are its only record of jobs).
    // peers: the job's workers in the host's BIER set, where its own values go
    // (OP_COPY: ingress.p4).
    action member(ipv4_addr_t parent_ip, ipv4_addr_t root_ip, bit<8> gen, bit<16> slots,
                  bitmap_t peers) {
        member_meter.read(meta.color);
        meta.membership = MEMBER_WORKER;
        meta.steer_parent = parent_ip;
        meta.steer_root = root_ip;
        meta.member_gen = gen;
        meta.slot_mask = slots - 1;
        meta.peers = peers;
    }

    // A worker of a job that no switch can aggregate now: its SYNC is answered here
    // (ON_HOSTS), and the workers reduce among themselves. slots: as for member.
    action member_on_hosts(bit<8> gen, bit<16> slots) {
        member_meter.read(meta.color);
        meta.membership = MEMBER_ON_HOSTS;
        meta.member_gen = gen;
        meta.slot_mask = slots - 1;
    }

    action bier_source() {
        member_meter.read(meta.color);
        meta.membership = MEMBER_ROOT;
    }

    action not_member() {
        meta.color = 0;
        meta.membership = MEMBER_NONE;
    }

    table job_members {
        key = {
            hdr.ina.job_id: exact @name("job_id");
            port: exact @name("ingress_port");
        }
        actions = { member; member_on_hosts; bier_source; @defaultonly not_member; }
        const default_action = not_member();
        meters = member_meter;
        size = MAX_JOBS * MAX_PORTS;
    }

    apply {
        host_ports.apply();
        if (meta.from_host && hdr.ina.isValid()) {
            job_members.apply();
            if (meta.color == METER_RED) {
                meta.drop_reason = SWITCH_STAT_DROP_POLICED;
            }
        }
    }
}

#endif
