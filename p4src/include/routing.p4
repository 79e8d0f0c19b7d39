// Plain IPv4 forwarding: /32 routes to every host and switch address.
#ifndef INA_ROUTING_P4
#define INA_ROUTING_P4

control Routing(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t std) {
    action forward(port_t port, mac_addr_t smac, mac_addr_t dmac) {
        std.egress_spec = port;
        hdr.ethernet.src_addr = smac;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    action no_route() {
        meta.drop_reason = SWITCH_STAT_DROP_NO_ROUTE;
    }

    table ipv4_routes {
        key = { hdr.ipv4.dst_addr: lpm @name("dst_addr"); }
        actions = { forward; @defaultonly no_route; }
        const default_action = no_route();
        size = IPV4_ROUTES;
    }

    apply {
        if (hdr.ipv4.ttl <= 1) {
            meta.drop_reason = SWITCH_STAT_DROP_TTL;
        } else {
            ipv4_routes.apply();
        }
    }
}

#endif
