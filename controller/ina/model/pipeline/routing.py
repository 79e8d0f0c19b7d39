"""routing.p4: IPv4 by longest prefix (ipv4_routes), one TTL spent."""

from __future__ import annotations

from dataclasses import dataclass

from ina.control import p4names as n
from ina.control.entities import Lpm, TableEntry
from ina.model.pipeline.metadata import Meta
from ina.model.pipeline.tables import U32, Control
from ina.protocol.constants import SwitchStat
from ina.protocol.frames import Frame, ip_int, mac_str


@dataclass
class Routing(Control):
    def ipv4_routes(self, dst: int) -> TableEntry | None:
        """The table's entry with the longest prefix that holds ``dst``."""
        best: TableEntry | None = None
        best_len = -1
        for e in self.store.tables.get(n.IPV4_ROUTES.name, {}).values():
            lpm = e.match_value("dst_addr")
            assert isinstance(lpm, Lpm)
            mask = (U32 << (32 - lpm.prefix_len)) & U32
            if dst & mask == lpm.value & mask and lpm.prefix_len > best_len:
                best, best_len = e, lpm.prefix_len
        return best

    def apply(self, frame: Frame, meta: Meta) -> None:
        ipv4 = frame.ipv4
        assert ipv4 is not None
        if ipv4.ttl <= 1:
            meta.drop = SwitchStat.DROP_TTL
            return
        route = self.ipv4_routes(ip_int(ipv4.dst))
        if route is None:  # no_route
            meta.drop = SwitchStat.DROP_NO_ROUTE
            return
        # forward
        ipv4.ttl -= 1
        frame.eth.src = mac_str(route.param("smac").to_bytes(6, "big"))
        frame.eth.dst = mac_str(route.param("dmac").to_bytes(6, "big"))
        meta.egress_port = route.param("port")
