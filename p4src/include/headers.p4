// Headers and metadata.
#ifndef INA_HEADERS_P4
#define INA_HEADERS_P4

// The controller's packets: packet-out arrives on CPU_PORT with this header in
// front, to be sent out of egress_port; packet-in leaves through CPU_PORT with
// the port it came in on (P4Runtime PacketIn/PacketOut metadata).
@controller_header("packet_out")
header packet_out_h {
    port_t egress_port;
    bit<7> pad;
}

@controller_header("packet_in")
header packet_in_h {
    port_t ingress_port;
    bit<7> pad;
}

header ethernet_h {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

// RFC 8296 BIER header with a BITSTRING_BITS-bit BitString.
header bier_h {
    bit<20>  bift_id;
    bit<3>   tc;
    bit<1>   s;
    bit<8>   ttl;
    bit<4>   nibble;
    bit<4>   version;
    bit<4>   bsl;
    bit<20>  entropy;
    bit<2>   oam;
    bit<2>   rsv;
    bit<6>   dscp;
    bit<6>   proto;
    bit<16>  bfir_id;
    bitmap_t bitstring;
}

header ipv4_h {
    bit<4>      version;
    bit<4>      ihl;
    bit<8>      diffserv;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

// INA header: names the job, the sequence number (which slot) and the operation;
// P-BM is the set of workers whose data the packet carries (BIER bit order).
header ina_h {
    bit<4>   version;
    bit<4>   op;
    bit<8>   flags;
    bit<16>  job_id;
    bit<32>  seq;
    bit<16>  count;     // meaningful elements; the rest of the array is padding
    bit<8>   si;        // BIER set of the P-BM (RFC 8279 SI)
    bit<8>   gen;       // generation of the job's plan the packet belongs to
    bit<16>  dest;      // BFR-id of the only worker that gets the data (0: every worker)
    bit<8>   width;     // bits per element: WIDTH32 or WIDTH16
    bit<8>   ecn;       // congestion marks: ECN_CE from the path or any contribution
    bitmap_t pbm;
}

struct headers_t {
    packet_out_h packet_out;
    packet_in_h  packet_in;
    ethernet_h ethernet;
    bier_h     bier;
    ipv4_h     ipv4;
    udp_h      udp;
    ina_h      ina;
    ina_data_h data;
}

// Every field ingress reads before a path may set it is initialised by
// InaIngress.init_metadata; the rest is set before it is read.
struct metadata_t {
    // edge.p4
    bool        from_host;
    bit<2>      color;          // the job_members entry's meter: METER_RED over its rate
    bitmap_t    host_bit;
    bit<8>      host_si;
    ipv4_addr_t host_ip;
    bit<2>      membership;     // MEMBER_*
    ipv4_addr_t steer_parent;   // a worker's contributions go to its parent VAT node ...
    ipv4_addr_t steer_root;     // ... and its SYNCs to the job's root (job_members)
    bit<8>      member_gen;     // the generation of the job's plan at this edge
    bitmap_t    peers;          // the job's workers in the host's set (job_members)
    // addresses.p4
    bool        to_me;
    // jobs.p4: the job's entry on this switch
    bit<2>      job_role;       // ROLE_*
    bit<8>      job_index;      // its counters' block, its BIER group (JOB_GROUP_BASE + it)
    bit<8>      sets;           // BIER sets the root's A-BM spans (set by vat_root only)
    bit<8>      node_si;        // the BIER set of abm
    bitmap_t    abm;            // the A-BM's bits in set node_si
    bit<16>     slot_base;
    bit<16>     slot_mask;
    bit<32>     lap;            // 2W: a cell's next round comes lap sequence numbers later
    bit<32>     reach;          // 5W: the root's window, from P - lap (aggregation.p4)
    bit<32>     epoch;
    bit<8>      gen;            // the generation of the job's plan this entry is of
    ipv4_addr_t node_ip;
    ipv4_addr_t parent_ip;
    // outcome of ingress
    bit<8>      job_stat;       // the packet's event for its job (JOB_STAT_*), or NONE
    bit<8>      job_stat2;      // a second one: what a VAT node then sent; or NONE
    bit<8>      drop_reason;    // dropped and counted for this SWITCH_STAT_*, or NONE
    bool        consumed;       // absorbed into a cell, or refused by a job check
    bool        bier_result;    // a root's result for several sets: egress writes each
    bool        owned;          // a worker's own values, put in BIER here (OP_COPY)
    // egress
    bit<8>      bier_si;        // the copy's set
    bit<3>      bier_out;       // BIER_OUT_*, with BIER_OUT_COMPLETION
}

#endif
