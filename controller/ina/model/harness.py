"""The reference model with the rest of the system: a network with the controller's
state and a job deployed, worker sessions and server roots driven on it packet
for packet, and the expected result of an AllReduce (the tests' oracle).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from ina.control.controller import Controller
from ina.control.memory_switch import MemorySwitch
from ina.errors import AllreduceError
from ina.host.config import WorkerConfig
from ina.host.descriptor import KIND_INT, CallDescriptor
from ina.host.serverroot import ServerRoot
from ina.host.sync import sync_answer, sync_request
from ina.host.window import ReductionWindow
from ina.model.network import Impairment, ModelNetwork
from ina.protocol.arith import seq_add, wrap_int32
from ina.protocol.constants import Op
from ina.spec.job import Job
from ina.spec.topology import Topology

#: Virtual seconds without a new result after which run_sessions gives up: a check of
#: liveness, not of speed (at 10% loss per link on the fat-tree's longest hand-written
#: VATs, a chunk's recovery took up to 26 virtual seconds; docs/limits.md).
STALL_SECONDS = 60.0
#: SYNCs a worker of allreduce_on_model sends before it gives up.
SYNC_ATTEMPTS = 20


def serve(net: ModelNetwork, servers: dict[str, ServerRoot] | None) -> None:
    """Each server root takes what arrived at its host and sends what it answers."""
    for host, server in (servers or {}).items():
        for src_ip, payload in net.received_datagrams(host):
            for frame in server.accept(payload, src_ip):
                net.send(host, frame)


def run_sessions(net: ModelNetwork, sessions: dict[str, ReductionWindow],
                 servers: dict[str, ServerRoot] | None = None) -> float:
    """Drive every worker's session until all are done, on a virtual clock that
    jumps to the next retransmission when nothing else can happen. Returns the
    virtual seconds taken; raises AllreduceError after STALL_SECONDS of virtual
    time without a new result (a worker missing, say)."""
    now = last_progress = 0.0
    while not all(s.done for s in sessions.values()):
        sent = False
        for host, session in sessions.items():
            for payload in session.packets_to_send(now):
                net.host_send_payload(host, session.plan.config.target, payload)
                sent = True
        serve(net, servers)
        progress = False
        for host, session in sessions.items():
            for payload in net.received_payloads(host):
                if session.accept(payload, now):
                    last_progress, progress = now, True
                elif session.answer(payload, now):
                    progress = True  # a QUERY's answer: the values may go now
        if sent or progress or net.release_held():
            continue
        timers = [t for s in sessions.values() if not s.done
                  if (t := s.next_timer()) is not None]
        if not timers or min(timers) - last_progress > STALL_SECONDS:
            stalled = {h: len(s.missing()) for h, s in sessions.items() if not s.done}
            raise AllreduceError(f"AllReduce stalled on the model; results missing: {stalled}")
        now = max(now, min(timers))
    return now


def reduce_arrays(op: Op, arrays: Sequence[npt.ArrayLike]) -> npt.NDArray[np.int32]:
    """What an AllReduce of ``arrays`` must give, with the switches' int32 semantics
    (SUM wraps around; the OVERFLOW flag tells the workers)."""
    stacked = np.stack([np.asarray(a, dtype=np.int64) for a in arrays])
    if op == Op.SUM:
        reduced = wrap_int32(stacked.sum(axis=0))
    elif op == Op.MIN:
        reduced = stacked.min(axis=0)
    else:
        reduced = stacked.max(axis=0)
    return np.asarray(reduced, dtype=np.int32)


def initialised_network(topology: Topology, impairment: Impairment | None = None
                        ) -> tuple[ModelNetwork, Controller]:
    """A fresh model network with the controller's base state, and its controller."""
    stores = {name: MemorySwitch(name) for name in topology.switches}
    ctl = Controller(topology, stores)
    asyncio.run(ctl.init())
    return ModelNetwork(topology, stores, impairment), ctl


def deployed_network(topology: Topology, job: Job,
                     impairment: Impairment | None = None) -> tuple[ModelNetwork, Controller]:
    """A fresh model network with the controller's base state and ``job`` deployed."""
    net, ctl = initialised_network(topology, impairment)
    asyncio.run(ctl.deploy(job))
    return net, ctl


def allreduce_on_model(net: ModelNetwork, job: Job, arrays: Mapping[str, npt.ArrayLike],
                       servers: dict[str, ServerRoot] | None = None,
                       ) -> dict[str, ReductionWindow]:
    """One integer call of ``job`` on ``net``, packet for packet as ``Worker`` makes it
    (SYNC to the root, the call's descriptor, the array): each worker's session of
    the array, run to completion."""
    seq = start_call_on_model(net, job, {w: np.asarray(a).size for w, a in arrays.items()},
                              servers)
    return reduce_on_model(net, job, arrays, seq, servers)


def start_call_on_model(net: ModelNetwork, job: Job, sizes: dict[str, int],
                        servers: dict[str, ServerRoot] | None = None) -> int:
    """The start of an integer call of ``job``, as ``Worker`` makes it: every worker's
    SYNC to the root, then the call's descriptor reduced (sizes: each worker's array
    length). The sequence number of the array's first packet."""
    configs = {w: WorkerConfig.for_job(job, net.topology, w) for w in job.workers}
    starts: dict[str, int] = {}
    for w, config in configs.items():
        for _ in range(SYNC_ATTEMPTS):  # impaired links lose SYNCs and answers too
            net.host_send_payload(w, config.root, sync_request(config, nonce=1))
            while True:
                serve(net, servers)
                if not net.release_held():
                    break
            answers = [seq for payload in net.received_payloads(w)
                       if (seq := sync_answer(payload, config, nonce=1)) is not None]
            if answers:
                starts[w] = answers[0]
                break
        else:
            raise AllreduceError(f"{w}: no answer to the call's SYNC on the model")
    if len(set(starts.values())) != 1:
        raise AllreduceError(f"the workers were told different starts: {starts}")
    seq = next(iter(starts.values()))
    descriptors = {w: ReductionWindow(configs[w], CallDescriptor(
        sizes[w], KIND_INT, int(job.op)).values(), seq, op=Op.MAX)
        for w in job.workers}
    run_sessions(net, descriptors, servers)
    return seq_add(seq, 1)


def reduce_on_model(net: ModelNetwork, job: Job, arrays: Mapping[str, npt.ArrayLike], seq: int,
                    servers: dict[str, ServerRoot] | None = None,
                    ) -> dict[str, ReductionWindow]:
    """Every worker's session of ``arrays`` from ``seq`` on, run to completion."""
    configs = {w: WorkerConfig.for_job(job, net.topology, w) for w in job.workers}
    sessions = {w: ReductionWindow(configs[w], arrays[w], seq) for w in job.workers}
    run_sessions(net, sessions, servers)
    return sessions
