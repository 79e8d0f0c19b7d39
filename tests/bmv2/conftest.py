"""The BMv2 tiers: the P4 program compiled by p4c, and Figure 1 on Mininet + BMv2.

Run them with `make test`, which enters private namespaces first. Each tier
skips, saying which tool is missing and how to get it, when the machine
cannot run it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ina.lab import sandbox
from ina.lab.mininet import missing_tools
from ina.spec.job import Job

from bmv2.bmv2lab import Deployed, Labs, NetLab
from inatest import FIGURE1, FIGURE1_SPEC, ROOT

P4C = "p4c-bm2-ss"


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """p4src/ina.p4 compiled now, into a fresh directory."""
    if shutil.which(P4C) is None:
        pytest.skip(f"{P4C} not found: install p4c (p4lang/p4c: Debian/Ubuntu packages "
                    "or a source build, see README 'Toolchain')")
    out = tmp_path_factory.mktemp("p4build")
    result = subprocess.run(
        [P4C, "--arch", "v1model", "--std", "p4-16", "-o", str(out / "ina.json"),
         "--p4runtime-files", str(out / "ina.p4info.txtpb"), str(ROOT / "p4src" / "ina.p4")],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, f"p4c failed:\n{result.stderr}"
    return out


@pytest.fixture(scope="session")
def labs(compiled: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Labs]:
    problems = missing_tools()
    if problems:
        pytest.skip("; ".join(problems))
    if not sandbox.inside():
        pytest.skip("not inside private namespaces: run the tests with `make test`, which "
                    "enters them (Mininet must not touch this machine's own network)")
    manager = Labs(compiled, tmp_path_factory)
    yield manager
    manager.stop()


@pytest.fixture
def figure1_lab(labs: Labs) -> NetLab:
    return labs.get(FIGURE1)


@pytest.fixture
def figure1_job(figure1_lab: NetLab) -> Iterator[tuple[Path, Job]]:
    """Figure 1's job deployed for the test; afterwards links unimpaired, job torn down."""
    path = figure1_lab.write_job(**FIGURE1_SPEC)
    job = figure1_lab.deploy(path)
    yield path, job
    figure1_lab.lab.impair()
    figure1_lab.teardown(job.job_id)


@pytest.fixture
def deployed(figure1_lab: NetLab, request: pytest.FixtureRequest) -> Iterator[Deployed]:
    """The job specs a test is parametrized with (indirectly; the Figure 1 job by
    default), deployed for the test and torn down after it."""
    with figure1_lab.deployed(*getattr(request, "param", [FIGURE1_SPEC])) as jobs:
        yield jobs
