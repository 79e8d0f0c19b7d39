/*
 * In-network aggregation (draft-song-ina-00) for BMv2 simple_switch (v1model).
 *
 * Workers send int32 arrays in INA packets (IPv4/UDP) to their parent VAT node;
 * a packet's values are held and combined as wide lanes (lanes.p4, lane_math.p4).
 * A switch holding a VAT node of the packet's job tests A-BM & P-BM: zero, the
 * packet goes on; otherwise its array is combined into a slot, and when the
 * slot has every bit of the A-BM the aggregate leaves toward the parent with
 * P-BM = A-BM. The root sends the result by BIER (RFC 8279/8296) with
 * BitString = A-BM, one copy per BIER set the job spans (a packet carries one
 * set: the INA header's si, the BIER BIFT-id); edge switches decapsulate it
 * to the workers. Every packet leaving a port may carry a congestion mark
 * (include/congestion.p4), which aggregation carries into results.
 *
 * Sizes and codes come from include/generated.p4, the per-lane registers and
 * actions of the Aggregation control from include/lanes.p4 (both written by
 * python -m ina.protocol.p4gen).
 * The controller reaches tables and counters by the names in
 * controller/ina/control/p4names.py, which a test checks against the P4Info.
 */
#include <core.p4>
#include <v1model.p4>

#include "include/generated.p4"
#include "include/defs.p4"
#include "include/lane_math.p4"
#include "include/headers.p4"
#include "include/bier_push.p4"
#include "include/parser.p4"
#include "include/verify_checksum.p4"
#include "include/edge.p4"
#include "include/addresses.p4"
#include "include/ina_validate.p4"
#include "include/jobs.p4"
#include "include/cells.p4"
#include "include/calls.p4"
#include "include/aggregation.p4"
#include "include/routing.p4"
#include "include/bier_ingress.p4"
#include "include/ingress.p4"
#include "include/bier_egress.p4"
#include "include/congestion.p4"
#include "include/egress.p4"
#include "include/compute_checksum.p4"
#include "include/deparser.p4"

V1Switch(
    InaParser(),
    InaVerifyChecksum(),
    InaIngress(),
    InaEgress(),
    InaComputeChecksum(),
    InaDeparser()
) main;
