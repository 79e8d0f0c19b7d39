"""PyTorch's own distributed test suite (``DistributedTest._DistTestBase``, from the torch
wheel) on ``ina`` beside the same run on gloo, at world sizes 2 and 4 (the driver:
tests/torchsuite). Every test that passes on gloo must pass on ``ina``, but those
named below with why: tests that check gloo by name, or the name torch gives every
backend it does not know. Both counts are printed (``pytest -s`` shows them).

CI runs the whole suite at 2 ranks and its collectives at 4; ``INA_TORCH_SUITE=all``
runs the whole suite at both, ``INA_TORCH_SUITE_DEBUG=DETAIL`` with
TORCH_DISTRIBUTED_DEBUG=DETAIL."""

from __future__ import annotations

import os
import re
from functools import cache

import pytest

pytest.importorskip("torch", reason="torch is not installed: pip install 'ina[torch]' "
                                    "(make setup installs it)")
pytest.importorskip("expecttest", reason="PyTorch's test suite needs expecttest: pip install "
                                         "expecttest (make setup installs it)")

from torchsuite.runner import Outcome, counts, run
from torchsuite.runner import test_names as suite_tests  # not a test of this module

#: Tests that check gloo by name, or the name torch gives every backend it does not
#: know: they cannot pass on another backend.
BY_NAME = {
    "test_get_backend": "asserts that the default group's backend is the suite's BACKEND, "
                        "'gloo' (the driver's gating)",
    "test_monitored_barrier_gloo": "monitored_barrier: torch refuses it for every backend "
                                   "but gloo",
    "test_monitored_barrier_gloo_rank_0_timeout": "monitored_barrier (as above)",
    "test_monitored_barrier_gloo_subgroup": "monitored_barrier (as above)",
    "test_ddp_logging_data_cpu": "DDP logs ProcessGroup.getBackendName(), which torch makes "
                                 "'custom' for every backend it does not know, and compares "
                                 "it with get_backend()'s 'ina'",
}
#: The suite's tests CI runs at 4 ranks: its collectives.
COLLECTIVES = re.compile(r"all_reduce|reduce|broadcast|all_gather|barrier|scatter|gather")
WHOLE = os.environ.get("INA_TORCH_SUITE") == "all"
#: CI's run with TORCH_DISTRIBUTED_DEBUG=DETAIL: the collectives, at 2 ranks.
DEBUG = os.environ.get("INA_TORCH_SUITE_DEBUG", "DETAIL")


@cache
def _outcomes(backend: str, world: int, debug: str = "OFF") -> dict[str, Outcome]:
    names = suite_tests()
    if (world == 4 or debug != "OFF") and not WHOLE:
        names = [n for n in names if COLLECTIVES.search(n)]
    before = os.environ.get("TORCH_DISTRIBUTED_DEBUG")
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = debug  # the ranks' environment
    try:
        return {o.test: o for o in run(backend, world, names)}
    finally:
        if before is None:
            del os.environ["TORCH_DISTRIBUTED_DEBUG"]
        else:
            os.environ["TORCH_DISTRIBUTED_DEBUG"] = before


@pytest.mark.parametrize(("world", "debug"), [(2, "OFF"), (4, "OFF"), (2, DEBUG)])
def test_every_suite_test_that_passes_on_gloo_passes_on_ina(world: int, debug: str) -> None:
    gloo, ina = _outcomes("gloo", world, debug), _outcomes("ina", world, debug)
    print(f"\nPyTorch's distributed suite at {world} ranks (TORCH_DISTRIBUTED_DEBUG="
          f"{debug}): gloo {counts(list(gloo.values()))}, ina {counts(list(ina.values()))}")
    missed = {name: ina[name].detail.strip().splitlines()[-1:]
              for name, o in gloo.items() if o.outcome == "passed"
              and ina[name].outcome != "passed" and name not in BY_NAME}
    assert not missed, missed


@pytest.mark.parametrize("world", [2, 4])
def test_the_named_exceptions_still_fail_for_their_reason(world: int) -> None:
    # A named exception that passes on ina is no exception: the list must shrink.
    ina = _outcomes("ina", world)
    passing = [n for n in BY_NAME if n in ina and ina[n].outcome == "passed"]
    assert not passing, f"no longer exceptions: {passing}"
