"""What every control of the pipeline works on: the switch's tables, counters and
registers, as the controller wrote them into its ``MemorySwitch`` (no P4 file: each
P4 control declares its own tables; the model keeps them in one store)."""

from __future__ import annotations

from dataclasses import dataclass

from ina.control import p4names as n
from ina.control.entities import TableEntry
from ina.control.memory_switch import MemorySwitch

#: A 32-bit field's mask (bit<32> arithmetic wraps).
U32 = 0xFFFFFFFF


@dataclass
class Control:
    """The base of the model's controls: the store their tables, counters and
    registers live in."""

    store: MemorySwitch

    def exact(self, spec: n.TableSpec, **key: int) -> TableEntry | None:
        """The entry of table ``spec`` whose exact key is ``key``, if any."""
        return self.store.lookup(spec.name, tuple((k, key[k]) for k in spec.key_names))
