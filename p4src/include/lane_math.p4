// SWAR arithmetic on lanes: each 32-bit (or, the *16 functions, 16-bit) element of
// one lane is combined with the same element of the other; no carry or borrow
// crosses an element. BMv2 computes
// a bit<2048> like a bit<32> (a bignum either way), so one lane operation does
// the work of 64. controller/ina/protocol/lanes.py has the same formulas, their derivation,
// and tests against numpy.
#ifndef INA_LANE_MATH_P4
#define INA_LANE_MATH_P4

// Per element a + b, wrapping like int32: the low 31 bits add without carrying
// out, the top bit is the XOR of both top bits and the carry into it.
lane_t lane_sum(in lane_t a, in lane_t b) {
    return ((a & LANE_LOW) + (b & LANE_LOW)) ^ ((a ^ b) & LANE_HIGH);
}

// For s = lane_sum(a, b): an element's top bit is set iff it overflowed (its
// sign differs from both operands'). Only the top bits mean anything: the
// caller masks with LANE_HIGH once for all lanes.
lane_t lane_overflow(in lane_t a, in lane_t b, in lane_t s) {
    return (a ^ s) & (b ^ s);
}

// All ones in the elements where a >= b (signed), zeros elsewhere. Signs that
// differ decide by themselves; equal signs compare the low 31 bits, whose
// difference (a | H) - (b & L) never borrows across elements. Each element's
// top bit then spreads over the element.
lane_t lane_ge_mask(in lane_t a, in lane_t b) {
    lane_t ge = ((~a & b) | (~(a ^ b) & ((a | LANE_HIGH) - (b & LANE_LOW)))) & LANE_HIGH;
    return (ge << 1) - (ge >> 31);
}

lane_t lane_max(in lane_t a, in lane_t b) {
    lane_t m = lane_ge_mask(a, b);
    return (a & m) | (b & ~m);
}

lane_t lane_min(in lane_t a, in lane_t b) {
    lane_t m = lane_ge_mask(a, b);
    return (b & m) | (a & ~m);
}

// 16-bit elements: the same formulas with the top bit of every 16-bit element
// (LANE_HIGH16) and the other 15 (LANE_LOW16); lane_overflow serves both widths.
lane_t lane_sum16(in lane_t a, in lane_t b) {
    return ((a & LANE_LOW16) + (b & LANE_LOW16)) ^ ((a ^ b) & LANE_HIGH16);
}

lane_t lane_ge_mask16(in lane_t a, in lane_t b) {
    lane_t ge = ((~a & b) | (~(a ^ b) & ((a | LANE_HIGH16) - (b & LANE_LOW16)))) & LANE_HIGH16;
    return (ge << 1) - (ge >> 15);
}

lane_t lane_max16(in lane_t a, in lane_t b) {
    lane_t m = lane_ge_mask16(a, b);
    return (a & m) | (b & ~m);
}

lane_t lane_min16(in lane_t a, in lane_t b) {
    lane_t m = lane_ge_mask16(a, b);
    return (b & m) | (a & ~m);
}

#endif
