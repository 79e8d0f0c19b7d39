// A VAT node's state on this switch, which two controls share: Aggregation
// (aggregation.p4: a round's contributions and results) and Calls (calls.p4: a
// call's SYNC, QUERY and ABORT); and the actions both take on it. Only what the
// data plane writes is in registers (BMv2's P4Runtime server cannot write them):
// a job's settings are its vat_jobs entry's action data (jobs.p4).
#ifndef INA_CELLS_P4
#define INA_CELLS_P4

// Each job's cells: 2W from 2 * slot_base on, two per slot (aggregation.p4, "Loss
// recovery"); a cell_t (its CELL_* fields, generated.p4) each. Their arrays are in
// the lanes' registers (lanes.p4).
register<cell_t>(2 * AGG_SLOTS) cells;
// At a root spanning BIER sets: per (cell, set), the round's contributors there.
register<set_cell_t>(2 * AGG_SLOTS * BIER_SETS) set_bitmaps;
// Per job index, at its root: the entry's epoch ++ the highest seq completed or
// given up (ABORT): the job's progress P.
register<bit<64>>(MAX_JOBS) progress;

// The cell of sequence number seq in the job's slots: s and s + W, consecutive
// rounds through the pool, use the two cells of one slot.
bit<32> cell_index(in bit<16> slot_base, in bit<16> slot_mask, in bit<32> seq) {
    return ((bit<32>)slot_base << 1) + (bit<32>)(seq[15:0] & ((slot_mask << 1) | 1));
}

// Whether a cell holding cs holds another round than seq's: another deployment's, or
// any round but the one a lap after seq's (s + 2W: seq is then stale).
bool other_round(in cell_t cs, in bit<32> seq, in bit<32> epoch, in bit<32> lap) {
    return cs[CELL_EPOCH] != epoch || (cs[CELL_SEQ] != seq && cs[CELL_SEQ] - seq != lap);
}

// At a root spanning sets: a round as the packet's set sees it.
struct set_round_t {
    bool fresh;          // the cell holds another round (other_round): this one starts
    bitmap_t bitmap;     // the round's contributors so far in the packet's set
    bit<32> gen;         // tags the round's per-set bitmaps
    bit<8> done;         // the round's full sets
}

// The index of a (cell, set) bitmap.
bit<32> set_index(in bit<32> cell, in bit<8> si) {
    return (cell << BIER_SETS_LOG2) | (bit<32>)si;
}

// The round in a cell holding cs whose (cell, set) bitmap holds sc, for seq.
set_round_t set_round(in cell_t cs, in set_cell_t sc, in bit<32> seq, in bit<32> epoch,
                      in bit<32> lap) {
    bool fresh = other_round(cs, seq, epoch, lap);
    return {fresh = fresh,
            bitmap = (!fresh && sc[SET_GEN] == cs[CELL_GEN]) ? sc[SET_BITMAP] : 0,
            gen = cs[CELL_GEN],
            done = fresh ? 8w0 : cs[CELL_DONE]};
}

// At the root: seq completed or given up; the job's progress moves to it if it
// lies ahead. (The window's checks let in only packets of this plan's epoch.)
action advance(in bit<8> job_index, in bit<32> epoch, in bit<32> seq) {
    bit<64> done_up_to;
    progress.read(done_up_to, (bit<32>)job_index);
    progress.write((bit<32>)job_index,
                   (int<32>)(seq - done_up_to[31:0]) > 0 ? epoch ++ seq : done_up_to);
}

// A packet a job check refused: counted for its job (stat), then dropped.
action refuse(inout metadata_t meta, in bit<8> stat) {
    meta.job_stat = stat;
    meta.consumed = true;
}

#endif
