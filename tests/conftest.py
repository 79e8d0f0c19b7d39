"""Fixtures: the Figure 1 topology, and Figure 1 on the reference model."""

from __future__ import annotations

import pytest

from ina.topology import Topology

from inatest import FIGURE1, ModelLab, make_model_lab


@pytest.fixture(scope="session")
def figure1() -> Topology:
    return Topology.load(FIGURE1)


@pytest.fixture
def model_lab(figure1: Topology) -> ModelLab:
    return make_model_lab(figure1)
