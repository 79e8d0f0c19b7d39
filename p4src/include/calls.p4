// A call's control packets at the VAT node of their job on this switch (flag SYNC):
// never absorbed, nothing of a round written.
//
// - SYNC, at the job's root: the call's start, back to the worker (answer_sync).
// - ABORT, at the root: a worker gave up on its call after sending up to its seq;
//   the next call starts past it (advance), no further than a call can have
//   reached (aggregation.p4, "The window"): else DROP_ABORT_AHEAD.
// - QUERY, at the node that holds the worker's bit (its parent VAT node): HELD if
//   the node holds its contribution in a round still waiting for others, else SEND
//   (aggregation.p4, "Queries"); a node below the root whose round is complete asks
//   its parent in turn (ask_parent), unless it kept the round's result.
// Anything else addressed here (a REPLY, a SYNC at a node below the root) is
// refused as foreign; one addressed elsewhere passes on.
#ifndef INA_CALLS_P4
#define INA_CALLS_P4

control Calls(inout headers_t hdr, inout metadata_t meta) {
    bit<32> cell;
    cell_t cs;
    bit<64> done_up_to;    // the job's progress, at its root
    set_round_t round;     // only at a root spanning several BIER sets (open_sets)

    // The cell of the query's sequence number and what it holds.
    action open_cell() {
        cell = cell_index(meta.slot_base, meta.slot_mask, hdr.ina.seq);
        cells.read(cs, cell);
    }

    // At a root spanning sets: the round as the packet's set sees it.
    action open_sets() {
        set_cell_t sc;
        set_bitmaps.read(sc, set_index(cell, hdr.ina.si));
        round = set_round(cs, sc, hdr.ina.seq, meta.epoch, meta.lap);
    }

    // A QUERY's answer, back to the worker: HELD or SEND (in count).
    action answer_query(bool held) {
        hdr.ina.count = held ? QUERY_HELD : QUERY_SEND;
        hdr.ina.flags = hdr.ina.flags | FLAG_REPLY;
        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = meta.node_ip;
        hdr.ipv4.ttl = IPV4_INITIAL_TTL;
        hdr.udp.checksum = 0;
        meta.to_me = false;
        meta.job_stat = JOB_STAT_QUERIED;
        meta.job_stat2 = held ? JOB_STAT_QUERY_HELD : JOB_STAT_NONE;
    }

    // A QUERY for a round complete here, below the root: the parent says whether it
    // holds this node's aggregate (the query's P-BM is now this node's A-BM).
    action ask_parent() {
        hdr.ina.pbm = meta.abm;
        hdr.ipv4.dst_addr = meta.parent_ip;
        hdr.udp.checksum = 0;
        meta.to_me = false;
        meta.job_stat = JOB_STAT_QUERY_UP;
    }

    // A call's start: the call's first sequence number, back to the worker, with
    // the generation of the job's plan: 2W + 1 past the job's progress P, so that
    // the call's first 2W rounds take no cell of the last W rounds before P, whose
    // results a worker may still lack while the others have started this call
    // (its retransmissions must still find them). In a new plan (or deployment),
    // the first SYNC's proposal (its seq) fixes it: a worker whose call had
    // started under the previous plan proposes that call's start, so the workers
    // still agree.
    action answer_sync() {
        progress.read(done_up_to, (bit<32>)meta.job_index);
        bool first = done_up_to[63:32] != meta.epoch;
        hdr.ina.seq = first ? hdr.ina.seq : done_up_to[31:0] + meta.lap + 1;
        progress.write((bit<32>)meta.job_index,
                       first ? meta.epoch ++ (hdr.ina.seq - meta.lap - 1)
                             : done_up_to);
        hdr.ina.gen = meta.gen;
        hdr.ina.flags = hdr.ina.flags | FLAG_REPLY;
        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = meta.node_ip;
        hdr.ipv4.ttl = IPV4_INITIAL_TTL;
        hdr.udp.checksum = 0;
        meta.to_me = false;
        meta.job_stat = JOB_STAT_SYNCED;
    }

    apply {
        if (!meta.to_me) {
            meta.job_stat = JOB_STAT_PASSED;  // to the root, or its answer back
        } else if ((hdr.ina.flags & (FLAG_QUERY | FLAG_REPLY)) == FLAG_QUERY) {
            if ((meta.abm & hdr.ina.pbm) == 0 || (hdr.ina.pbm & ~meta.abm) != 0
                    || hdr.ina.si != meta.node_si) {
                refuse(meta, JOB_STAT_DROP_FOREIGN_PBM);  // not its worker's node
                return;
            }
            open_cell();
            if (meta.job_role != ROLE_ROOT || meta.sets == 1) {
                if (hdr.ina.gen != meta.gen || cs[CELL_EPOCH] != meta.epoch
                        || cs[CELL_SEQ] != hdr.ina.seq
                        || (cs[CELL_BITMAP] & hdr.ina.pbm) == 0) {
                    answer_query(false);  // not held here: send it
                } else if (cs[CELL_DONE] == 0) {
                    answer_query(true);
                } else if (meta.job_role == ROLE_ROOT || cs[CELL_KEPT] == 1) {
                    // Its result was lost: send it again (the root, or this node
                    // keeping the result, answers the values with it).
                    answer_query(false);
                } else {
                    ask_parent();
                }
            } else {
                open_sets();
                answer_query(hdr.ina.gen == meta.gen && !round.fresh
                             && cs[CELL_SEQ] == hdr.ina.seq && round.done != meta.sets
                             && (round.bitmap & hdr.ina.pbm) != 0);
            }
        } else if (meta.job_role != ROLE_ROOT || (hdr.ina.flags & FLAG_REPLY) != 0) {
            refuse(meta, JOB_STAT_DROP_FOREIGN_PBM);  // not the job's root
        } else if ((hdr.ina.flags & FLAG_ABORT) != 0) {
            progress.read(done_up_to, (bit<32>)meta.job_index);
            if (done_up_to[63:32] != meta.epoch
                    || (int<32>)(hdr.ina.seq - done_up_to[31:0])
                       > (int<32>)(meta.reach - meta.lap)) {
                refuse(meta, JOB_STAT_DROP_ABORT_AHEAD);
            } else {
                advance(meta.job_index, meta.epoch, hdr.ina.seq);
                refuse(meta, JOB_STAT_ABORTED);
            }
        } else {
            answer_sync();
        }
    }
}

#endif
