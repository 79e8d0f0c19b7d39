// Ingress: every packet is either the controller's (a packet-out, sent where it
// says; a link probe from a neighbour, passed up as a packet-in), BIER
// (replicated by bier_ingress/bier_egress), INA over IPv4 (checked, steered by
// a worker's edge switch to its parent VAT node, then handled by its job's VAT
// node if this switch has one), or plain IPv4 (routed). Drops are counted here,
// once, by reason.
#ifndef INA_INGRESS_P4
#define INA_INGRESS_P4

control InaIngress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t std) {
    counter(MAX_JOBS * JOB_STAT_STRIDE, CounterType.packets_and_bytes) job_stats;
    counter(SWITCH_STATS, CounterType.packets_and_bytes) switch_stats;
    // Per port: packets that came in by it (not the CPU port's packet-outs), as
    // they are read, before any check: the link delivers even when the watcher's
    // probes wait behind a backlog (watch.py tells a queue from a dead link by it).
    counter(MAX_PORTS, CounterType.packets_and_bytes) port_received;

    Edge() edge;
    Addresses() addresses;
    InaValidate() ina_validate;
    Jobs() jobs;
    Aggregation() aggregation;
    Routing() routing;
    BierIngress() bier;

    // Every metadata field that some path reads before it sets it, in one place
    // (membership and bier_result are set on the paths that read them; a packet
    // leaves by multicast when std.mcast_grp is set).
    action init_metadata() {
        meta.job_role = ROLE_NONE;
        meta.job_stat = JOB_STAT_NONE;
        meta.job_stat2 = JOB_STAT_NONE;
        meta.drop_reason = SWITCH_STAT_NONE;
        meta.consumed = false;
        meta.owned = false;
    }

    // The controller's packet (a link probe): out of the port it names, ahead of
    // the port's backlog (BMv2's egress queue of priority PROBE_PRIORITY).
    action controller_out() {
        std.egress_spec = hdr.packet_out.egress_port;
        std.priority = PROBE_PRIORITY;
        hdr.packet_out.setInvalid();
        switch_stats.count((bit<32>)SWITCH_STAT_PROBE_SENT);
    }

    // A neighbour's link probe: up to the controller, with the port it came in on.
    action probe_in() {
        hdr.packet_in.setValid();
        hdr.packet_in.ingress_port = std.ingress_port;
        hdr.packet_in.pad = 0;
        std.egress_spec = CPU_PORT;
        std.priority = PROBE_PRIORITY;
        switch_stats.count((bit<32>)SWITCH_STAT_PROBE_RECEIVED);
    }

    // A worker's edge switch steers its packets: SYNCs and ABORTs to the job's
    // root (in the plan's generation), contributions and QUERYs (about a
    // contribution) to its parent VAT node.
    // The new destination is in the UDP checksum's pseudo-header: no checksum
    // (0, valid for IPv4), or a server root's kernel would drop the datagram.
    action to_root() {
        hdr.ipv4.dst_addr = meta.steer_root;
        hdr.ina.gen = meta.member_gen;
        hdr.udp.checksum = 0;
    }

    action to_parent() {
        hdr.ipv4.dst_addr = meta.steer_parent;
        hdr.udp.checksum = 0;
    }

    // A worker's own values for every other worker of its job (OP_COPY: a
    // Broadcast's root, an Allgather's part): this edge is the BFIR, and sends the
    // packet once by BIER to the job's other workers in the host's set, who take it
    // as a result; no switch aggregates it. Each uplink carries the values once.
    action own() {
        bier_push(hdr, hdr.ina.si, meta.peers & ~meta.host_bit);
        hdr.udp.checksum = 0;
        meta.owned = true;
        meta.job_stat = JOB_STAT_OWNED;
    }

    // The worker must know something first: the job's plan changed (its packet is
    // of another generation), or no switch aggregates the job now. The packet goes
    // back as a notice (SYNC | REPLY | what, and NODATA if it had no array) in the
    // plan's generation; its array, if any, goes with it (cutting it off would cost
    // BMv2 more than sending it).
    action tell_worker(bit<8> what) {
        hdr.ina.flags = FLAG_SYNC | FLAG_REPLY | what | (hdr.ina.flags & FLAG_NODATA);
        hdr.ina.gen = meta.member_gen;
        hdr.udp.checksum = 0;
        ipv4_addr_t worker = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
        hdr.ipv4.dst_addr = worker;
        meta.to_me = false;
        meta.job_stat = JOB_STAT_TOLD;
    }

    apply {
        if (hdr.packet_out.isValid()) {
            controller_out();
            return;
        }
        if (std.ingress_port < MAX_PORTS) {
            port_received.count((bit<32>)std.ingress_port);
        }
        init_metadata();
        edge.apply(hdr, std.ingress_port, meta);  // may refuse: undeclared port, policed
        if (meta.from_host && meta.membership == MEMBER_WORKER) {
            if ((hdr.ina.flags & FLAG_QUERY) == FLAG_SYNC) {
                to_root();
            } else if (hdr.ina.gen == meta.member_gen) {
                to_parent();
            }
        }
        // The job's entry, looked up once for BIER and IPv4 alike (a table can be
        // applied in one place only); it only sets metadata. A switch that does not
        // know INA may have marked the packet's IPv4 header CE on the way: the mark
        // goes into the INA header, which aggregation carries into the result.
        if (hdr.ina.isValid()) {
            jobs.apply(hdr.ina.job_id, hdr.ina.si, hdr.ipv4.dst_addr, meta);
            if ((hdr.ipv4.diffserv & IPV4_ECN_MASK) == IPV4_ECN_CE) {
                hdr.ina.ecn = hdr.ina.ecn | ECN_CE;
            }
        }
        if (meta.drop_reason != SWITCH_STAT_NONE) {
            // Refused at the edge: an undeclared port, or a host over its rate.
        } else if (std.parser_error != error.NoError) {
            meta.drop_reason = SWITCH_STAT_DROP_PARSER_ERROR;
        } else if (hdr.ipv4.isValid() && std.checksum_error == 1) {
            meta.drop_reason = SWITCH_STAT_DROP_IP_CHECKSUM;
        } else if (hdr.bier.isValid()) {
            bier.apply(hdr, meta, std);
            if (meta.drop_reason == SWITCH_STAT_NONE && meta.job_role != ROLE_NONE) {
                meta.job_stat = JOB_STAT_BIER_RECEIVED;
                if (meta.job_role == ROLE_AGGREGATOR && hdr.ina.op != OP_COPY
                        && (hdr.ina.flags & (FLAG_RESULT | FLAG_SYNC)) == FLAG_RESULT) {
                    aggregation.apply(hdr, meta, std);  // a node below the root keeps it
                }
            }
        } else if (meta.from_host && hdr.ina.isValid() && hdr.ina.op == OP_COPY) {
            // A worker's own values: whole, as itself, in the plan it is told of.
            if (hdr.ina.version == INA_VERSION && hdr.ina.flags == FLAG_RESULT
                    && meta.membership == MEMBER_WORKER && hdr.ina.gen == meta.member_gen
                    && hdr.ipv4.src_addr == meta.host_ip && hdr.ipv4.ihl == 5
                    && hdr.ina.pbm == meta.host_bit && hdr.ina.si == meta.host_si
                    && hdr.ina.width == WIDTH32 && hdr.ina.dest == 0 && hdr.data.isValid()
                    && hdr.ina.count != 0 && hdr.ina.count <= ELEMS_PER_PACKET
                    && (meta.peers & ~meta.host_bit) != 0) {
                own();
                bier.apply(hdr, meta, std);
            } else {
                meta.drop_reason = SWITCH_STAT_DROP_BAD_OWNED;
            }
        } else if (hdr.ipv4.isValid() && hdr.ipv4.ihl == 5) {
            if (meta.job_role == ROLE_NONE) {
                addresses.apply(hdr.ipv4.dst_addr, meta);  // a job's entry told already
            }
            if (hdr.ina.isValid()) {
                // A valid contribution passes this one test (a condition costs BMv2
                // less than any action); anything else is sorted out by InaValidate
                // (16-bit elements, a dest beyond the BFR-ids included).
                if (hdr.ina.version != INA_VERSION
                        || (hdr.ina.flags & (FLAG_SYNC | FLAG_RESULT | FLAG_REPLY)) != 0
                        || hdr.ina.width != WIDTH32 || hdr.ina.dest > MAX_BFR_ID
                        || hdr.ina.count == 0 || hdr.ina.count > ELEMS_PER_PACKET
                        || (hdr.ina.op != OP_SUM && hdr.ina.op != OP_MIN
                            && hdr.ina.op != OP_MAX)
                        || hdr.ina.pbm == 0 || hdr.ina.si >= (bit<8>)BIER_SETS
                        || (meta.from_host && (hdr.ina.pbm != meta.host_bit
                                               || hdr.ipv4.src_addr != meta.host_ip
                                               || hdr.ina.si != meta.host_si
                                               || meta.membership != MEMBER_WORKER
                                               || hdr.ina.gen != meta.member_gen))) {
                    ina_validate.apply(hdr, meta);
                    if (meta.drop_reason == SWITCH_STAT_NONE && meta.from_host) {
                        if (meta.membership == MEMBER_ON_HOSTS) {
                            if ((hdr.ina.flags & FLAG_ABORT) != 0) {
                                meta.consumed = true;  // no call on switches to give up
                            } else {
                                tell_worker(FLAG_ON_HOSTS);
                            }
                        } else if (meta.membership == MEMBER_WORKER
                                   && (hdr.ina.flags & FLAG_QUERY) != FLAG_SYNC
                                   && hdr.ina.gen != meta.member_gen) {
                            tell_worker(FLAG_REPLAN);
                        }
                    }
                }
                if (meta.drop_reason == SWITCH_STAT_NONE && meta.job_stat == JOB_STAT_NONE
                        && !meta.consumed) {
                    if (meta.job_role == ROLE_TRANSIT) {
                        meta.job_stat = JOB_STAT_TRANSIT;
                    } else if (meta.job_role != ROLE_NONE) {
                        aggregation.apply(hdr, meta, std);
                    }
                }
            }
            if (meta.drop_reason == SWITCH_STAT_NONE && !meta.consumed && std.mcast_grp == 0) {
                if (!meta.to_me) {
                    routing.apply(hdr, meta, std);
                } else if (hdr.ina.isValid()) {
                    meta.drop_reason = SWITCH_STAT_DROP_UNKNOWN_JOB;
                } else {
                    meta.drop_reason = SWITCH_STAT_DROP_NOT_SUPPORTED;
                }
            }
        } else if (hdr.ethernet.ether_type == ETHERTYPE_PROBE && !meta.from_host) {
            probe_in();
        } else {
            meta.drop_reason = SWITCH_STAT_DROP_NOT_SUPPORTED;
        }

        // At most two events per packet for its job: what happened to it, and what
        // a VAT node then sent.
        if (meta.job_stat != JOB_STAT_NONE) {
            job_stats.count(((bit<32>)meta.job_index << JOB_STAT_STRIDE_LOG2)
                            | (bit<32>)meta.job_stat);
        }
        if (meta.job_stat2 != JOB_STAT_NONE) {
            job_stats.count(((bit<32>)meta.job_index << JOB_STAT_STRIDE_LOG2)
                            | (bit<32>)meta.job_stat2);
        }
        if (meta.drop_reason != SWITCH_STAT_NONE) {
            switch_stats.count((bit<32>)meta.drop_reason);
            mark_to_drop(std);
        } else if (meta.consumed) {
            mark_to_drop(std);
        }
    }
}

#endif
