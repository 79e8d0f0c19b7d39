"""What the controller needs from a switch: ``SwitchClient``. It is implemented by
``ina.control.p4runtime.P4RuntimeSwitch`` (a real switch over P4Runtime) and by
``ina.control.memory_switch.MemorySwitch`` (in memory, for the model and tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ina.control.entities import Entity, McastGroup, TableEntry


@dataclass(frozen=True)
class CounterValue:
    packets: int = 0
    bytes: int = 0

    def __add__(self, other: CounterValue) -> CounterValue:
        return CounterValue(self.packets + other.packets, self.bytes + other.bytes)


class SwitchClient(Protocol):
    name: str

    async def claim(self, writer: object, timeout: float) -> None:
        """Make ``writer`` the only one that writes to this switch, waiting up to
        ``timeout`` seconds for another to finish; SwitchError saying who holds it
        after that. Over P4Runtime: this connection must be the switch's primary
        client (the switch refuses writes from any other)."""

    async def release(self, writer: object) -> None:
        """``writer`` is done writing (over P4Runtime: the role ends with the
        connection)."""

    async def insert(self, entities: Sequence[Entity]) -> None:
        """Insert entities; raises SwitchError, whose ``written`` says which were
        inserted if the switch says so."""

    async def modify(self, entities: Sequence[Entity]) -> None:
        """Replace entities that exist (matched by key) with these: a table entry's
        action and parameters, a multicast group's replicas. Raises SwitchError when
        one does not exist (the others may have been written)."""

    async def delete(self, entities: Sequence[Entity]) -> None:
        """Delete entities (matched by key); missing ones are ignored."""

    async def read_table(self, table: str) -> list[TableEntry]: ...

    async def read_groups(self) -> list[McastGroup]: ...

    async def read_counter(self, counter: str) -> dict[int, CounterValue]:
        """Every index of an indirect counter."""

    async def reset_counter(self, counter: str, indices: Sequence[int]) -> None:
        """Set cells of an indirect counter to zero."""
