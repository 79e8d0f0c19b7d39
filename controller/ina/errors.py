"""The error every invalid input raises: all its problems at once."""

from __future__ import annotations


class InputError(ValueError):
    """An invalid topology, job or the like; ``problems`` lists every problem found."""

    what = "input"

    def __init__(self, problems: list[str]):
        super().__init__(f"invalid {self.what}:\n  - " + "\n  - ".join(problems))
        self.problems = problems
