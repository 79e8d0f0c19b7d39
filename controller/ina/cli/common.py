"""What every CLI shares."""

from __future__ import annotations

import sys


def wait_for_go() -> None:
    """Say ``ready`` on stdout and wait for a line on stdin: the benchmark starts every
    worker's clock at once, after each is set up (no start-up skew in the figures)."""
    print("ready", flush=True)
    sys.stdin.readline()
