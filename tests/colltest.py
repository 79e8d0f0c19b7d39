"""Helpers for the tests of the collectives: what each must give every worker (the
oracle), an in-memory fabric that reduces chunks as the data plane does (for the
bodies alone, without a network), and a harness that runs whole calls on the
reference model packet for packet on a virtual clock (so that impaired links may
also reorder)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.host.config import WorkerConfig
from ina.host.flow import Flow, elems_per_packet
from ina.host.results import AllreduceResult, CallBody, Lead, Reduce
from ina.host.sync import sync_answer, sync_request
from ina.host.window import ReductionWindow
from ina.model.harness import SYNC_ATTEMPTS, run_sessions, serve
from ina.model.network import ModelNetwork
from ina.protocol.arith import wrap_int16, wrap_int32
from ina.protocol.bitmaps import bit_of
from ina.protocol.constants import WIDTH16, Op
from ina.spec.job import Job

COLLECTIVES = ("allreduce", "reduce", "reduce_scatter", "broadcast", "allgather", "barrier")
Outcome = AllreduceResult | Exception


def configs(n: int, job_id: int = 4, window: int = 4, op: Op = Op.SUM,
            bfr_ids: Sequence[int] | None = None) -> list[WorkerConfig]:
    """The configs of ``n`` workers of one job, without a topology."""
    ids = tuple(bfr_ids or range(1, n + 1))
    peers = tuple(f"w{r + 1}" for r in range(n))
    return [WorkerConfig(job_id, op, bit_of(ids[r]), "10.0.100.1", window, n, "10.0.100.6",
                         peers[r], peers, rank=r, bfr_ids=ids) for r in range(n)]


# --- the oracle -------------------------------------------------------------------------


def reduced(op: Op, arrays: Sequence[npt.ArrayLike], width: int = 32) -> npt.NDArray[Any]:
    """The data plane's reduction of integer arrays (SUM wrapping in ``width`` bits)."""
    stacked = np.stack([np.asarray(a, dtype=np.int64) for a in arrays])
    dtype = np.int16 if width == WIDTH16 else np.int32
    if op == Op.SUM:
        total = stacked.sum(axis=0)
        wrapped = wrap_int16(total) if width == WIDTH16 else wrap_int32(total)
        return np.asarray(wrapped, dtype=dtype)
    return np.asarray(stacked.min(axis=0) if op == Op.MIN else stacked.max(axis=0), dtype=dtype)


def exact(op: Op, arrays: Sequence[npt.ArrayLike]) -> npt.NDArray[np.float64]:
    """The exact reduction of float arrays."""
    stacked = np.stack([np.asarray(a, dtype=np.float64) for a in arrays])
    out = {Op.SUM: stacked.sum(0), Op.MIN: stacked.min(0), Op.MAX: stacked.max(0)}[op]
    return np.asarray(out, dtype=np.float64)


