// The switch's own addresses: where its VAT nodes receive INA packets.
#ifndef INA_ADDRESSES_P4
#define INA_ADDRESSES_P4

control Addresses(in ipv4_addr_t dst, inout metadata_t meta) {
    action is_local() {
        meta.to_me = true;
    }

    action not_local() {
        meta.to_me = false;
    }

    table local_addresses {
        key = { dst: exact @name("dst_addr"); }
        actions = { is_local; @defaultonly not_local; }
        const default_action = not_local();
        size = 16;
    }

    apply { local_addresses.apply(); }
}

#endif
