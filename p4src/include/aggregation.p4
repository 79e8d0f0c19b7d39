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
// Bitmaps are kept per (cell, BIER set): a root whose A-BM spans several sets
// completes a cell when as many sets are full as the job has (slot_sets_done).
// A set's bitmap belongs to the cell's current round only if its generation tag
// equals the cell's, so starting a round clears every set at once.
//
// Registers hold only what the data plane writes. A cell whose epoch differs
// from the job entry's is a leftover of a torn-down job and counts as empty.
control Aggregation(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t std) {
    register<bit<32>>(2 * AGG_SLOTS) slot_epoch;
    register<bit<32>>(2 * AGG_SLOTS) slot_seq;
    register<bit<32>>(2 * AGG_SLOTS) slot_gen;
    register<bit<8>>(2 * AGG_SLOTS) slot_sets_done;
    register<bit<16>>(2 * AGG_SLOTS) slot_count;
    register<bit<4>>(2 * AGG_SLOTS) slot_op;
    register<bit<1>>(2 * AGG_SLOTS) slot_overflow;
    register<bitmap_t>(2 * AGG_SLOTS * BIER_SETS) set_bitmap;
    register<bit<32>>(2 * AGG_SLOTS * BIER_SETS) set_gen;
    register<bit<32>>(2 * AGG_SLOTS * ELEMS_PER_PACKET) agg_values;

// Per element i of the array, at agg_values[base + i]:
#define STORE_ELEM(i) agg_values.write(base + i, hdr.data.v##i);
#define LOAD_ELEM(i) agg_values.read(hdr.data.v##i, base + i);
// SUM wraps like int32; a sign change that the operands do not explain is an
// overflow (bit 31 of ovf_bits), reported to the workers in the flags.
#define SUM_ELEM(i) { \
        bit<32> cur_##i; \
        agg_values.read(cur_##i, base + i); \
        bit<32> sum_##i = cur_##i + hdr.data.v##i; \
        ovf_bits = ovf_bits | (~(cur_##i ^ hdr.data.v##i) & (cur_##i ^ sum_##i)); \
        agg_values.write(base + i, sum_##i); \
        hdr.data.v##i = sum_##i; }
#define MIN_ELEM(i) { \
        bit<32> cur_##i; \
        agg_values.read(cur_##i, base + i); \
        if ((int<32>)cur_##i < (int<32>)hdr.data.v##i) { hdr.data.v##i = cur_##i; } \
        agg_values.write(base + i, hdr.data.v##i); }
#define MAX_ELEM(i) { \
        bit<32> cur_##i; \
        agg_values.read(cur_##i, base + i); \
        if ((int<32>)cur_##i > (int<32>)hdr.data.v##i) { hdr.data.v##i = cur_##i; } \
        agg_values.write(base + i, hdr.data.v##i); }

    apply {
        bool emit = false;
        bool all_sets = false;  // the result goes to every set (not a resend)
        bit<1> overflow = 0;
        bitmap_t bier_bits = meta.abm;
        if ((meta.abm & hdr.ina.pbm) == 0) {
            if (meta.to_me) {
                JOB_DROP(DROP_FOREIGN_PBM)
            } else {
                JOB_EVENT(PASSED)
            }
        } else if ((hdr.ina.pbm & ~meta.abm) != 0) {
            JOB_DROP(DROP_FOREIGN_PBM)
        } else {
            bit<1> version = 0;
            if ((hdr.ina.seq[15:0] & (meta.slot_mask + 1)) != 0) {
                version = 1;
            }
            bit<32> slot = (bit<32>)(meta.slot_base + (hdr.ina.seq[15:0] & meta.slot_mask));
            bit<32> cell = (slot << 1) | (bit<32>)version;
            bit<32> base = cell << ELEMS_LOG2;
            bit<32> set_index = (cell << BIER_SETS_LOG2) | (bit<32>)hdr.ina.si;
            bit<32> epoch;
            bit<32> seq;
            bit<32> gen;
            bit<8> done;
            bit<16> count;
            bit<4> op;
            bitmap_t stored_bitmap;
            bit<32> stored_gen;
            slot_epoch.read(epoch, cell);
            slot_seq.read(seq, cell);
            slot_gen.read(gen, cell);
            slot_sets_done.read(done, cell);
            slot_count.read(count, cell);
            slot_op.read(op, cell);
            set_bitmap.read(stored_bitmap, set_index);
            set_gen.read(stored_gen, set_index);
            bool newer = (int<32>)(hdr.ina.seq - seq) > 0;
            bool fresh = epoch != meta.epoch || newer;
            bitmap_t bitmap = 0;
            if (!fresh && stored_gen == gen) {
                bitmap = stored_bitmap;
            }
            bool complete = !fresh && done == meta.sets;
            bool absorb = false;
            if (fresh) {
                absorb = true;
            } else if (seq != hdr.ina.seq) {
                JOB_DROP(DROP_STALE)
            } else if (count != hdr.ina.count) {
                JOB_DROP(DROP_COUNT_MISMATCH)
            } else if (op != hdr.ina.op) {
                JOB_DROP(DROP_OP_MISMATCH)
            } else if ((bitmap & hdr.ina.pbm) != 0 && !complete) {
                JOB_DROP(DROP_DUPLICATE)
            } else if ((bitmap & hdr.ina.pbm) != 0) {
                // A retransmission for a complete cell: something after it was lost.
                JOB_EVENT(RESENT)
                INA_FOR_EACH_ELEM(LOAD_ELEM)
                slot_overflow.read(overflow, cell);
                bier_bits = hdr.ina.pbm;
                emit = true;
            } else {
                absorb = true;
            }

            if (absorb) {
                JOB_EVENT(ABSORBED)
                if ((hdr.ina.flags & FLAG_OVERFLOW) != 0) {
                    overflow = 1;
                }
                if (fresh) {
                    gen = gen + 1;
                    done = 0;
                    slot_gen.write(cell, gen);
                    slot_epoch.write(cell, meta.epoch);
                    slot_seq.write(cell, hdr.ina.seq);
                    slot_count.write(cell, hdr.ina.count);
                    slot_op.write(cell, hdr.ina.op);
                    INA_FOR_EACH_ELEM(STORE_ELEM)
                } else {
                    bit<1> stored_overflow;
                    slot_overflow.read(stored_overflow, cell);
                    overflow = overflow | stored_overflow;
                    bit<32> ovf_bits = 0;
                    if (hdr.ina.op == OP_SUM) {
                        INA_FOR_EACH_ELEM(SUM_ELEM)
                    } else if (hdr.ina.op == OP_MIN) {
                        INA_FOR_EACH_ELEM(MIN_ELEM)
                    } else {
                        INA_FOR_EACH_ELEM(MAX_ELEM)
                    }
                    if (ovf_bits[31:31] == 1) {
                        overflow = 1;
                    }
                }
                slot_overflow.write(cell, overflow);
                bitmap = bitmap | hdr.ina.pbm;
                set_bitmap.write(set_index, bitmap);
                set_gen.write(set_index, gen);
                if (bitmap == meta.abm) {
                    done = done + 1;  // this set is full
                }
                slot_sets_done.write(cell, done);
                if (done == meta.sets) {
                    emit = true;  // complete: the cell keeps the aggregate for resends
                    all_sets = true;
                } else {
                    meta.consumed = true;
                }
            }
        }

        if (emit) {
            hdr.ina.pbm = meta.abm;
            hdr.ina.flags = hdr.ina.flags & ~(bit<8>)FLAG_OVERFLOW;
            if (overflow == 1) {
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
                    // One copy per (port, set); bier_egress.p4 writes each set's A-BM.
                    std.mcast_grp = BIER_RESULT_GROUP;
                    meta.bier_result = true;
                } else {
                    std.mcast_grp = BIER_MCAST_GROUP;  // a resend, to the packet's set
                }
                meta.multicast = true;
                JOB_EVENT(MULTICAST)
            } else {
                hdr.ipv4.dst_addr = meta.parent_ip;
                JOB_EVENT(EMITTED)
            }
        }
    }
}
