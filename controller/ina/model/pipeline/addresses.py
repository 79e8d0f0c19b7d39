"""addresses.p4: whether an IPv4 packet without a job entry here is addressed to
this switch (local_addresses)."""

from __future__ import annotations

from dataclasses import dataclass

from ina.control import p4names as n
from ina.model.pipeline.metadata import Meta
from ina.model.pipeline.tables import Control
from ina.protocol.frames import ip_int


@dataclass
class Addresses(Control):
    def apply(self, dst: str, meta: Meta) -> None:
        meta.to_me = self.exact(n.LOCAL_ADDRESSES, dst_addr=ip_int(dst)) is not None
