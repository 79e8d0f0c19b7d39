"""What the controller needs from a switch, and an in-memory switch that has it.

``SwitchClient`` is implemented by ``ina.p4rt.P4RuntimeSwitch`` (a real switch
over P4Runtime) and by ``MemorySwitch`` below, which keeps entries, groups,
counters and registers in dictionaries: the reference model executes packets
against it, and the controller's tests run against it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

from ina.plan import Entity, McastGroup, TableEntry

T = TypeVar("T")


class SwitchError(RuntimeError):
    """A switch refused or failed an operation."""

    def __init__(self, switch: str, message: str):
        super().__init__(f"{switch}: {message}")
        self.switch = switch


@dataclass(frozen=True)
class CounterValue:
    packets: int = 0
    bytes: int = 0

    def __add__(self, other: CounterValue) -> CounterValue:
        return CounterValue(self.packets + other.packets, self.bytes + other.bytes)


class SwitchClient(Protocol):
    name: str

    async def insert(self, entities: Sequence[Entity]) -> None:
        """Insert entities; raises SwitchError (some may have been written)."""

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


Write = tuple[str, Entity]  # ("insert" | "modify" | "delete", what was written)


@dataclass
class MemorySwitch:
    """A switch held in memory. ``fail_insert`` lets tests make a write fail;
    ``writes`` records every insert, modify and delete, in order, so tests can
    assert what the controller wrote."""

    name: str
    tables: dict[str, dict[object, TableEntry]] = field(default_factory=dict)
    groups: dict[int, McastGroup] = field(default_factory=dict)
    counters: dict[str, dict[int, CounterValue]] = field(default_factory=dict)
    registers: dict[str, dict[int, object]] = field(default_factory=dict)
    fail_insert: Callable[[Entity], bool] | None = None
    writes: list[Write] = field(default_factory=list)

    async def insert(self, entities: Sequence[Entity]) -> None:
        # Like a P4Runtime batch: every update is tried, failures are reported together.
        errors = []
        for ent in entities:
            if self.fail_insert is not None and self.fail_insert(ent):
                errors.append(f"injected failure on {ent}")
            elif isinstance(ent, McastGroup):
                if ent.group_id in self.groups:
                    errors.append(f"multicast group {ent.group_id} already exists")
                else:
                    self.groups[ent.group_id] = ent
                    self.writes.append(("insert", ent))
            else:
                table = self.tables.setdefault(ent.table, {})
                if ent.match in table:
                    errors.append(f"{ent.table} entry {ent.match} already exists")
                else:
                    table[ent.match] = ent
                    self.writes.append(("insert", ent))
        if errors:
            raise SwitchError(self.name, "; ".join(errors))

    async def modify(self, entities: Sequence[Entity]) -> None:
        errors = []
        for ent in entities:
            if isinstance(ent, McastGroup):
                if ent.group_id not in self.groups:
                    errors.append(f"multicast group {ent.group_id} does not exist")
                    continue
                self.groups[ent.group_id] = ent
            else:
                table = self.tables.setdefault(ent.table, {})
                if ent.match not in table:
                    errors.append(f"{ent.table} entry {ent.match} does not exist")
                    continue
                table[ent.match] = ent
            self.writes.append(("modify", ent))
        if errors:
            raise SwitchError(self.name, "; ".join(errors))

    async def delete(self, entities: Sequence[Entity]) -> None:
        for ent in entities:
            gone: Entity | None
            if isinstance(ent, McastGroup):
                gone = self.groups.pop(ent.group_id, None)
            else:
                gone = self.tables.get(ent.table, {}).pop(ent.match, None)
            if gone is not None:
                self.writes.append(("delete", ent))

    async def read_table(self, table: str) -> list[TableEntry]:
        return list(self.tables.get(table, {}).values())

    async def read_groups(self) -> list[McastGroup]:
        return list(self.groups.values())

    async def read_counter(self, counter: str) -> dict[int, CounterValue]:
        return dict(self.counters.get(counter, {}))

    async def reset_counter(self, counter: str, indices: Sequence[int]) -> None:
        cells = self.counters.setdefault(counter, {})
        for i in indices:
            cells.pop(i, None)

    # --- used by the reference model --------------------------------------------

    def lookup(self, table: str, match: tuple[tuple[str, object], ...]) -> TableEntry | None:
        return self.tables.get(table, {}).get(match)

    def count(self, counter: str, index: int, nbytes: int) -> None:
        cells = self.counters.setdefault(counter, {})
        cells[index] = cells.get(index, CounterValue()) + CounterValue(1, nbytes)

    def reg_read(self, register: str, index: int, default: T) -> T:
        """A register cell; ``default`` (BMv2's zero) if never written."""
        return cast(T, self.registers.get(register, {}).get(index, default))

    def reg_write(self, register: str, index: int, value: object) -> None:
        self.registers.setdefault(register, {})[index] = value
