"""Fixtures: the Figure 1 topology, and Figure 1 on the reference model; the
hypothesis profile."""

from __future__ import annotations

import os

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
