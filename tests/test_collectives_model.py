"""Every collective end to end on the reference model (the switches' own model, with
the controller's entries): exact for integers and movements, within the reported
bound for floats (float32 in 32-bit elements, float16 and bfloat16 in 16-bit ones),
over lossy links, on random VATs and over several BIER sets, with nothing delivered
to hosts outside the job; the bytes each link carries; the real ``Worker`` and the
one-call ``ina`` functions (on the embedded network); the ring on hosts giving the
same results.

Most tests run whole calls packet for packet on the model's virtual clock
(tests/colltest.py ``Lockstep``), so that lossy links cost no waiting."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import ina
from ina.control import p4names as n
from ina.control.switch_state import on_hosts_plan
from ina.control.vat_planner import plan_job
from ina.errors import PlanError
from ina.host.config import WorkerConfig
from ina.host.results import AllreduceResult
from ina.host.worker import Worker
from ina.model.embedded import EmbeddedNetwork
from ina.model.network import Impairment, ModelTransport
from ina.protocol.constants import ELEMS16_PER_PACKET as P16
from ina.protocol.constants import ELEMS_PER_PACKET as P
from ina.protocol.constants import INA_HEADER_BYTES, INA_PAYLOAD_BYTES, Op
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Topology

from colltest import COLLECTIVES, Lockstep, Outcome, body_of, check
from inatest import FIGURE1, FIGURE1_JOB, ROOT, figure1_job, in_threads, make_model_lab, serving

#: A frame on a host's link: Ethernet, IPv4, UDP and the INA payload.
_L2_L4 = 14 + 20 + 8
DATA_FRAME = _L2_L4 + INA_PAYLOAD_BYTES
COMPLETION_FRAME = _L2_L4 + INA_HEADER_BYTES
ROOT_RANK = 2


def _arrays(n_workers: int, size: int, kind: str, seed: int = 0) -> list[npt.NDArray[Any]]:
    """One array per worker: int32 (sums that do not overflow), float32, float16, or
    bfloat16 values (float32 whose low 16 bits are zero, as torch's bfloat16 become)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_workers):
        if kind == "int32":
            out.append(rng.integers(-(2**20), 2**20, size, dtype=np.int32))
        elif kind == "bfloat16":
            x = (rng.standard_normal(size) * 100).astype(np.float32)
            out.append((x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32))
        else:
            out.append((rng.standard_normal(size) * 100).astype(kind))
    return out


def _width(kind: str) -> int | None:
    return 16 if kind == "bfloat16" else None  # float16: 16 by default


def _deployed(topology: Topology, job: Job, impairment: Impairment | None = None
              ) -> Lockstep:
    lab = make_model_lab(topology)
    asyncio.run(lab.ctl.deploy(job))
    lab.net.impairment = impairment
    return Lockstep(lab.net, job)


def _lockstep(step: Lockstep, collective: str, arrays: Sequence[npt.NDArray[Any]],
              root: int = ROOT_RANK, width: int | None = None) -> list[Outcome]:
    job = step.job
    bodies = {w: body_of(collective, step.configs[w], arrays[r], Op.SUM, root, width)
              for r, w in enumerate(job.workers)}
    outcomes = step.run(bodies)
    return [outcomes[w] for w in job.workers]


def _outsiders_got_nothing(step: Lockstep) -> None:
    """No frame reached a host outside the job, nor crossed its link."""
    members = set(step.job.workers)
    outsiders = [h for h in step.net.topology.hosts if h not in members]
    assert {h: len(step.net.inbox[h]) for h in outsiders} == {h: 0 for h in outsiders}
    toward = {b: v for (_, b), v in step.net.bytes_on_link.items() if b in outsiders}
    assert toward == {}


# --- Figure 1 ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def figure1_topology() -> Topology:
    return Topology.load(FIGURE1)


@pytest.mark.parametrize(("collective", "kind"), [
    (c, k) for c in COLLECTIVES
    for k in (["int32"] if c == "barrier" else ["int32", "float32", "float16", "bfloat16"])])
def test_every_collective_is_right_at_every_worker_of_figure1(
        figure1_topology: Topology, collective: str, kind: str) -> None:
    step = _deployed(figure1_topology, figure1_job(figure1_topology))
    arrays = _arrays(4, 3 * P + 17, kind)
    outcomes = _lockstep(step, collective, arrays, width=_width(kind))
    check(collective, arrays, outcomes, root=ROOT_RANK)
    _outsiders_got_nothing(step)


@pytest.mark.parametrize("loss", [0.01, 0.05])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_every_collective_is_exact_over_lossy_links(
        figure1_topology: Topology, collective: str, loss: float) -> None:
    step = _deployed(figure1_topology, figure1_job(figure1_topology, slots=8),
                     Impairment(loss=loss, seed=int(loss * 100)))
    arrays = _arrays(4, 20 * P + 3, "int32", seed=1)
    for _ in range(20 if collective == "barrier" else 1):  # a barrier is one packet
        outcomes = _lockstep(step, collective, arrays)
        check(collective, arrays, outcomes, root=ROOT_RANK)
    assert sum(w.retransmissions for s in step.windows for w in s.values()) > 0
    _outsiders_got_nothing(step)


@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter", "allgather"])
def test_16_bit_floats_are_within_their_bound_over_lossy_links(
        figure1_topology: Topology, collective: str) -> None:
    step = _deployed(figure1_topology, figure1_job(figure1_topology, slots=8),
                     Impairment(loss=0.05, seed=9))
    arrays = _arrays(4, 6 * P16 + 5, "float16", seed=2)
    check(collective, arrays, _lockstep(step, collective, arrays), root=ROOT_RANK)


def test_a_reduce_scatter_downlink_carries_its_part_and_completions(
        figure1_topology: Topology) -> None:
    step = _deployed(figure1_topology, figure1_job(figure1_topology))
    k = 5  # packets per part
    arrays = _arrays(4, 4 * k * P, "int32")
    check("reduce_scatter", arrays, _lockstep(step, "reduce_scatter", arrays))
    array_bytes = step.link_bytes[-1]  # the array's reduction (after the descriptor)
    for w in step.job.workers:
        edge, _ = figure1_topology.host_attachment(w)
        assert array_bytes[(edge, w)] == k * DATA_FRAME + 3 * k * COMPLETION_FRAME, w
        assert array_bytes[(w, edge)] == 4 * k * DATA_FRAME, w  # its whole array up
        window = step.windows[-1][w]
        assert (window.completions, window.results - window.completions) == (3 * k, k)
    # The others' chunks cost a worker's downlink under 10% of the array's bytes.
    assert 3 * k * COMPLETION_FRAME < 0.1 * 4 * k * P * 4


def test_a_reduce_sends_the_data_down_to_the_root_rank_only(figure1_topology: Topology) -> None:
    step = _deployed(figure1_topology, figure1_job(figure1_topology))
    arrays = _arrays(4, 4 * P, "int32")
    check("reduce", arrays, _lockstep(step, "reduce", arrays), root=ROOT_RANK)
    down = step.link_bytes[-1]
    for r, w in enumerate(step.job.workers):
        edge, _ = figure1_topology.host_attachment(w)
        frame = DATA_FRAME if r == ROOT_RANK else COMPLETION_FRAME
        assert down[(edge, w)] == 4 * frame, w


def test_a_broadcast_costs_every_link_what_an_allreduce_does(
        figure1_topology: Topology) -> None:
    # The others contribute zeros: a round takes one kind (ina.host.collective.movement).
    step = _deployed(figure1_topology, figure1_job(figure1_topology))
    chunks = 6
    arrays = _arrays(4, chunks * P, "int32")
    check("broadcast", arrays, _lockstep(step, "broadcast", arrays), root=ROOT_RANK)
    moved = step.link_bytes[-1]
    _lockstep(step, "allreduce", arrays)
    assert moved == step.link_bytes[-1]
    for w in step.job.workers:
        edge, _ = figure1_topology.host_attachment(w)
        assert moved[(w, edge)] == moved[(edge, w)] == chunks * DATA_FRAME, w


def _owned(step: Lockstep) -> Lockstep:
    """Every worker sends a movement's chunks once from their owners (OP_COPY)."""
    step.configs = {w: replace(c, owned=True) for w, c in step.configs.items()}
    return step


def test_a_broadcast_from_its_owner_sends_the_array_up_the_root_ranks_link_only(
        figure1_topology: Topology) -> None:
    # The root rank's data goes once, by BIER from its edge switch; each chunk's
    # round is a header from every worker (ina.host.collective.movement).
    step = _owned(_deployed(figure1_topology, figure1_job(figure1_topology)))
    chunks = 6
    arrays = _arrays(4, chunks * P, "int32")
    check("broadcast", arrays, _lockstep(step, "broadcast", arrays), root=ROOT_RANK)
    moved = step.link_bytes[-1]
    for r, w in enumerate(step.job.workers):
        edge, _ = figure1_topology.host_attachment(w)
        mine = r == ROOT_RANK
        assert moved[(w, edge)] == chunks * (COMPLETION_FRAME + mine * DATA_FRAME), w
        assert moved[(edge, w)] == chunks * (COMPLETION_FRAME + (not mine) * DATA_FRAME), w


def test_an_allgather_from_its_owners_sends_each_part_up_its_owners_link_only(
        figure1_topology: Topology) -> None:
    step = _owned(_deployed(figure1_topology, figure1_job(figure1_topology)))
    k = 2  # packets per part
    arrays = _arrays(4, k * P, "int32")
    check("allgather", arrays, _lockstep(step, "allgather", arrays))
    moved = step.link_bytes[-1]
    for w in step.job.workers:
        edge, _ = figure1_topology.host_attachment(w)
        assert moved[(w, edge)] == k * DATA_FRAME + 4 * k * COMPLETION_FRAME, w
        assert moved[(edge, w)] == 3 * k * DATA_FRAME + 4 * k * COMPLETION_FRAME, w


@pytest.mark.parametrize("loss", [0.01, 0.05])
@pytest.mark.parametrize("collective", ["broadcast", "allgather"])
def test_a_movement_from_its_owners_is_exact_over_lossy_links(
        figure1_topology: Topology, collective: str, loss: float) -> None:
    step = _owned(_deployed(figure1_topology, figure1_job(figure1_topology, slots=8),
                            Impairment(loss=loss, seed=int(loss * 100) + 7)))
    arrays = _arrays(4, 20 * P + 3, "int32", seed=2)
    check(collective, arrays, _lockstep(step, collective, arrays), root=ROOT_RANK)
    _outsiders_got_nothing(step)


def test_a_barrier_costs_each_link_one_header(figure1_topology: Topology) -> None:
    step = _deployed(figure1_topology, figure1_job(figure1_topology))
    _lockstep(step, "barrier", _arrays(4, 1, "int32"))
    moved = step.link_bytes[-1]
    for w in step.job.workers:
        edge, _ = figure1_topology.host_attachment(w)
        assert moved[(w, edge)] == moved[(edge, w)] == COMPLETION_FRAME, w


# --- random VATs, several BIER sets -----------------------------------------------------


def _random_jobs(topology: Topology, seed: int, count: int) -> Iterator[Job]:
    """Plans of random sets of workers, each rooted at a random switch that can root it."""
    rng = np.random.default_rng(seed)
    hosts, switches = sorted(topology.hosts), sorted(topology.switches)
    made = 0
    while made < count:
        workers = sorted(rng.choice(hosts, size=int(rng.integers(3, 9)), replace=False))
        try:
            job = plan_job(topology, 3, workers, root=str(rng.choice(switches)), slots=4).job
        except PlanError:
            continue
        made += 1
        yield job


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_collective_is_exact_on_random_vats(seed: int) -> None:
    topology = Topology.load(ROOT / "topologies" / "fat-tree-4.yaml")
    for job in _random_jobs(topology, seed, 1):
        for i, collective in enumerate(COLLECTIVES):
            step = _deployed(topology, job, Impairment(loss=0.01, seed=seed + i))
            arrays = _arrays(len(job.workers), 2 * P * len(job.workers) + 7, "int32", seed=i)
            root = seed % len(job.workers)
            check(collective, arrays, _lockstep(step, collective, arrays, root), root=root)
            _outsiders_got_nothing(step)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_every_collective_is_exact_over_four_bier_sets(collective: str) -> None:
    topology = Topology.load(ROOT / "topologies" / "leaf-spine-2x4-sets.yaml")
    job = plan_job(topology, 5, ["h1_1", "h1_2", "h2_1", "h3_2", "h4_1", "h4_2"]).job
    step = _deployed(topology, job, Impairment(loss=0.01, seed=4))
    arrays = _arrays(6, 7 * P + 1, "int32", seed=3)
    check(collective, arrays, _lockstep(step, collective, arrays, root=4), root=4)
    _outsiders_got_nothing(step)


def test_16_bit_elements_are_exact_over_four_bier_sets() -> None:
    topology = Topology.load(ROOT / "topologies" / "leaf-spine-2x4-sets.yaml")
    job = plan_job(topology, 5, ["h1_1", "h2_1", "h3_2", "h4_2"]).job
    step = _deployed(topology, job)
    rng = np.random.default_rng(7)
    arrays = [rng.integers(-(2**12), 2**12, 2 * P16 + 3).astype(np.int16) for _ in range(4)]
    check("reduce_scatter", arrays, _lockstep(step, "reduce_scatter", arrays), width=16)


# --- the real Worker, the one-call functions, the ring on hosts -------------------------


def _call_all(calls: dict[str, Callable[[], AllreduceResult]]) -> list[Outcome]:
    outcomes = in_threads(calls)
    return [outcomes[w] for w in calls]


def _method(worker: Worker, collective: str, values: npt.NDArray[Any], root: int,
            width: int | None) -> AllreduceResult:
    if collective == "barrier":
        return worker.barrier()
    if collective in ("broadcast", "reduce"):
        if collective == "broadcast":
            return worker.broadcast(values, root)
        return worker.reduce(values, root, width=width)
    if collective == "allgather":
        return worker.allgather(values)
    return getattr(worker, collective)(values, width=width)  # type: ignore[no-any-return]


def test_workers_make_every_collective_one_after_another_on_the_model(
        figure1_topology: Topology) -> None:
    lab = make_model_lab(figure1_topology)
    job = figure1_job(figure1_topology)
    asyncio.run(lab.ctl.deploy(job))
    workers = {w: Worker(c, ModelTransport(lab.net, w, c.target), timeout=5.0)
               for w in job.workers
               for c in [WorkerConfig.for_job(job, figure1_topology, w)]}
    for kind in ("int32", "float16", "bfloat16"):
        for collective in COLLECTIVES:
            arrays = _arrays(4, 2 * P + 9, kind, seed=len(collective))
            outcomes = _call_all({w: partial(_method, workers[w], collective, arrays[r],
                                             ROOT_RANK, _width(kind))
                                  for r, w in enumerate(job.workers)})
            check(collective, arrays, outcomes, root=ROOT_RANK)


def _ring_workers(lab_net: Any, job: Job, topology: Topology) -> dict[str, Worker]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        base = int(s.getsockname()[1]) % 20000 + 20000
    addresses = tuple(f"127.0.0.{30 + r}" for r in range(len(job.workers)))
    workers = {}
    for w in job.workers:
        config = replace(WorkerConfig.for_job(job, topology, w), addresses=addresses,
                         ring_port=base)
        workers[w] = Worker(config, ModelTransport(lab_net, w, config.target), timeout=5.0)
    return workers


def test_the_ring_on_hosts_gives_every_collective_the_same_results(
        figure1_topology: Topology) -> None:
    lab = make_model_lab(figure1_topology)
    job = figure1_job(figure1_topology)
    asyncio.run(lab.ctl.deploy(job))
    for sw, entries in on_hosts_plan(job.job_id, job.workers, job.slots, figure1_topology,
                                     gen=9).items():  # no switch aggregates the job now
        table = lab.stores[sw].tables[n.JOB_MEMBERS.name]
        for e in entries:
            table.pop(next(k for k, old in table.items() if old.match == e.match), None)
        asyncio.run(lab.stores[sw].insert(entries))
    workers = _ring_workers(lab.net, job, figure1_topology)
    for kind in ("int32", "float16"):
        for collective in COLLECTIVES:
            arrays = _arrays(4, 2 * P + 9, kind, seed=len(collective))
            outcomes = _call_all({w: partial(_method, workers[w], collective, arrays[r],
                                             ROOT_RANK, None)
                                  for r, w in enumerate(job.workers)})
            check(collective, arrays, outcomes, root=ROOT_RANK)
            assert all(isinstance(o, AllreduceResult) and o.on_hosts for o in outcomes)


@pytest.fixture
def endpoints_file(figure1_topology: Topology, tmp_path: Path) -> Iterator[Path]:
    """Figure 1's job on the embedded network, its endpoints in a file."""
    for net in serving(EmbeddedNetwork(figure1_topology, [JobSpec.load(FIGURE1_JOB)])):
        path = tmp_path / "ports.json"
        path.write_text(net.endpoints.to_json())
        yield path


def test_the_one_call_functions_make_every_collective_on_the_embedded_network(
        endpoints_file: Path) -> None:
    where: dict[str, Any] = {"topology": FIGURE1, "job": FIGURE1_JOB,
                             "embedded": endpoints_file}
    spec = JobSpec.load(FIGURE1_JOB)
    calls: dict[str, Callable[..., AllreduceResult]] = {
        "allreduce": ina.allreduce, "reduce": partial(ina.reduce, root=ROOT_RANK),
        "reduce_scatter": ina.reduce_scatter, "broadcast": partial(ina.broadcast,
                                                                   root=ROOT_RANK),
        "allgather": ina.allgather}
    for collective, call in calls.items():
        arrays = _arrays(4, 2 * P + 9, "float16" if collective == "allreduce" else "int32")
        outcomes = _call_all({w: partial(call, arrays[r], worker=w, **where)
                              for r, w in enumerate(spec.workers)})
        check(collective, arrays, outcomes, root=ROOT_RANK)
    outcomes = _call_all({w: partial(ina.barrier, worker=w, **where) for w in spec.workers})
    assert all(isinstance(o, AllreduceResult) for o in outcomes), outcomes
