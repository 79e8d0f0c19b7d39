"""Connections whose life is a lease, held by this process alone.

Some of a process's connections say "this process is alive" by being open: a job
service's client connection (the lease of every job it was granted), a claim of a
host's link on the embedded network, the liveness connections of a torch rank. The
kernel closes them when the process ends; but a child the process forks (a
DataLoader's workers) inherits them, and would keep them open after its parent
ended. So every such holder is registered here, and a forked child closes its
copies as it starts (``os.register_at_fork``); the parent's stay open.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Protocol

LOG = logging.getLogger(__name__)


class Lease(Protocol):
    def close(self) -> None: ...


_HELD: weakref.WeakSet[Lease] = weakref.WeakSet()


def hold(lease: Lease) -> None:
    """``lease`` closes in every child forked from now on (in the child only)."""
    _HELD.add(lease)


def _close_in_child() -> None:
    for lease in list(_HELD):
        try:
            lease.close()
        except OSError as exc:  # a child's copy: nothing to report to anyone
            LOG.debug("closing an inherited lease: %s", exc)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_in_child)
