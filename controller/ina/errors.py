"""The error every invalid input raises: all its problems at once."""

from __future__ import annotations


class InputError(ValueError):
    """An invalid topology, job or the like; ``problems`` lists every problem found,
    each once; ``source`` says where the input came from (a file name), if known."""

    what = "input"

    def __init__(self, problems: list[str], source: str | None = None):
        problems = list(dict.fromkeys(problems))  # each problem once
        where = f" {source}" if source else ""
        super().__init__(f"invalid {self.what}{where}:\n  - " + "\n  - ".join(problems))
        self.problems = problems
        self.source = source


class WireError(ValueError):
    """Bytes that do not decode as the expected header."""
