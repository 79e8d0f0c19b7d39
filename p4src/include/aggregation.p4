// The VAT node of the packet's job on this switch (draft-song-ina-00, section 2.1).
//
// A-BM & P-BM == 0: the packet is not for this node and goes on toward its
// address (or, addressed here, is foreign and dropped). Otherwise its array is
// combined into a cell; when the cell's bitmap reaches the A-BM, this packet
// leaves carrying the aggregate with P-BM = A-BM: toward the parent, or, at the
// root, by BIER to every worker.
//
// Loss recovery (SwitchML's scheme, extended to a tree). Sequence number s uses
// slot slot_base + (s & slot_mask) and, of its two cells, the one chosen by the
// bit above the mask: consecutive rounds through the pool alternate. Workers
// send s only after every result up to s - 2*slots has reached every worker
// (their sliding window), so a newer s may overwrite its cell; an older s is a
// late duplicate. A complete cell keeps its aggregate: a retransmission for it
// (its bit already set) sends the aggregate again, toward the parent or, at the
// root, by BIER to the retransmitter's bits. A bit already set in an incomplete
// cell is a duplicate. Nothing is ever added twice.
//
// A cell's scalars live in one register (cell_t, CELL_* slices) and its
// aggregate in one register per lane (lanes.p4), so a packet costs one scalar
// read and write and one read and write per lane. A node below the root lies in
// one BIER set and keeps its bitmap in the cell. A root spanning several sets
// keeps one bitmap per (cell, set) instead, tagged with the cell's generation,
// so starting a round clears every set at once; it completes a cell when as
// many sets are full as its job has.
//
// Calls. A job serves any number of AllReduce calls; each starts with a SYNC
// from every worker to the root, which answers with the call's first sequence
// number: W + 1 past the highest one it has completed in this deployment (W =
// slots, the workers' window), so past every sequence number any worker can
// have sent (a worker sends s only once s - W is complete). Until one of the
// call's sequence numbers completes, every SYNC gets the same answer, so all
// workers of a call agree. Workers then reduce a descriptor of the call (the
// array's length, kind and op, with MAX) at that first number: a barrier that
// tells every worker if they disagree. A worker that gives up on a call sends
// an ABORT with the highest sequence number it sent, which the root counts as
// completed: the next call starts past whatever the interrupted one left.
//
// Registers hold only what the data plane writes. A cell whose epoch differs
// from the job entry's is a leftover of a torn-down job and counts as empty.
control Aggregation(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t std) {
    register<cell_t>(2 * AGG_SLOTS) cells;
    register<set_cell_t>(2 * AGG_SLOTS * BIER_SETS) set_bitmaps;
    // Per job index, at its root: the entry's epoch ++ the highest completed seq.
    register<bit<64>>(MAX_JOBS) progress;
    Lanes() lanes;

    // A packet a job check refused: counted for the job, then dropped.
    action refuse(bit<8> stat) {
        meta.job_stat = stat;
        meta.consumed = true;
    }

    apply {
        bool emit = false;
        bool all_sets = false;     // the result goes to every set of the job (not a resend)
        bool overflow = false;
        lane_t wrapped = 0;        // per element: a SUM overflowed (top bits)
        bitmap_t bier_bits = meta.abm;
        bit<32> job_index = meta.job_stat_base >> JOB_STAT_STRIDE_LOG2;
        if ((hdr.ina.flags & FLAG_SYNC) != 0) {
            if (!meta.to_me) {
                meta.job_stat = JOB_STAT_PASSED;  // to the root, or its answer back
            } else if (meta.job_role == ROLE_ROOT && (hdr.ina.flags & FLAG_ABORT) != 0) {
                // A worker gave up on its call after sending up to seq: the next call
                // starts past it, so no cell an interrupted call left half full is
                // taken for the next call's.
                bit<64> done_up_to;
                progress.read(done_up_to, job_index);
                if (done_up_to[63:32] != meta.epoch
                        || (int<32>)(hdr.ina.seq - done_up_to[31:0]) > 0) {
                    progress.write(job_index, meta.epoch ++ hdr.ina.seq);
                }
                refuse(JOB_STAT_ABORTED);
            } else if (meta.job_role == ROLE_ROOT && (hdr.ina.flags & FLAG_REPLY) == 0) {
                // Answer: the call's first sequence number, to the worker.
                bit<64> done_up_to;
                progress.read(done_up_to, job_index);
                hdr.ina.seq = 0;
                if (done_up_to[63:32] == meta.epoch) {
                    hdr.ina.seq = done_up_to[31:0] + (bit<32>)meta.slot_mask + 2;
                }
                hdr.ina.flags = hdr.ina.flags | FLAG_REPLY;
                hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
                hdr.ipv4.src_addr = meta.node_ip;
                hdr.ipv4.ttl = IPV4_INITIAL_TTL;
                hdr.udp.checksum = 0;
                meta.to_me = false;
                meta.job_stat = JOB_STAT_SYNCED;
            } else {
                refuse(JOB_STAT_DROP_FOREIGN_PBM);  // not the job's root
            }
        } else if ((meta.abm & hdr.ina.pbm) == 0) {
            if (meta.to_me) {
                refuse(JOB_STAT_DROP_FOREIGN_PBM);
            } else {
                meta.job_stat = JOB_STAT_PASSED;
            }
        } else if ((hdr.ina.pbm & ~meta.abm) != 0) {
            refuse(JOB_STAT_DROP_FOREIGN_PBM);
        } else {
            bit<16> seq_low = hdr.ina.seq[15:0];
            bit<32> cell = (bit<32>)(meta.slot_base + (seq_low & meta.slot_mask)) << 1;
            if ((seq_low & (meta.slot_mask + 1)) != 0) {
                cell = cell | 1;
            }
            cell_t cs;
            cells.read(cs, cell);
            bool fresh = cs[CELL_EPOCH] != meta.epoch
                         || (int<32>)(hdr.ina.seq - cs[CELL_SEQ]) > 0;
            bit<32> set_index = (cell << BIER_SETS_LOG2) | (bit<32>)hdr.ina.si;
            bit<32> gen = cs[CELL_GEN];
            bit<8> done = cs[CELL_DONE];
            bitmap_t bitmap = 0;
            if (!fresh) {
                if (meta.sets == 1) {
                    bitmap = cs[CELL_BITMAP];
                } else {
                    set_cell_t sc;
                    set_bitmaps.read(sc, set_index);
                    if (sc[SET_GEN] == gen) {
                        bitmap = sc[SET_BITMAP];
                    }
                }
            }
            bool absorb = false;
            if (fresh) {
                absorb = true;
            } else if (cs[CELL_SEQ] != hdr.ina.seq) {
                refuse(JOB_STAT_DROP_STALE);
            } else if (cs[CELL_COUNT] != hdr.ina.count) {
                refuse(JOB_STAT_DROP_COUNT_MISMATCH);
            } else if (cs[CELL_OP] != hdr.ina.op) {
                refuse(JOB_STAT_DROP_OP_MISMATCH);
            } else if ((bitmap & hdr.ina.pbm) == 0) {
                absorb = true;
            } else if (done != meta.sets) {
                refuse(JOB_STAT_DROP_DUPLICATE);
            } else {
                // A retransmission for a complete cell: something after it was lost.
                meta.job_stat = JOB_STAT_RESENT;
                lanes.apply(hdr.data, cell, LaneOp.LOAD, wrapped);
                overflow = cs[CELL_OVERFLOW] == 1;
                bier_bits = hdr.ina.pbm;
                emit = true;
            }

            if (absorb) {
                meta.job_stat = JOB_STAT_ABSORBED;
                overflow = (hdr.ina.flags & FLAG_OVERFLOW) != 0;
                if (fresh) {
                    gen = gen + 1;
                    done = 0;
                    lanes.apply(hdr.data, cell, LaneOp.STORE, wrapped);
                } else {
                    if (cs[CELL_OVERFLOW] == 1) {
                        overflow = true;
                    }
                    if (hdr.ina.op == OP_SUM) {
                        lanes.apply(hdr.data, cell, LaneOp.SUM, wrapped);
                        if ((wrapped & LANE_HIGH) != 0) {
                            overflow = true;
                        }
                    } else if (hdr.ina.op == OP_MIN) {
                        lanes.apply(hdr.data, cell, LaneOp.MIN, wrapped);
                    } else {
                        lanes.apply(hdr.data, cell, LaneOp.MAX, wrapped);
                    }
                }
                bitmap = bitmap | hdr.ina.pbm;
                if (bitmap == meta.abm) {
                    done = done + 1;  // this set is full
                }
                bitmap_t cell_bitmap = bitmap;
                if (meta.sets != 1) {
                    set_bitmaps.write(set_index, gen ++ bitmap);
                    cell_bitmap = 0;
                }
                cells.write(cell, cell_bitmap ++ meta.epoch ++ hdr.ina.seq ++ gen
                                  ++ hdr.ina.count ++ hdr.ina.op ++ (bit<1>)overflow ++ done);
                if (done == meta.sets) {
                    emit = true;  // complete: the cell keeps the aggregate for resends
                    all_sets = true;
                    if (meta.job_role == ROLE_ROOT) {
                        bit<64> done_up_to;
                        progress.read(done_up_to, job_index);
                        if (done_up_to[63:32] != meta.epoch
                                || (int<32>)(hdr.ina.seq - done_up_to[31:0]) > 0) {
                            progress.write(job_index, meta.epoch ++ hdr.ina.seq);
                        }
                    }
                } else {
                    meta.consumed = true;
                }
            }
        }

        if (emit) {
            hdr.ina.pbm = meta.abm;
            hdr.ina.flags = hdr.ina.flags & ~FLAG_OVERFLOW;
            if (overflow) {
                hdr.ina.flags = hdr.ina.flags | FLAG_OVERFLOW;
            }
            hdr.ipv4.src_addr = meta.node_ip;
            hdr.udp.checksum = 0;  // payload changed; 0 = none, valid for IPv4
            meta.to_me = false;
            if (meta.job_role == ROLE_ROOT) {
                hdr.ina.flags = hdr.ina.flags | FLAG_RESULT;
                hdr.ipv4.dst_addr = 0;  // each edge switch sets its host's address
                hdr.ipv4.ttl = IPV4_INITIAL_TTL;
                hdr.bier.setValid();
                hdr.bier.bift_id = BIER_BIFT_ID + (bit<20>)hdr.ina.si;
                hdr.bier.tc = 0;
                hdr.bier.s = 1;
                hdr.bier.ttl = BIER_INITIAL_TTL;
                hdr.bier.nibble = BIER_NIBBLE;
                hdr.bier.version = BIER_VERSION;
                hdr.bier.bsl = BIER_BSL_CODE;
                hdr.bier.entropy = 0;
                hdr.bier.oam = 0;
                hdr.bier.rsv = 0;
                hdr.bier.dscp = 0;
                hdr.bier.proto = BIER_PROTO_IPV4;
                hdr.bier.bfir_id = 0;
                hdr.bier.bitstring = bier_bits;
                hdr.ethernet.ether_type = ETHERTYPE_BIER;
                if (all_sets) {
                    // The job's group: a copy per port toward its workers, or, for a
                    // job spanning sets, per such (port, set), where bier_egress.p4
                    // writes each set's A-BM.
                    std.mcast_grp = meta.job_group;
                    meta.bier_result = meta.sets != 1;
                } else {
                    // A resend, to the packet's set.
                    std.mcast_grp = BIER_MCAST_GROUP;
                }
                meta.multicast = true;
                meta.job_stat2 = JOB_STAT_MULTICAST;
            } else {
                hdr.ipv4.dst_addr = meta.parent_ip;
                meta.job_stat2 = JOB_STAT_EMITTED;
            }
        }
    }
}
