"""Real workers on the reference model's failover data plane (Figure 1): their edge
switches steer them, a re-plan in the middle of a call makes them run it again, and
a job moved off the switches is reduced on hosts (a TCP ring on 127.0.0.x)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from ina.control import p4names as n
from ina.control.switch_state import on_hosts_plan
from ina.host.config import WorkerConfig
from ina.host.results import AllreduceResult
from ina.host.worker import Worker
from ina.model.network import ModelNetwork, ModelTransport
from ina.protocol.codec import InaHeader
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import Flag
from ina.spec.job import Job, JobSpec

from inatest import ROOT, ModelLab, assert_exact, figure1_job, in_threads, int_arrays


class _Hooked(ModelTransport):
    """A worker's socket on the model that shows each packet to ``hook`` first."""

    def __init__(self, net: ModelNetwork, host: str, target: str,
                 hook: Callable[[InaHeader], None]):
        super().__init__(net, host, target)
        self.hook = hook

    def send(self, payload: bytes, dst: str | None = None) -> None:
        with self.net.lock:
            self.hook(InaHeader.unpack(payload))
            super().send(payload, dst)


def _workers(lab: ModelLab, job: Job, hook: Callable[[InaHeader], None] = lambda h: None
             ) -> dict[str, Worker]:
    """A Worker per worker of the job, on the model; the ring on hosts on 127.0.0.x."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        base = int(s.getsockname()[1]) % 20000 + 20000
    addresses = tuple(f"127.0.0.{20 + r}" for r in range(len(job.workers)))
    workers = {}
    for w in job.workers:
        config = replace(WorkerConfig.for_job(job, lab.topology, w), addresses=addresses,
                         ring_port=base)
        workers[w] = Worker(config, _Hooked(lab.net, w, config.target, hook), timeout=5.0)
    return workers


def _call(workers: dict[str, Worker], job: Job, size: int,
          seed: int = 0) -> dict[str, AllreduceResult]:
    arrays = int_arrays(job, size, seed)
    outcomes = in_threads({w: partial(workers[w].allreduce, arrays[w]) for w in workers})
    results = {w: o for w, o in outcomes.items() if isinstance(o, AllreduceResult)}
    assert results.keys() == set(workers), outcomes
    assert_exact(job, arrays, {w: r.values for w, r in results.items()})
    return results


def _once_at(seq: int, action: Callable[[], None]) -> Callable[[InaHeader], None]:
    """A hook that runs ``action`` when the first contribution with ``seq`` is sent."""
    done: list[bool] = []

    def hook(h: InaHeader) -> None:
        if h.seq == seq and not h.flags & Flag.SYNC and not done:
            done.append(True)
            action()

    return hook


def _replan(lab: ModelLab) -> None:
    """The same VAT in a new plan: every entry's generation and epoch one up."""
    for store in lab.stores.values():
        for spec in (n.VAT_JOBS, n.JOB_MEMBERS):
            table = store.tables.get(spec.name, {})
            for key, e in table.items():
                params = dict(e.params)
                if "gen" in params:
                    params["gen"] = (params["gen"] + 1) % 256
                    if "epoch" in params:
                        params["epoch"] += 1
                    table[key] = replace(e, params=tuple((k, params[k]) for k, _ in e.params))


def _move_to_hosts(lab: ModelLab, job: Job) -> None:
    """No switch aggregates the job now: its edges tell its workers ON_HOSTS."""
    for sw, entries in on_hosts_plan(job.job_id, job.workers, job.slots, lab.topology,
                                     gen=9).items():
        table = lab.stores[sw].tables[n.JOB_MEMBERS.name]
        for e in entries:
            table.pop(next(k for k, old in table.items() if old.match == e.match), None)
        asyncio.run(lab.stores[sw].insert(entries))


def test_workers_of_a_planned_job_send_to_their_edges_and_are_exact(
        model_lab: ModelLab) -> None:
    spec = JobSpec.load(ROOT / "jobs" / "figure1-planned.yaml")
    job = asyncio.run(model_lab.ctl.deploy(spec)).job
    assert job is not None
    configs = {w: WorkerConfig.from_files(ROOT / "topologies" / "figure1.yaml",
                                          ROOT / "jobs" / "figure1-planned.yaml", w)
               for w in job.workers}
    workers = {w: Worker(c, ModelTransport(model_lab.net, w, c.target))
               for w, c in configs.items()}
    for call in range(2):
        _call(workers, job, 3 * P + call, seed=call)


def test_a_call_replanned_midway_runs_again_and_is_exact(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    asyncio.run(model_lab.ctl.deploy(job))
    workers = _workers(model_lab, job, _once_at(6, partial(_replan, model_lab)))
    _call(workers, job, 10 * P)
    assert {w.stats.replans for w in workers.values()} == {1}
    assert {w.gen for w in workers.values()} == {1}
    _call(workers, job, 2 * P, seed=1)  # and the next call, in the new plan


def test_a_job_moved_to_hosts_midway_is_reduced_on_hosts_exactly(model_lab: ModelLab) -> None:
    job = figure1_job(model_lab.topology)
    asyncio.run(model_lab.ctl.deploy(job))
    workers = _workers(model_lab, job, _once_at(4, partial(_move_to_hosts, model_lab, job)))
    results = _call(workers, job, 8 * P)
    assert all(r.on_hosts for r in results.values())
    results = _call(workers, job, P, seed=2)  # the next call: ON_HOSTS at its SYNC
    assert all(r.on_hosts for r in results.values())
    assert {w.gen for w in workers.values()} == {9}
