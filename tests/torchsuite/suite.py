"""PyTorch's own distributed test suite (``DistributedTest._DistTestBase``, from the
torch wheel) run against a backend: ``ina`` on the embedded network, or gloo.

What the suite needs to treat ``ina`` as the CPU backend it tests, all of it here:

- ``BACKEND`` is ``gloo`` for the suite, so that every test it runs on gloo's CPU path
  runs (its tests are gated on backend names: ``BACKEND != "gloo"`` skips timeouts,
  sparse tensors, batched send/recv);
- ``torch.distributed.init_process_group`` makes the default group on the backend
  under test (``INA_SUITE_BACKEND``: ``ina`` or ``gloo``) wherever the suite asks for
  ``BACKEND``; groups the suite makes without naming a backend follow the default
  group's; those that name ``gloo`` stay gloo;
- each rank is a host of ``INA_TOPOLOGY`` (Figure 1 by default) on the embedded
  network that rank 0 starts (no ``INA_JOB``: every group is a job the network
  deploys).

Run by tests/test_torch_suite.py, which compares the two backends' outcomes; by hand:
``INA_SUITE_BACKEND=ina WORLD_SIZE=2 python -m pytest tests/torchsuite/suite.py -k all_reduce``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
UNDER_TEST = os.environ.setdefault("INA_SUITE_BACKEND", "ina")
os.environ["BACKEND"] = "gloo"  # the suite's gating: see above
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:  # the runner gives one; alone, one of its own, removed at exit
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="ina-suite-")
    atexit.register(shutil.rmtree, os.environ["TEMP_DIR"], ignore_errors=True)
os.environ.setdefault("INA_TOPOLOGY", str(ROOT / "topologies" / "figure1.yaml"))
os.environ.setdefault("INA_NETWORK", "embedded")

import torch.distributed as dist  # noqa: E402

import ina.torch  # noqa: E402,F401  (registers the backend)

_init = dist.init_process_group


def _init_on_backend_under_test(*args: Any, **kwargs: Any) -> None:
    """The suite's init_process_group(backend=BACKEND, ...) on the backend under test."""
    if kwargs.get("backend") == "gloo":
        kwargs["backend"] = UNDER_TEST
    elif args and args[0] == "gloo":
        args = (UNDER_TEST, *args[1:])
    _init(*args, **kwargs)


dist.init_process_group = _init_on_backend_under_test

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self) -> None:
        super().setUp()  # type: ignore[no-untyped-call]
        self._spawn_processes()
