"""A benchmark's goals against what it measured: each passed, missed (MISS), or not
measured (with why). Never a pass without a measurement: a goal whose run is
missing is not measured, one whose run failed is missed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

R = TypeVar("R")
#: How a report marks a goal.
MARKS = {True: "pass", False: "MISS", None: "not measured"}


@dataclass
class Goal:
    """One goal against what was measured (None: not measured here)."""

    case: str
    goal: str
    measured: str
    passed: bool | None

    @property
    def mark(self) -> str:
        return MARKS[self.passed]

    def line(self) -> str:
        return f"  [{self.mark:^12}] {self.case}: {self.goal}: {self.measured}"


class Goals(Generic[R]):
    """The goals of one case, judged one by one on its runs (of type ``R``)."""

    def __init__(self, case: str, failure: Callable[[R], str | None]):
        """``failure(run)``: why ``run`` cannot count (it failed), or None."""
        self.case, self.failure = case, failure
        self.goals: list[Goal] = []

    def add(self, goal: str, measured: str, passed: bool | None) -> None:
        self.goals.append(Goal(self.case, goal, measured, passed))

    def judge(self, goal: str, runs: Sequence[tuple[str, R | None]],
              judge: Callable[[list[R]], tuple[str, bool]]) -> None:
        """``goal`` judged on ``runs``, each (what it is, the run or None if it was
        not run): not measured if one was not run, missed if one failed, else what
        ``judge`` says of them (what was measured, passed)."""
        found = []
        for what, run in runs:
            if run is None:
                self.add(goal, f"{what}: not run", None)
                return
            failure = self.failure(run)
            if failure is not None:
                self.add(goal, failure, False)
                return
            found.append(run)
        self.add(goal, *judge(found))


def render(title: str, goals: Iterable[Goal]) -> list[str]:
    """The goals as a report's lines, under ``title``."""
    return [title, *(g.line() for g in goals)]


def less_cpu(switches: float, ranks: float, gloo: float, unit: str) -> tuple[str, bool]:
    """Issue 24's CPU goal: INA's CPU (its ``switches``' and ``ranks``') below
    ``gloo``'s (switches and ranks), in ``unit``. Where INA's switches alone spend
    ``gloo``'s or more, no change to the hosts' code can meet it (only fewer or
    cheaper packets in BMv2), and it says so."""
    ina = switches + ranks
    measured = f"INA {ina:.2f} {unit}, gloo {gloo:.2f} {unit} ({ina / gloo:.2f}x)"
    if switches >= gloo:
        measured += f"; INA's switches alone {switches:.2f} {unit}: out of the hosts' code's reach"
    return measured, ina < gloo
