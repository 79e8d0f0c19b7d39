"""Jobs on a running lab: the controller over fresh P4Runtime connections to the
lab's switches, and the one way to deploy a job there and hand its workers the
explicit job file they need."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ina.control.controller import Controller
from ina.control.repair import RepairReport, repair_switches
from ina.control.switch import CounterValue
from ina.errors import LabError
from ina.lab.mininet import Lab
from ina.protocol.constants import JobStat
from ina.spec.job import Job, JobSpec

T = TypeVar("T")


def controller_call(lab: Lab, fn: Callable[[Controller], Awaitable[T]],
                    write: bool = True) -> T:
    """``fn(controller)`` with the lab's live switches connected over P4Runtime (the
    topology without what the lab failed); ``write=False`` for a call that only
    reads (it does not wait for the writers' lock)."""
    from ina.control.p4runtime import connect  # grpc is slow to import

    topology = lab.topology.without(lab.failures)

    async def call() -> T:
        async with connect(topology, lab.p4info, access=lab.access, write=write) as clients:
            return await fn(Controller(topology, clients))

    return asyncio.run(call())


def repair_lab(lab: Lab) -> RepairReport:
    """Tell the controller what the lab failed or recovered (as ``inactl down|up``
    does): routes and jobs repaired on the live switches, a recovered switch given
    its pipeline again."""
    return asyncio.run(repair_switches(lab.topology, lab.failures, lab.p4info, lab.p4blob,
                                       lab.access))


def deploy(lab: Lab, job: JobSpec | Job, job_file: Path | None = None) -> Job:
    """Deploy ``job`` on the lab's switches (planned with their free capacity when it
    has no VAT) and, with ``job_file``, write the deployed job there as an explicit
    job file: what workers and a server root read."""
    deployed = controller_call(lab, lambda ctl: ctl.deploy(job)).job
    assert deployed is not None  # without fallback, a job that fits nowhere raises
    if job_file is not None:
        deployed.save(job_file)
    return deployed


def fail_during_allreduce(lab: Lab, job: Job, fail: Sequence[str],
                          started: float | None = None) -> list[str]:
    """Once the job's root has multicast a result (its AllReduce is under way), fail
    ("switch", NAME) or ("link", A, B) and declare it to the controller, which
    repairs the job while the workers run; what happened, timed from ``started``."""
    t0 = time.monotonic() if started is None else started

    def multicast() -> int:
        status = controller_call(lab, lambda ctl: ctl.status(), write=False)
        root = status.get(job.root)
        return 0 if root is None else root.job_stats.get(job.job_id, {}).get(
            JobStat.MULTICAST, CounterValue()).packets

    deadline = time.monotonic() + 60
    while multicast() == 0:  # each poll is a P4Runtime round trip: no busy loop
        if time.monotonic() > deadline:
            raise LabError(f"job {job.job_id} multicast no result within 60s: nothing failed")
    events = [f"{time.monotonic() - t0:5.2f}s  root {job.root} multicasts results "
              f"(VAT on {', '.join(sorted(job.nodes))})"]
    if fail[0] == "switch":
        lab.fail_switch(fail[1])
    else:
        lab.set_link(fail[1], fail[2], up=False)
    events.append(f"{time.monotonic() - t0:5.2f}s  {fail[0]} {'-'.join(fail[1:])} failed")
    report = repair_lab(lab)
    events.append(f"{time.monotonic() - t0:5.2f}s  repaired: "
                  + "; ".join(j.describe() for j in report.jobs))
    return events