def part(values: npt.NDArray[Any], n: int, r: int) -> npt.NDArray[Any]:
    """Rank ``r``'s part of a Reduce-scatter's result: ceil(S / N) values from r * that."""
    p = -(-values.size // n)
    return values[r * p: (r + 1) * p]


def expected(collective: str, arrays: Sequence[npt.NDArray[Any]], op: Op = Op.SUM,
             root: int = 0, width: int = 32) -> list[npt.NDArray[Any] | None]:
    """What each rank's result must hold (integers and movements: exactly; None: no
    values). Floats: see ``check``."""
    n = len(arrays)
    if collective == "broadcast":
        return [arrays[root]] * n
    if collective == "allgather":
        return [np.concatenate(list(arrays))] * n
    if collective == "barrier":
        return [None] * n
    whole = reduced(op, arrays, width)
    if collective == "allreduce":
        return [whole] * n
    if collective == "reduce":
        return [whole if r == root else None for r in range(n)]
    return [part(whole, n, r) for r in range(n)]


def check(collective: str, arrays: Sequence[npt.NDArray[Any]],
          outcomes: Sequence[Outcome], op: Op = Op.SUM, root: int = 0,
          width: int = 32) -> None:
    """Every rank got what the collective gives it: exactly (integers, movements) or
    within its bound of the exact reduction (floats)."""
    n = len(arrays)
    for r, outcome in enumerate(outcomes):
        assert isinstance(outcome, AllreduceResult), (r, outcome)
    results = [o for o in outcomes if isinstance(o, AllreduceResult)]
    floats = np.issubdtype(arrays[0].dtype, np.floating) and collective in (
        "allreduce", "reduce", "reduce_scatter")
    if not floats:
        for r, (wanted, got) in enumerate(zip(expected(collective, arrays, op, root, width),
                                              results, strict=True)):
            if wanted is None:
                assert got.values.size == 0, r
            else:
                assert got.values.dtype == wanted.dtype, (r, got.values.dtype, wanted.dtype)
                assert np.array_equal(got.values, wanted), r
        return
    whole = exact(op, arrays)
    for r, got in enumerate(results):
        want: npt.NDArray[np.float64] | None = whole
        if collective == "reduce":
            want = whole if r == root else None
        elif collective == "reduce_scatter":
            want = part(whole, n, r)
        if want is None:
            assert got.values.size == 0 and got.error_bound is None, r
            continue
        assert got.error_bound is not None and got.values.shape == want.shape, r
        error = np.abs(got.values.astype(np.float64) - want)
        assert np.all(error <= got.error_bound), (r, float(np.max(error - got.error_bound)))


# --- an in-memory fabric ----------------------------------------------------------------


@dataclass
class _Round:
    contributions: dict[int, tuple[npt.NDArray[Any], Op, Flow]] = field(default_factory=dict)
    results: dict[int, AllreduceResult] = field(default_factory=dict)


class LocalFabric:
    """Reduces the chunks of ``n`` workers' bodies as the data plane does (per chunk:
    the data contributions combined, NODATA only: a completion; the data to ``dest``
    or to every worker; with owners, the owner's values to every worker), checking
    that the workers agree on every chunk's count, width, op, dest and owner.
    ``reduce_of(r)`` is rank r's reduction backend."""

    def __init__(self, workers: Sequence[WorkerConfig]):
        self.workers = list(workers)
        self.lock = threading.Condition()
        self.rounds: dict[object, _Round] = {}
        self.flows: list[tuple[int, Flow]] = []  # every reduction's (seq, flow), rank 0's

    def reduce_of(self, rank: int) -> Reduce:
        def reduce(values: npt.NDArray[Any], op: Op, seq: int, phase: str,
                   flow: Flow | None = None, lead: Lead | None = None) -> AllreduceResult:
            if lead is not None:
                # The lead's round, then the array's, as a window's two parts.
                led = _round(("lead", seq), None, lead.values, Op.MAX, Flow()).values
                lead.check(led)
                r = _round(seq, seq, values, op, flow)
                return dataclasses.replace(r, packets=r.packets + 1, lead=led)
            return _round(seq, seq, values, op, flow)

        def _round(key: object, seq: int | None, values: npt.NDArray[Any], op: Op,
                   flow: Flow | None) -> AllreduceResult:
            flow = Flow() if flow is None else flow
            with self.lock:
                rnd = self.rounds.setdefault(key, _Round())
                rnd.contributions[rank] = (np.asarray(values), op, flow)
                if rank == 0 and seq is not None:  # the array's rounds, not leads
                    self.flows.append((seq, flow))
                if len(rnd.contributions) == len(self.workers):
                    self._complete(rnd)
                    self.lock.notify_all()
                if not self.lock.wait_for(lambda: rank in rnd.results, timeout=10):
                    raise TimeoutError(f"rank {rank}: the others never reached {key}")
                return rnd.results[rank]

        return reduce

    def _complete(self, rnd: _Round) -> None:
        entries = [rnd.contributions[r] for r in range(len(self.workers))]
        values0, op, flow0 = entries[0]
        e = elems_per_packet(flow0.width)
        size = values0.size
        chunks = len(flow0.counts) if flow0.counts is not None else -(-size // e)
        for values, o, flow in entries:
            assert (o, flow.width, values.size) == (op, flow0.width, size)
            for a, b in ((flow.counts, flow0.counts), (flow.dest, flow0.dest),
                         (flow.owners, flow0.owners)):
                assert (a is None and b is None) or (
                    a is not None and b is not None and np.array_equal(a, b))
        total = np.zeros(size, dtype=np.int64)
        overflow = np.zeros(chunks, dtype=bool)
        any_data = np.zeros(chunks, dtype=bool)
        by_id = {cfg.pbm.bit_length(): r for r, cfg in enumerate(self.workers)}
        for r, (values, _, flow) in enumerate(entries):
            for c in range(chunks):
                if (not flow.sends_data(c) if flow.owners is None
                        else by_id[int(flow.owners[c])] != r):
                    continue
                lo, hi = c * e, min((c + 1) * e, size)
                v = values[lo:hi].astype(np.int64)
                if not any_data[c]:
                    total[lo:hi] = v
                elif op == Op.SUM:
                    s = total[lo:hi] + v
                    w = wrap_int16(s) if flow0.width == WIDTH16 else wrap_int32(s)
                    overflow[c] |= bool(np.any(w != s))
                    total[lo:hi] = w
                else:
                    total[lo:hi] = (np.minimum if op == Op.MIN else np.maximum)(total[lo:hi], v)
                any_data[c] = True
        dtype = np.int16 if flow0.width == WIDTH16 else np.int32
        for r, cfg in enumerate(self.workers):
            gets = any_data if flow0.owners is not None else (
                flow0.received(chunks, cfg.pbm.bit_length()) & any_data)
            mask = np.repeat(gets, e)[:size]
            result = np.where(mask, total, 0).astype(dtype)
            rnd.results[r] = AllreduceResult(result, bool(np.any(overflow & gets)), chunks)


def run_bodies(fabric: LocalFabric, bodies: Sequence[CallBody], seq: int = 0
               ) -> list[Outcome]:
    """Each rank's body, in a thread of its own, on the fabric."""
    outcomes: list[Outcome | None] = [None] * len(bodies)

    def run(r: int) -> None:
        try:
            outcomes[r] = bodies[r](fabric.reduce_of(r), seq)[0]
        except Exception as exc:  # noqa: BLE001 (returned to the test)
            outcomes[r] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return [o if o is not None else TimeoutError("no outcome") for o in outcomes]


# --- whole calls on the model, on a virtual clock ---------------------------------------


class Lockstep:
    """Every worker's body of one call on the reference model, packet for packet: each
    reduction a body makes becomes a ReductionWindow; once every worker has made it
    (they make the same ones in the same order), ``run_sessions`` drives the windows
    on the model's virtual clock (impaired links may lose, duplicate and delay).
    The call starts with every worker's SYNC to the job's root."""

    def __init__(self, net: ModelNetwork, job: Job):
        self.net, self.job = net, job
        self.configs = {w: WorkerConfig.for_job(job, net.topology, w) for w in job.workers}
        self.lock = threading.Condition()
        self.pending: dict[str, ReductionWindow] = {}
        self.done: dict[str, AllreduceResult | Exception] = {}
        self.generation = 0
        self.windows: list[dict[str, ReductionWindow]] = []
        #: Per reduction: bytes each directed link carried for it (the model's count).
        self.link_bytes: list[dict[tuple[str, str], int]] = []

    def start(self) -> int:
        """The call's first sequence number, from the root's answers to every SYNC."""
        starts = {}
        for w, config in self.configs.items():
            for _ in range(SYNC_ATTEMPTS):
                self.net.host_send_payload(w, config.sync_target, sync_request(config, 7))
                while True:
                    serve(self.net, None)
                    if not self.net.release_held():
                        break
                answers = [s for p in self.net.received_payloads(w)
                           if (s := sync_answer(p, config, 7)) is not None]
                if answers:
                    starts[w] = answers[0]
                    break
        assert len(starts) == len(self.configs) and len(set(starts.values())) == 1, starts
        return next(iter(starts.values()))

    def _reduce_of(self, worker: str, active: set[str]) -> Reduce:
        def reduce(values: npt.NDArray[Any], op: Op, seq: int, phase: str,
                   flow: Flow | None = None, lead: Lead | None = None) -> AllreduceResult:
            window = ReductionWindow(self.configs[worker], values, seq, 0.05, op, 0, flow,
                                     lead=lead)
            with self.lock:
                generation = self.generation
                self.pending[worker] = window
                if set(self.pending) == active:
                    sessions, self.pending = dict(self.pending), {}
                    before = dict(self.net.bytes_on_link)
                    try:
                        run_sessions(self.net, sessions)
                    except Exception as exc:  # noqa: BLE001 (each worker raises it)
                        for w in sessions:
                            self.done[w] = exc
                    else:
                        for w, s in sessions.items():
                            self.done[w] = s.outcome()
                    self.windows.append(sessions)
                    self.link_bytes.append({k: v - before.get(k, 0)
                                            for k, v in self.net.bytes_on_link.items()
                                            if v != before.get(k, 0)})
                    self.generation += 1
                    self.lock.notify_all()
                ok = self.lock.wait_for(lambda: self.generation > generation, timeout=120)
                if not ok:
                    raise TimeoutError(f"{worker}: the others never made this reduction")
                outcome = self.done.pop(worker)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        return reduce

    def run(self, bodies: Mapping[str, CallBody]) -> dict[str, Outcome]:
        """Each worker's body of one call, in threads; what each returned or raised."""
        seq = self.start()
        active = set(bodies)
        outcomes: dict[str, Outcome] = {}

        def run(w: str) -> None:
            try:
                outcomes[w] = bodies[w](self._reduce_of(w, active), seq)[0]
            except Exception as exc:  # noqa: BLE001 (returned to the test)
                outcomes[w] = exc
                with self.lock:  # the others must not wait for this worker any more
                    active.discard(w)
                    self.lock.notify_all()

        threads = [threading.Thread(target=run, args=(w,)) for w in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        return outcomes


def body_of(collective: str, config: WorkerConfig, values: npt.NDArray[Any],
            op: Op = Op.SUM, root: int = 0, width: int | None = None) -> CallBody:
    """The body of ``collective`` at a worker."""
    from ina.host.allgather import allgather
    from ina.host.allreduce import allreduce
    from ina.host.barrier import barrier
    from ina.host.broadcast import broadcast
    from ina.host.reduce import reduce_to
    from ina.host.reduce_scatter import reduce_scatter

    makers: dict[str, Callable[[], CallBody]] = {
        "allreduce": lambda: allreduce(config, values, op, width),
        "reduce": lambda: reduce_to(config, values, root, op, width),
        "reduce_scatter": lambda: reduce_scatter(config, values, op, width),
        "broadcast": lambda: broadcast(config, values, root),
        "allgather": lambda: allgather(config, values),
        "barrier": lambda: barrier(config),
    }
    return makers[collective]()
