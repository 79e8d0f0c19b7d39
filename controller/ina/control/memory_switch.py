"""A switch held in memory: a ``SwitchClient`` that keeps entries, groups, counters
and registers in dictionaries. The reference model executes packets against it,
and the controller's tests run against it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

from ina.control.entities import Entity, McastGroup, TableEntry
from ina.control.switch import CounterValue
from ina.errors import SwitchError

T = TypeVar("T")


Write = tuple[str, Entity]  # ("insert" | "modify" | "delete", what was written)


@dataclass
class MemorySwitch:
    """A switch held in memory. ``fail_insert`` lets tests make a write fail;
    ``writes`` records every insert, modify and delete, in order, so tests can
    assert what the controller wrote. Controllers take turns writing to it
    (``claim``), as P4Runtime's primary client does on a real switch."""

    name: str
    tables: dict[str, dict[object, TableEntry]] = field(default_factory=dict)
    groups: dict[int, McastGroup] = field(default_factory=dict)
    counters: dict[str, dict[int, CounterValue]] = field(default_factory=dict)
    registers: dict[str, dict[int, object]] = field(default_factory=dict)
    fail_insert: Callable[[Entity], bool] | None = None
    writes: list[Write] = field(default_factory=list)
    #: The controller writing to it now, and those waiting for their turn.
    writer: object | None = field(default=None, repr=False)
    _waiting: list[asyncio.Future[None]] = field(default_factory=list, repr=False)

    async def claim(self, writer: object, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.writer is not None and self.writer is not writer:
            turn = loop.create_future()
            self._waiting.append(turn)
            try:
                await asyncio.wait_for(turn, max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise SwitchError(self.name, "another controller is writing to it") from None
            finally:
                self._waiting.remove(turn)
        self.writer = writer

    async def release(self, writer: object) -> None:
        if self.writer is writer:
            self.writer = None
            for turn in self._waiting:
                if not turn.done():
                    turn.set_result(None)

    async def insert(self, entities: Sequence[Entity]) -> None:
        # Like a P4Runtime batch: every update is tried, failures are reported together.
        errors = []
        written: list[Entity] = []
        for ent in entities:
            if self.fail_insert is not None and self.fail_insert(ent):
                errors.append(f"injected failure on {ent}")
            elif isinstance(ent, McastGroup):
                if ent.group_id in self.groups:
                    errors.append(f"multicast group {ent.group_id} already exists")
                else:
                    self.groups[ent.group_id] = ent
                    written.append(ent)
            else:
                table = self.tables.setdefault(ent.table, {})
                if ent.match in table:
                    errors.append(f"{ent.table} entry {ent.match} already exists")
                else:
                    table[ent.match] = ent
                    written.append(ent)
        self.writes += [("insert", ent) for ent in written]
        if errors:
            raise SwitchError(self.name, "; ".join(errors), written)

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
