"""Fixtures: the Figure 1 topology, and Figure 1 on the reference model; the
hypothesis profile."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from ina.spec.topology import Topology

from inatest import FIGURE1, ModelLab, make_model_lab

# Property tests draw the same examples on every run (CI must not flake), and few
# enough to stay fast. INA_HYPOTHESIS_PROFILE=explore draws many fresh ones.
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=50)
settings.register_profile("explore", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("INA_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def figure1() -> Topology:
    return Topology.load(FIGURE1)


@pytest.fixture
def model_lab(figure1: Topology) -> ModelLab:
    return make_model_lab(figure1)


@pytest.fixture(scope="session", autouse=True)
def private_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The run directory of every lab and command the tests start (their credentials,
    locks and failures files): never the one of a lab running beside the tests."""
    before = os.environ.get("INA_RUN_DIR")
    os.environ["INA_RUN_DIR"] = str(tmp_path_factory.mktemp("run"))
    yield
    if before is None:
        del os.environ["INA_RUN_DIR"]
    else:
        os.environ["INA_RUN_DIR"] = before
