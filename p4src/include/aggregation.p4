// The VAT node of the packet's job on this switch (draft-song-ina-00, section 2.1).
//
// A-BM & P-BM == 0: the packet is not for this node and goes on toward its
// address (or, addressed here, is foreign and dropped). Otherwise its array is
// combined into a cell; when the cell's bitmap reaches the A-BM, this packet
// leaves carrying the aggregate with P-BM = A-BM: toward the parent, or, at the
// root, by BIER to every worker.
//
// Widths and NODATA (INA version 4). A round takes one element width, as it takes
// one op (another: DROP_WIDTH_MISMATCH), and combines 32-bit or
// 16-bit elements (lanes_<op> or lanes_<op>16). It also takes one kind, data or
// NODATA (no array), fixed by its first contribution (the cell's DATA bit); the
// other kind, retransmissions included, is refused (DROP_KIND_MISMATCH). So a
// packet leaves with the array it came with, or none: it never grows. (It could
// not: BMv2 lets a packet grow by at most 512 bytes over its arrival size, a
// recirculated or cloned copy too, and aborts the switch past it; an array is
// 1,280 bytes.) A round of data stores its first array (lanes_store) and combines
// the others with it; a NODATA round only ORs P-BMs (and OVERFLOW flags) into the
// cell, no lane work, and completes as NODATA.
//
// Congestion marks (INA version 5, ATP's scheme). A contribution's ECN_CE (a
// switch on its path was congested: congestion.p4) is ORed into the cell's CE bit,
// in the same register write as the rest of the cell; the packet that leaves a
// complete round carries CE if any contribution had it, and so does a resend (the
// cell's CE, or the retransmission's own). So every worker's result tells whether
// any path of the round was congested.
//
// Loss recovery (SwitchML's scheme, extended to a tree). A job's W = slots slots
// have two cells each, 2W cells from 2 * slot_base on; sequence number s uses
// cell 2 * slot_base + (s mod 2W): s and s + W, consecutive rounds through the
// pool, use the two cells of one slot. Workers
// send s only after every result up to s - 2*slots has reached every worker
// (their sliding window), so another round may overwrite a cell; s arriving at
// a cell that holds s + 2W (the round after it there) is a late duplicate. A
// complete cell keeps its aggregate: a retransmission for it (its bit already
// set) sends the aggregate again, toward the parent or, at the root, by BIER to
// the retransmitter's bits; below the root, a node that kept the round's result
// sends that back by BIER instead ("Results kept below the root"). A bit already
// set in an incomplete cell is a duplicate. Nothing is ever added twice.
//
// The window. One packet from a member must not freeze its job: a round far
// ahead in a cell makes the job's later rounds there look old, an ABORT far
// ahead moves every later call there. The root keeps the job's progress P (the
// highest sequence number completed or given up) and takes what a call can have
// sent: a worker sends s only once s - W is complete, but for a call's first W
// packets (P + 2W + 1 to P + 3W: the call's descriptor and a float call's
// exponents, sent together), and sends it again only while some worker lacks its
// result. So it takes a contribution if P - 2W <= s <= P + 3W (the entry's reach,
// 5W, from P - 2W; past it: DROP_AHEAD; before it: DROP_STALE, every worker holds
// that result) and an ABORT if its seq <= P + 3W (DROP_ABORT_AHEAD), both only
// once a SYNC of this plan has set P (before: DROP_AHEAD, DROP_ABORT_AHEAD). A node below the root
// does not know P: there any other round replaces a cell's, but the one a lap
// before it (s = cell's - 2W: stale), so a stray round lasts until the job's
// next round in that cell. What a member can still do is what it can do by not
// contributing: hold up the call in progress (its own round within the window,
// or the first contribution of a round with another op, width or kind, which then
// refuses everyone else's); its workers give that call up (ABORT) and the next one
// is exact. A round does not take its first contribution's element count: the
// values past a chunk's count are its padding (zeros), summed like the rest, and
// the result carries the count of the packet that completes the round or is
// answered (a worker takes only a result of its own chunk's count). Since ABORTs are legitimate, a member can also move the job's
// calls forward, at most 3W sequence numbers per ABORT.
//
// Queries (INA version 7). Before a worker sends a chunk's values again, it asks
// the node that holds its bit (its parent VAT node) with a QUERY, a header alone:
// HELD if the node holds its contribution in a round still waiting for others,
// else SEND (the node lacks it; or, at the root, the round is complete: its
// result was lost on the way, and the values sent again make the root send it
// again). A node below the root whose round is complete asks its parent in turn
// (unless it kept the round's result: then it answers SEND itself, below),
// for its own bits (the A-BM), on the worker's behalf: the answer goes to the
// worker (the query keeps its IPv4 source). So a round that lost one
// contribution gets values again from that contribution's worker only, not from
// every worker. Nothing is written for a query.
//
// Results kept below the root. A result passing down through a node below the
// root toward every worker of the node, of the round complete in its cell,
// replaces the node's aggregate there (KEPT). A worker that lost it asks (SEND: the node answers itself) and sends
// its values again; the node sends the kept result back to it by BIER, and
// nothing crosses its uplink. Before, its aggregate went up as a copy and the
// root's result came down again: two packets on the path's busiest links for
// one lost on the last hop.
//
// Registers hold only what the data plane writes. A cell whose epoch differs
// from the job entry's is a leftover of a torn-down job and counts as empty.
#ifndef INA_AGGREGATION_P4
#define INA_AGGREGATION_P4

