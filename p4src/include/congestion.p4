// Congestion marks (INA version 5), on every packet that leaves a port, BIER copies
// included (after bier_egress: a copy leaves as what it has become).
//
// A packet is congested when BMv2's own egress queue toward its port held at least
// MARK_QDEPTH packets as it joined it (enq_qdepth: the queue forms when the
// switch's egress falls behind), or when the port's phantom queue holds more than
// the port's mark threshold. A phantom queue (HULL's) is a byte counter per port
// that every packet leaving the port fills and that drains at the port's link rate
// (port_queues, which the controller writes from the topology's queues): it holds
// what the link's own queue (the lab's htb + byte FIFO, beyond BMv2) holds, without
// seeing it. No entry for a port: no phantom queue.
//
// A congested packet gets CE in its IPv4 ECN field if its sender made it ECN-capable
// (ECT; RFC 3168: TCP flows sharing the links see the marks), and ECN_CE in its INA
// header, which aggregation.p4 ORs into the cell, so that a result carries the marks
// of every contribution in it. Counted per port: packets sent, packets marked.
#ifndef INA_CONGESTION_P4
#define INA_CONGESTION_P4

control Congestion(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t std) {
    counter(MAX_PORTS, CounterType.packets_and_bytes) port_packets;
    counter(MAX_PORTS, CounterType.packets_and_bytes) port_marks;
    // Per port: the bytes its phantom queue holds ++ when they were counted (us).
    register<phantom_t>(MAX_PORTS) phantom;

    bool over_mark;     // the phantom queue holds more than the mark threshold

    // The phantom queue: drained by the time since its last packet at `rate` bytes
    // per 2^PHANTOM_RATE_SHIFT us (no division), never below empty; this packet
    // added; never above `limit` (the link's buffer, which would drop the rest).
    // In 96 bits, which no product of a 48-bit time and a 32-bit rate overflows; a
    // negative difference shows as the top bit, masked to zero (or to the limit)
    // without a branch. The packet's length is the frame's as it leaves (Ethernet,
    // BIER, the IPv4 packet: a result cut to a completion, a copy decapsulated), or
    // for a frame that is not IPv4 (a probe) BMv2's packet_length (as it came); a
    // choice by multiplication, not a branch. Every action of the table counts the
    // packet: no action of its own for the count.
    action phantom_queue(bit<32> rate, bit<32> mark, bit<32> limit) {
        port_packets.count((bit<32>)std.egress_port);
        bit<32> ip = (bit<32>)(bit<1>)hdr.ipv4.isValid();
        bit<32> length = ip * (ETHERNET_BYTES + (bit<32>)hdr.ipv4.total_len
                               + (bit<32>)(bit<1>)hdr.bier.isValid() * BIER_HEADER_BYTES)
                         + (1 - ip) * std.packet_length;
        phantom_t q;
        phantom.read(q, (bit<32>)std.egress_port);
        bit<96> drained = ((bit<96>)(std.egress_global_timestamp - q[PHANTOM_TIME])
                           * (bit<96>)rate) >> PHANTOM_RATE_SHIFT;
        bit<96> left = (bit<96>)q[PHANTOM_BYTES] - drained;
        bit<96> held = (left & ~(96w0 - (left >> 95))) + (bit<96>)length;
        bit<96> room = (bit<96>)limit - held;
        held = held + (room & (96w0 - (room >> 95)));
        phantom.write((bit<32>)std.egress_port,
                      phantom_of(bytes = held[31:0], time = std.egress_global_timestamp));
        over_mark = held > (bit<96>)mark;
    }

    action no_phantom_queue() {
        port_packets.count((bit<32>)std.egress_port);
        over_mark = false;
    }

    table port_queues {
        key = { std.egress_port: exact @name("egress_port"); }
        actions = { phantom_queue; @defaultonly no_phantom_queue; }
        const default_action = no_phantom_queue();
        size = MAX_PORTS;
    }

    action mark_ipv4() {
        hdr.ipv4.diffserv = hdr.ipv4.diffserv | IPV4_ECN_CE;
    }

    action mark_ina() {
        hdr.ina.ecn = hdr.ina.ecn | ECN_CE;
    }

    // Per packet: a table and its action, a condition; the rest only on a congested
    // packet. Applied to packets that leave by a port below MAX_PORTS (egress.p4):
    // not the CPU port, whose packet-ins are neither counted nor marked.
    apply {
        port_queues.apply();
        if (std.enq_qdepth >= MARK_QDEPTH || over_mark) {
            if (hdr.ipv4.isValid() && (hdr.ipv4.diffserv & IPV4_ECN_MASK) != 0) {
                mark_ipv4();  // ECT(0) or ECT(1): CE; CE stays CE
            }
            if (hdr.ina.isValid()) {
                mark_ina();
            }
            port_marks.count((bit<32>)std.egress_port);
        }
    }
}

#endif
