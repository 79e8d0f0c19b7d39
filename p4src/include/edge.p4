// Ports that lead to hosts, and the bit (BFR-id) of the host on each:
// a host may only contribute as itself, and never injects BIER.
control Edge(in port_t port, inout metadata_t meta) {
    action from_host(bitmap_t host_bit) {
        meta.from_host = true;
        meta.host_bit = host_bit;
    }

    action from_switch() {
        meta.from_host = false;
    }

    table host_ports {
        key = { port: exact @name("ingress_port"); }
        actions = { from_host; @defaultonly from_switch; }
        const default_action = from_switch();
        size = MAX_PORTS;
    }

    apply { host_ports.apply(); }
}