control Aggregation(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t std) {
    Calls() calls;

    // The packet's cell and what it holds.
    bit<32> cell;
    cell_t cs;
    lane_t wrapped;        // per element: a SUM overflowed (top bits)
    bit<64> done_up_to;    // progress of the job, at its root
    // Only the path of a root spanning several BIER sets:
    set_round_t round;     // the round as the packet's set sees it (open_sets)
    bool complete;         // every set full: the aggregate leaves with this packet

#include "lanes.p4"

    // A-BM & P-BM is zero (not for this node: on toward its address), or the P-BM
    // has bits outside the A-BM (foreign).
    action pass_on() {
        meta.job_stat = JOB_STAT_PASSED;
    }

    // The cell of the packet's sequence number and what it holds.
    action open_cell() {
        cell = cell_index(meta.slot_base, meta.slot_mask, hdr.ina.seq);
        cells.read(cs, cell);
        wrapped = 0;
        // Only a root spanning sets reads it (open_sets sets it); set here, in an action
        // every packet takes, so that no path leaves it unset (p4c checks every path).
        round = {fresh = false, bitmap = 0, gen = 0, done = 0};
    }

    // At the root: the cell, and the job's progress, which bounds the window.
    action open_root_cell() {
        open_cell();
        progress.read(done_up_to, (bit<32>)meta.job_index);
    }

    // A node in one set. The contribution starts the cell's round.
    action start_round() {
        lanes_store();
        cells.write(cell, cell_of(bitmap = hdr.ina.pbm, epoch = meta.epoch, seq = hdr.ina.seq,
                                  gen = cs[CELL_GEN] + 1, count = hdr.ina.count,
                                  op = hdr.ina.op, width = hdr.ina.width, data = 1,
                                  overflow = (bit<1>)((hdr.ina.flags & FLAG_OVERFLOW) != 0),
                                  ce = hdr.ina.ecn[ECN_CE_BIT], kept = 0, done = 0));
        meta.job_stat = JOB_STAT_ABSORBED;
        meta.consumed = true;
    }

    // A NODATA contribution starts a NODATA round: its bit alone.
    action start_round_nodata() {
        cells.write(cell, cell_of(bitmap = hdr.ina.pbm, epoch = meta.epoch, seq = hdr.ina.seq,
                                  gen = cs[CELL_GEN] + 1, count = hdr.ina.count,
                                  op = hdr.ina.op, width = hdr.ina.width, data = 0,
                                  overflow = (bit<1>)((hdr.ina.flags & FLAG_OVERFLOW) != 0),
                                  ce = hdr.ina.ecn[ECN_CE_BIT], kept = 0, done = 0));
        meta.job_stat = JOB_STAT_ABSORBED;
        meta.consumed = true;
    }

    // It joins the round, which lacks more contributions (after lanes_<op>).
    action join_round() {
        bit<1> overflow = cs[CELL_OVERFLOW]
                          | (bit<1>)((hdr.ina.flags & FLAG_OVERFLOW) != 0
                                     || (wrapped & LANE_HIGH) != 0);
        cells.write(cell, cell_of(bitmap = cs[CELL_BITMAP] | hdr.ina.pbm,
                                  epoch = cs[CELL_EPOCH], seq = cs[CELL_SEQ],
                                  gen = cs[CELL_GEN], count = cs[CELL_COUNT], op = cs[CELL_OP],
                                  width = cs[CELL_WIDTH], data = 1, overflow = overflow,
                                  ce = cs[CELL_CE] | hdr.ina.ecn[ECN_CE_BIT], kept = 0,
                                  done = cs[CELL_DONE]));
        meta.job_stat = JOB_STAT_ABSORBED;
        meta.consumed = true;
    }

    // A NODATA contribution joins a NODATA round: its bit, no lane work.
    action join_round_nodata() {
        cells.write(cell, cell_of(bitmap = cs[CELL_BITMAP] | hdr.ina.pbm,
                                  epoch = cs[CELL_EPOCH], seq = cs[CELL_SEQ],
                                  gen = cs[CELL_GEN], count = cs[CELL_COUNT], op = cs[CELL_OP],
                                  width = cs[CELL_WIDTH], data = 0,
                                  overflow = cs[CELL_OVERFLOW]
                                             | (bit<1>)((hdr.ina.flags & FLAG_OVERFLOW) != 0),
                                  ce = cs[CELL_CE] | hdr.ina.ecn[ECN_CE_BIT], kept = 0,
                                  done = cs[CELL_DONE]));
        meta.job_stat = JOB_STAT_ABSORBED;
        meta.consumed = true;
    }

    // A node with this one contributor (a job of one worker, say): the packet
    // starts and completes the round; the cell keeps its values for resends, the
    // packet carries them on as they are.
    action complete_alone() {
        lanes_store();
        cells.write(cell, cell_of(bitmap = meta.abm, epoch = meta.epoch, seq = hdr.ina.seq,
                                  gen = cs[CELL_GEN] + 1, count = hdr.ina.count,
                                  op = hdr.ina.op, width = hdr.ina.width, data = 1,
                                  overflow = (bit<1>)((hdr.ina.flags & FLAG_OVERFLOW) != 0),
                                  ce = hdr.ina.ecn[ECN_CE_BIT], kept = 0, done = 1));
        meta.job_stat = JOB_STAT_ABSORBED;
    }

    // The same without data: the packet goes on as it is (NODATA).
    action complete_alone_nodata() {
        cells.write(cell, cell_of(bitmap = meta.abm, epoch = meta.epoch, seq = hdr.ina.seq,
                                  gen = cs[CELL_GEN] + 1, count = hdr.ina.count,
                                  op = hdr.ina.op, width = hdr.ina.width, data = 0,
                                  overflow = (bit<1>)((hdr.ina.flags & FLAG_OVERFLOW) != 0),
                                  ce = hdr.ina.ecn[ECN_CE_BIT], kept = 0, done = 1));
        meta.job_stat = JOB_STAT_ABSORBED;
    }

    // It completes the round (after lanes_<op>): the cell keeps the
    // aggregate for resends, the packet carries it on.
    action complete_round() {
        bool overflow = (hdr.ina.flags & FLAG_OVERFLOW) != 0 || cs[CELL_OVERFLOW] == 1
                        || (wrapped & LANE_HIGH) != 0;
        bit<1> ce = cs[CELL_CE] | hdr.ina.ecn[ECN_CE_BIT];
        cells.write(cell, cell_of(bitmap = meta.abm, epoch = meta.epoch, seq = hdr.ina.seq,
                                  gen = cs[CELL_GEN], count = hdr.ina.count, op = hdr.ina.op,
                                  width = hdr.ina.width, data = 1, overflow = (bit<1>)overflow,
                                  ce = ce, kept = 0, done = 1));
        lanes_load();
        hdr.ina.flags = (hdr.ina.flags & ~FLAG_OVERFLOW)
                        | (((bit<8>)(bit<1>)overflow) * FLAG_OVERFLOW);
        hdr.ina.ecn = hdr.ina.ecn | ((bit<8>)ce * ECN_CE);
        meta.job_stat = JOB_STAT_ABSORBED;
    }

    // A NODATA contribution completes a NODATA round: the packet goes on as it is.
    action complete_round_nodata() {
        bit<1> overflow = cs[CELL_OVERFLOW] | (bit<1>)((hdr.ina.flags & FLAG_OVERFLOW) != 0);
        bit<1> ce = cs[CELL_CE] | hdr.ina.ecn[ECN_CE_BIT];
        cells.write(cell, cell_of(bitmap = meta.abm, epoch = meta.epoch, seq = hdr.ina.seq,
                                  gen = cs[CELL_GEN], count = hdr.ina.count, op = hdr.ina.op,
                                  width = hdr.ina.width, data = 0, overflow = overflow,
                                  ce = ce, kept = 0, done = 1));
        hdr.ina.flags = (hdr.ina.flags & ~FLAG_OVERFLOW) | (((bit<8>)overflow) * FLAG_OVERFLOW);
        hdr.ina.ecn = hdr.ina.ecn | ((bit<8>)ce * ECN_CE);
        meta.job_stat = JOB_STAT_ABSORBED;
    }

    // A retransmission for a complete cell: something after it was lost.
    action resend() {
        lanes_load();
        hdr.ina.flags = (hdr.ina.flags & ~FLAG_OVERFLOW)
                        | (((bit<8>)cs[CELL_OVERFLOW]) * FLAG_OVERFLOW);
        hdr.ina.ecn = hdr.ina.ecn | ((bit<8>)cs[CELL_CE] * ECN_CE);
        meta.job_stat = JOB_STAT_RESENT;
    }

    // The same for a NODATA round.
    action resend_nodata() {
        hdr.ina.flags = (hdr.ina.flags & ~FLAG_OVERFLOW)
                        | (((bit<8>)cs[CELL_OVERFLOW]) * FLAG_OVERFLOW);
        hdr.ina.ecn = hdr.ina.ecn | ((bit<8>)cs[CELL_CE] * ECN_CE);
        meta.job_stat = JOB_STAT_RESENT;
    }

    // A result passing down through this node below the root, of the round complete
    // here: the cell keeps its flags and the P-BM it came with (a NODATA round's
    // whole result) ...
    action keep_flags() {
        cells.write(cell, cell_of(bitmap = hdr.ina.pbm, epoch = cs[CELL_EPOCH],
                                  seq = cs[CELL_SEQ], gen = cs[CELL_GEN],
                                  count = cs[CELL_COUNT], op = cs[CELL_OP],
                                  width = cs[CELL_WIDTH], data = cs[CELL_DATA],
                                  overflow = (bit<1>)((hdr.ina.flags & FLAG_OVERFLOW) != 0),
                                  ce = hdr.ina.ecn[ECN_CE_BIT], kept = 1,
                                  done = cs[CELL_DONE]));
        meta.job_stat2 = JOB_STAT_KEPT;
    }

    // ... and a round of data's array too (one action: BMv2's cost is per action), so
    // that a worker that lost it and sends its values again is answered from here.
    action keep_result() {
        lanes_store();
        keep_flags();
    }

    // At a root spanning sets: the round as the packet's set sees it.
    action open_sets() {
        set_cell_t sc;
        set_bitmaps.read(sc, set_index(cell, hdr.ina.si));
        round = set_round(cs, sc, hdr.ina.seq, meta.epoch, meta.lap);
    }

    // What to do with the packet, as its job event.
    action judge() {
        meta.job_stat =
            round.fresh ? JOB_STAT_ABSORBED :
            ((cs[CELL_SEQ] != hdr.ina.seq) ? JOB_STAT_DROP_STALE :
            ((cs[CELL_OP] != hdr.ina.op) ? JOB_STAT_DROP_OP_MISMATCH :
            ((cs[CELL_WIDTH] != hdr.ina.width) ? JOB_STAT_DROP_WIDTH_MISMATCH :
            ((cs[CELL_DATA] != (bit<1>)hdr.data.isValid()) ? JOB_STAT_DROP_KIND_MISMATCH :
            (((round.bitmap & hdr.ina.pbm) == 0) ? JOB_STAT_ABSORBED :
            ((round.done != meta.sets) ? JOB_STAT_DROP_DUPLICATE :
            JOB_STAT_RESENT))))));  // a retransmission for a complete cell: resend it
    }

    // The contribution is in (after lanes_<op> or lanes_store, or nothing in a
    // NODATA round): record the state.
    action record_sets() {
        round.bitmap = round.bitmap | hdr.ina.pbm;
        round.gen = round.fresh ? round.gen + 1 : round.gen;
        round.done = (round.bitmap == meta.abm) ? round.done + 1 : round.done;  // set full
        complete = round.done == meta.sets;
        bool overflow = (hdr.ina.flags & FLAG_OVERFLOW) != 0
                        || (!round.fresh && cs[CELL_OVERFLOW] == 1) || (wrapped & LANE_HIGH) != 0;
        bool ce = (hdr.ina.ecn & ECN_CE) != 0 || (!round.fresh && cs[CELL_CE] == 1);
        cells.write(cell, cell_of(bitmap = 0, epoch = meta.epoch, seq = hdr.ina.seq,
                                  gen = round.gen, count = hdr.ina.count, op = hdr.ina.op,
                                  width = hdr.ina.width, data = (bit<1>)hdr.data.isValid(),
                                  overflow = (bit<1>)overflow, ce = (bit<1>)ce, kept = 0,
                                  done = round.done));
        set_bitmaps.write(set_index(cell, hdr.ina.si),
                          set_cell_of(gen = round.gen, bitmap = round.bitmap));
        hdr.ina.flags = overflow ? hdr.ina.flags | FLAG_OVERFLOW
                                 : hdr.ina.flags & ~FLAG_OVERFLOW;
        hdr.ina.ecn = hdr.ina.ecn | ((bit<8>)(bit<1>)ce * ECN_CE);
        meta.consumed = !complete;
    }

    // The aggregate leaves toward the parent with P-BM = A-BM.
    action to_parent() {
        hdr.ina.pbm = meta.abm;
        hdr.ipv4.src_addr = meta.node_ip;
        hdr.ipv4.dst_addr = meta.parent_ip;
        hdr.udp.checksum = 0;  // payload changed; 0 = none, valid for IPv4
        meta.to_me = false;
        meta.consumed = false;
        meta.job_stat2 = JOB_STAT_EMITTED;
    }

    // A result leaves by BIER to bits, carrying pbm, through group: the
    // root's to every worker through the job's group (a copy per port toward its
    // workers, or per such (port, set) for a job spanning sets, all_sets, where
    // bier_egress.p4 writes each set's A-BM); the root's resend to the
    // retransmitter's bits through the group of every BIER port; a result kept below
    // the root to the retransmitter's bit through the job's group there (egress
    // prunes the other ports), with the P-BM it came with: the root is not asked,
    // and no copy crosses the node's uplink.
    action to_workers(bitmap_t bits, bitmap_t pbm, bit<16> group, bool all_sets) {
        hdr.ina.pbm = pbm;
        hdr.ina.flags = hdr.ina.flags | FLAG_RESULT;
        hdr.ipv4.src_addr = meta.node_ip;
        hdr.ipv4.dst_addr = 0;  // each edge switch sets its host's address
        hdr.ipv4.ttl = IPV4_INITIAL_TTL;
        hdr.udp.checksum = 0;
        bier_push(hdr, hdr.ina.si, bits);
        std.mcast_grp = group;
        meta.bier_result = all_sets && meta.sets != 1;
        meta.to_me = false;
        meta.consumed = false;
        meta.job_stat2 = JOB_STAT_MULTICAST;
    }

    apply {
        if (hdr.bier.isValid()) {
            // A result on its way down (ingress applies this control to BIER packets
            // at a node below the root only): kept if it is the round complete here
            // and on its way to every worker of this node (its BitString holds the
            // A-BM). A node may aggregate workers whose results reach them by other
            // paths: its job group has no port toward them, and a result it kept
            // could not answer them.
            open_cell();
            if (hdr.ina.si == meta.node_si && (hdr.ina.pbm & meta.abm) == meta.abm
                    && (hdr.bier.bitstring & meta.abm) == meta.abm
                    && hdr.ina.gen == meta.gen && cs[CELL_EPOCH] == meta.epoch
                    && cs[CELL_SEQ] == hdr.ina.seq && cs[CELL_DONE] != 0
                    && cs[CELL_KEPT] == 0 && cs[CELL_OP] == hdr.ina.op && cs[CELL_WIDTH] == hdr.ina.width
                    && cs[CELL_DATA] == (bit<1>)hdr.data.isValid()) {
                if (hdr.data.isValid()) {
                    keep_result();
                } else {
                    keep_flags();
                }
            }
            return;
        }
        if ((hdr.ina.flags & FLAG_SYNC) != 0) {
            calls.apply(hdr, meta);  // a call's control packet: never absorbed
            return;
        }
        if ((meta.abm & hdr.ina.pbm) == 0 || hdr.ina.si != meta.node_si) {
            if (meta.to_me) {
                refuse(meta, JOB_STAT_DROP_FOREIGN_PBM);
            } else {
                pass_on();
            }
            return;
        }
        if ((hdr.ina.pbm & ~meta.abm) != 0) {
            refuse(meta, JOB_STAT_DROP_FOREIGN_PBM);
            return;
        }
        if (hdr.ina.gen != meta.gen) {
            // Of another plan of the job (in flight when it was re-planned): its
            // P-BM may not fit this plan's tree. Its sender will send it again.
            refuse(meta, JOB_STAT_DROP_OLD_PLAN);
            return;
        }
        if (meta.job_role == ROLE_ROOT) {
            open_root_cell();
            // In the window: seq - P + 2W in 0..5W (reach), one test on the common path.
            if (done_up_to[63:32] != meta.epoch
                    || hdr.ina.seq - done_up_to[31:0] + meta.lap > meta.reach) {
                if (done_up_to[63:32] != meta.epoch
                        || (int<32>)(hdr.ina.seq - done_up_to[31:0]) > 0) {
                    refuse(meta, JOB_STAT_DROP_AHEAD);  // past the window, or no call of this plan
                } else {
                    refuse(meta, JOB_STAT_DROP_STALE);  // before it: every worker has the result
                }
                return;
            }
        } else {
            open_cell();
        }
        if (meta.job_role != ROLE_ROOT || meta.sets == 1) {
            // A node in one BIER set: the common paths, one action each. Any round
            // but the one a lap after the packet's (s + 2W: it is stale) is replaced.
            if (other_round(cs, hdr.ina.seq, meta.epoch, meta.lap)) {
                if (hdr.data.isValid()) {
                    if (hdr.ina.pbm == meta.abm) {  // a node with this one contributor
                        complete_alone();
                    } else {
                        start_round();
                    }
                } else if (hdr.ina.pbm == meta.abm) {
                    complete_alone_nodata();
                } else {
                    start_round_nodata();
                }
            } else if (cs[CELL_SEQ] != hdr.ina.seq) {
                refuse(meta, JOB_STAT_DROP_STALE);
            } else if (cs[CELL_OP] != hdr.ina.op) {
                refuse(meta, JOB_STAT_DROP_OP_MISMATCH);
            } else if (cs[CELL_WIDTH] != hdr.ina.width) {
                refuse(meta, JOB_STAT_DROP_WIDTH_MISMATCH);
            } else if (cs[CELL_DATA] != (bit<1>)hdr.data.isValid()) {
                refuse(meta, JOB_STAT_DROP_KIND_MISMATCH);  // so the packet never grows
            } else if ((cs[CELL_BITMAP] & hdr.ina.pbm) != 0) {
                if (cs[CELL_DONE] == 0) {
                    refuse(meta, JOB_STAT_DROP_DUPLICATE);
                } else if (hdr.data.isValid()) {
                    resend();
                } else {
                    resend_nodata();
                }
            } else if (!hdr.data.isValid()) {
                if ((cs[CELL_BITMAP] | hdr.ina.pbm) == meta.abm) {
                    complete_round_nodata();
                } else {
                    join_round_nodata();
                }
            }  // else its array joins the round's, below (job_stat still NONE)
        } else {
            // A root spanning several sets: a bitmap per (cell, set).
            open_sets();
            judge();
            if (meta.job_stat == JOB_STAT_ABSORBED) {
                if (round.fresh && hdr.data.isValid()) {
                    lanes_store();  // the round's first data; later ones join it below
                }
            } else if (meta.job_stat == JOB_STAT_RESENT) {
                if (hdr.data.isValid()) {
                    resend();
                } else {
                    resend_nodata();
                }
            } else {
                meta.consumed = true;
            }
        }

        // The packet's array joins the round's: by (width, op), for both paths (no
        // state is set for it: BMv2 pays per action, and a condition costs less).
        if (hdr.data.isValid()
                && ((meta.job_stat == JOB_STAT_NONE
                     && (meta.job_role != ROLE_ROOT || meta.sets == 1))
                    || (meta.job_stat == JOB_STAT_ABSORBED && !round.fresh
                        && meta.job_role == ROLE_ROOT && meta.sets != 1))) {
            if (hdr.ina.width == WIDTH32) {
                if (hdr.ina.op == OP_SUM) {
                    lanes_sum();
                } else if (hdr.ina.op == OP_MIN) {
                    lanes_min();
                } else {
                    lanes_max();
                }
            } else if (hdr.ina.op == OP_SUM) {
                lanes_sum16();
            } else if (hdr.ina.op == OP_MIN) {
                lanes_min16();
            } else {
                lanes_max16();
            }
        }
        if (meta.job_role != ROLE_ROOT || meta.sets == 1) {
            if (meta.job_stat == JOB_STAT_NONE) {  // its array joined the round's
                if ((cs[CELL_BITMAP] | hdr.ina.pbm) == meta.abm) {
                    complete_round();
                } else {
                    join_round();
                }
            }
        } else if (meta.job_stat == JOB_STAT_ABSORBED) {
            record_sets();
            if (complete && !round.fresh && hdr.data.isValid()) {
                lanes_load();
            }
        }

        // Absorbed and not consumed: this packet completed its cell.
        if (meta.job_stat == JOB_STAT_ABSORBED && !meta.consumed) {
            if (meta.job_role == ROLE_ROOT) {
                advance(meta.job_index, meta.epoch, hdr.ina.seq);
                to_workers(meta.abm, meta.abm, JOB_GROUP_BASE + (bit<16>)meta.job_index, true);
            } else {
                to_parent();
            }
        } else if (meta.job_stat == JOB_STAT_RESENT) {
            if (meta.job_role == ROLE_ROOT) {
                to_workers(hdr.ina.pbm, meta.abm, BIER_MCAST_GROUP, false);
            } else if (cs[CELL_KEPT] == 1) {
                to_workers(hdr.ina.pbm, cs[CELL_BITMAP],
                           JOB_GROUP_BASE + (bit<16>)meta.job_index, false);
            } else {
                to_parent();
            }
        }
    }
}

#endif
