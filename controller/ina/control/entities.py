"""What a switch holds, as plain values: table entries (with the names of
``ina.control.p4names``) and multicast groups. The controller writes them, the
P4Runtime client and the in-memory switch store them, the reference model
executes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ina.control import p4names as n
from ina.errors import UsageError


@dataclass(frozen=True)
class Lpm:
    value: int
    prefix_len: int


MatchValue = int | Lpm


@dataclass(frozen=True)
class Meter:
    """A direct meter's configuration, in packets: at most ``rate`` per second, and
    ``burst`` back to back beyond it (P4Runtime MeterConfig with CIR = PIR and
    CBurst = PBurst: a packet over the rate is red)."""

    rate: int
    burst: int

    def __post_init__(self) -> None:
        if self.rate < 1 or self.burst < 1:
            raise UsageError(f"meter rate {self.rate} and burst {self.burst} must be positive")


@dataclass(frozen=True)
class TableEntry:
    table: str
    match: tuple[tuple[str, MatchValue], ...]
    action: str
    params: tuple[tuple[str, int], ...] = ()
    meter: Meter | None = None  # of a table with a direct meter (p4names.TableSpec.metered)

    def __post_init__(self) -> None:
        spec = n.TABLE_BY_NAME.get(self.table)
        if spec is None:
            raise UsageError(f"unknown table {self.table}")
        if tuple(k for k, _ in self.match) != spec.key_names:
            raise UsageError(
                f"{self.table}: match {self.match} does not give keys {spec.key_names}")
        action = next((a for a in spec.actions if a.name == self.action), None)
        if action is None:
            raise UsageError(f"{self.table}: action {self.action} not allowed")
        if tuple(p for p, _ in self.params) != action.param_names:
            raise UsageError(
                f"{self.action}: params {self.params} do not give {action.param_names}")
        for (pname, value), (_, width) in zip(self.params, action.params, strict=True):
            if not 0 <= value < 1 << width:
                raise UsageError(f"{self.action}: {pname}={value} does not fit {width} bits")
        if self.meter is not None and not spec.metered:
            raise UsageError(f"{self.table} has no meter")

    @property
    def key(self) -> tuple[str, tuple[tuple[str, MatchValue], ...]]:
        return self.table, self.match

    def param(self, name: str) -> int:
        return dict(self.params)[name]

    def match_value(self, name: str) -> MatchValue:
        return dict(self.match)[name]


@dataclass(frozen=True)
class McastGroup:
    group_id: int
    replicas: tuple[tuple[int, int], ...]  # (port, replication id), sorted


Entity = TableEntry | McastGroup


def entry(spec: n.TableSpec, match: Mapping[str, MatchValue], action: n.ActionSpec,
          **params: int) -> TableEntry:
    return TableEntry(
        spec.name,
        tuple((k, match[k]) for k in spec.key_names),
        action.name,
        tuple((p, params[p]) for p in action.param_names),
    )
