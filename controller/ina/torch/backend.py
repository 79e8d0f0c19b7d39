"""The torch.distributed backend ``ina``: the collectives through the switches.

``register()`` (done by ``import ina.torch``) makes ``init_process_group("ina")``
create a ``ProcessGroupIna`` at every rank, and so does every group made of its
ranks afterwards (``new_group``, ``new_subgroups``, ``init_device_mesh``, the groups
of a DeviceMesh): each group is an INA job of its own, its workers the hosts of the
group's ranks (``ina.torch.member``: INA_TOPOLOGY, INA_JOB, INA_WORKER, INA_NETWORK,
INA_JOB_SERVICE; a group no switch can take runs on its hosts, ``job()`` says so),
and

- ``all_reduce`` (SUM, AVG, MIN, MAX; float32, float16, bfloat16, integers; any
  shape, in place) and its coalesced form, ``reduce``, ``reduce_scatter`` (and
  ``reduce_scatter_tensor``, coalesced or not), ``broadcast``, ``all_gather``
  (and ``all_gather_into_tensor``, ``all_gather_coalesced``, coalesced or not;
  any type, bit for bit) and ``barrier`` go through the switches
  (ina.torch.convert: each as a collective of the rank's worker);
- float16 and bfloat16 SUMs travel in 32-bit elements, as float32's (no coarser
  than gloo's float16 sum), unless INA_HALF_WIDTH=16 or ``set_half_width(16)``
  says 16-bit ones (twice the values per packet, a coarser quantization); MIN and
  MAX of any float type are exact (ina.host.floatbits);
- what has no form in the data plane (``all_to_all``, ``gather``, ``scatter``:
  VIA_GLOO; ``send``, ``recv``: POINT_TO_POINT) goes through a gloo group the backend
  keeps beside its job, and so do the reductions the switches cannot make
  (ina.torch.convert.on_switches: PRODUCT and bitwise ops, sparse tensors, float64,
  int64, bool, complex), each counted as "gloo" in ``stats()``.

Every call, through the switches or through gloo, runs on the member's call
thread in the order the rank made it, so a broadcast and an all_reduce of one
tensor happen in program order, as with any backend. ``stats()`` counts each
collective by where it went. A call returns a Work at once; ``wait()`` blocks
until it is done and raises its error, if any; ``get_future()`` is completed with
the call's output tensors. After a float reduction, ``error_bound(tensor)`` says
per element how far the result may be from the exact reduction.
"""

from __future__ import annotations

import datetime
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    PrefixStore,
    ProcessGroupGloo,
    Store,
    Work,
)

from ina.errors import UsageError
from ina.spec.jobservice import Grant
from ina.torch import native
from ina.torch.convert import (
    Reduced,
    allgather_coalesced,
    allgather_into,
    allgather_into_coalesced,
    allgather_tensors,
    allreduce_tensor,
    broadcast_tensor,
    flat_concat,
    on_switches,
    rank_major,
    reduce_scatter_tensor,
    reduce_tensor,
    split_into,
    split_like,
)
from ina.torch.member import HALF_WIDTHS, Member, Node

LOG = logging.getLogger(__name__)
NAME = "ina"
#: Collectives that go through the backend's gloo group, by the names torch calls:
#: those the data plane has no form of (all_to_all: every rank's data to every
#: other, a different part each; gather, scatter: one rank's many parts; send and
#: recv: point to point).
VIA_GLOO = ("alltoall", "all_to_all_single", "gather", "gather_single", "scatter")
#: Point to point, through gloo too, once every call made before it is done.
POINT_TO_POINT = ("send", "recv", "recv_anysource")
#: Collectives that go through the switches, by the names torch calls (and stats()
#: counts): every one DDP and FSDP (FSDP1 and fully_shard) make in this torch version.
VIA_SWITCHES = ("allreduce", "allreduce_coalesced", "reduce", "reduce_scatter",
                "reduce_scatter_single", "reduce_scatter_single_coalesced", "broadcast",
                "allgather", "all_gather_single", "allgather_coalesced",
                "all_gather_single_coalesced", "barrier")


class ProcessGroupIna(native.load().BackendCore):  # type: ignore[misc]
    """One rank of the ``ina`` backend in one process group: its member of the group's
    INA job, and a gloo group for what the data plane has no form of (made at its
    first such call: a group that never makes one never pays for it).

    Its base is the backend's C++ half (ina.torch.native): torch wraps every Work a
    backend written in Python returns in a holder that forwards only ``wait`` and
    ``get_future`` (``is_completed()`` would stay False, ``source_rank()`` be refused);
    the C++ half returns this backend's Works as they are: a ``FutureWork`` per call
    (done when the call is, its ``wait()`` raising the call's error) and gloo's own for
    point to point."""

    def __init__(self, store: Store, rank: int, size: int, timeout: datetime.timedelta,
                 global_ranks: list[int] | None = None):
        super().__init__(rank, size)
        if not global_ranks:  # the default group
            self.member = Member.join(store, rank, size, timeout=timeout)
            Node.current = self.member.node
        else:
            node = Node.current
            if node is None:
                raise UsageError("a process group on the ina backend needs the default group "
                                 "on it too: init_process_group('ina') first")
            self.member = Member.of_group(node, store, rank, size, global_ranks, timeout)
        self._store, self._timeout = store, timeout
        self._gloo: ProcessGroupGloo | None = None
        #: Per float tensor (by id, while it lives), the error bound of its last
        #: all_reduce. (Tensors compare element-wise: no WeakKeyDictionary.)
        self._bounds: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor]] = {}
        #: Calls made in this group so far (its sequence number: what
        #: TORCH_DISTRIBUTED_DEBUG=DETAIL's checks compare across ranks).
        self._calls = 0

    @property
    def gloo(self) -> ProcessGroupGloo:
        """The group's gloo group, made at first use (on the call thread: every member
        makes the same calls in the same order, so they all make it together)."""
        if self._gloo is None:
            # gloo's options have only private names in torch's Python API.
            options = ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # noqa: SLF001
            options._timeout = self._timeout  # noqa: SLF001
            # gloo on the rank's own address: its lab host's, or the loopback beside the
            # embedded network (never an address it would guess from the host name).
            host = (self.member.topology.hosts[self.member.node.host].ip
                    if self.member.network == "lab" else "127.0.0.1")
            options._devices = [ProcessGroupGloo.create_device(hostname=host)]  # noqa: SLF001
            self._gloo = ProcessGroupGloo(PrefixStore("ina-gloo", self._store), self.rank(),
                                          self.size(), options)
        return self._gloo

    def getBackendName(self) -> str:
        return NAME

    def _get_sequence_number_for_group(self) -> int:
        return self._calls

    # What torch asks of a backend before it uses a feature. (Not defined here, its
    # question comes back to the Python object: endless recursion.)
    supports_coalescing = property(lambda self: False)
    supports_splitting = property(lambda self: False)
    supports_time_estimate = property(lambda self: False)
    supports_shrinking = property(lambda self: False)
    supports_reconfigure = property(lambda self: False)
    supports_window = property(lambda self: False)

    def stats(self) -> dict[str, dict[str, int]]:
        """Collectives made so far: {name: {"switches", "hosts" or "gloo": count}}."""
        return {k: dict(v) for k, v in self.member.counts.counts.items()}

    def job(self) -> Grant:
        """The group's job: its id, workers, and whether it runs on its hosts (and why)."""
        return self.member.grant

    def round_trip(self) -> float | None:
        """The least round trip of the group's job tree its calls have seen so far
        (the congestion window's base: a result's time from sending its contribution,
        queueing excluded), None before any call went through the switches."""
        cc = self.member.worker.cc
        return None if cc is None else cc.base_rtt

    def profile(self) -> dict[str, float]:
        """Seconds the calls through the switches spent so far in each phase (the
        worker's CallStats.seconds: starting, agreeing on the call, agreeing on
        exponents, reducing)."""
        return dict(self.member.worker.stats.seconds)

    # --- through the switches ----------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Work:
        op = opts.reduceOp.op.name
        if not on_switches(tensors, op):
            return self._reduced_by_gloo("allreduce", (tensors, opts), opts, tensors)

        def call() -> list[torch.Tensor]:
            tensor = self._one(tensors, "all_reduce")
            self._keep(tensor, allreduce_tensor(self.member.worker, tensor, op, self.size(),
                                                       self.member.half_width))
            return tensors

        return self._switches("allreduce", call)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> Work:
        op = opts.reduceOp.op.name
        if not on_switches(tensors, op):
            return self._reduced_by_gloo("allreduce_coalesced", (tensors, opts), opts, tensors)

        def call() -> list[torch.Tensor]:
            flat = flat_concat(tensors)
            reduced = allreduce_tensor(self.member.worker, flat, op, self.size(),
                                       self.member.half_width)
            split_into(flat, tensors)
            self._keep_split(tensors, reduced)
            return tensors

        return self._switches("allreduce_coalesced", call)

    def allreduce_sparse(self, tensors: list[torch.Tensor], opts: Any) -> Work:
        return self._via_gloo("allreduce_sparse", (tensors, opts))

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> Work:
        op, root = opts.reduceOp.op.name, opts.rootRank
        if not on_switches(tensors, op):
            if self.rank() == root:
                return self._reduced_by_gloo("reduce", (tensors, opts), opts, tensors)
            # gloo works in the tensors it is given: the others' stay as they were, as
            # the switches leave them.
            return self._reduced_by_gloo("reduce", ([t.clone() for t in tensors], opts),
                                         opts, [])

        def call() -> list[torch.Tensor]:
            tensor = self._one(tensors, "reduce")
            self._keep(tensor, reduce_tensor(self.member.worker, tensor, op, root,
                                             self.size(), self.member.half_width))
            return tensors

        return self._switches("reduce", call)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: Any) -> Work:
        op = opts.reduceOp.op.name
        if not on_switches([*outputs, *(t for ts in inputs for t in ts)], op):
            return self._reduced_by_gloo("reduce_scatter", (outputs, inputs, opts), opts,
                                         outputs)

        def call() -> list[torch.Tensor]:
            output = self._one(outputs, "reduce_scatter")
            (parts,) = self._one_list(inputs, "reduce_scatter")
            if any(p.numel() != output.numel() for p in parts):
                raise UsageError("reduce_scatter: every input tensor must have the "
                                 "output's size")
            whole = flat_concat(parts)
            self._keep(output, reduce_scatter_tensor(self.member.worker, output, whole, op,
                                                     self.size(), self.member.half_width))
            return outputs

        return self._switches("reduce_scatter", call)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts: Any) -> Work:
        op = opts.reduceOp.op.name
        if not on_switches([output, input], op):
            return self._reduced_by_gloo("reduce_scatter_single", (output, input, opts), opts,
                                         [output])

        def call() -> list[torch.Tensor]:
            self._keep(output, reduce_scatter_tensor(self.member.worker, output, input, op,
                                                     self.size(), self.member.half_width))
            return [output]

        return self._switches("reduce_scatter_single", call)

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any) -> Work:
        op = opts.reduceOp.op.name
        if not on_switches([*outputs, *inputs], op):
            return self._reduced_by_gloo("reduce_scatter_single_coalesced",
                                         (outputs, inputs, opts), opts, outputs)

        def call() -> list[torch.Tensor]:
            whole = rank_major(inputs, self.size())
            flat = flat_concat(outputs)
            reduced = reduce_scatter_tensor(self.member.worker, flat, whole, op, self.size(),
                                            self.member.half_width)
            split_into(flat, outputs)
            self._keep_split(outputs, reduced)
            return outputs

        return self._switches("reduce_scatter_single_coalesced", call)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Work:
        root = opts.rootRank

        def call() -> list[torch.Tensor]:
            broadcast_tensor(self.member.worker, self._one(tensors, "broadcast"), root)
            return tensors

        return self._switches("broadcast", call)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: Any) -> Work:
        def call() -> list[list[torch.Tensor]]:
            (out,) = self._one_list(outputs, "all_gather")
            allgather_tensors(self.member.worker, out, self._one(inputs, "all_gather"),
                              self.size())
            return outputs

        return self._switches("allgather", call)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts: Any) -> Work:
        def call() -> list[torch.Tensor]:
            allgather_into(self.member.worker, output, input, self.size())
            return [output]

        return self._switches("all_gather_single", call)

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]],
                            inputs: list[torch.Tensor], opts: Any) -> Work:
        def call() -> list[list[torch.Tensor]]:
            allgather_coalesced(self.member.worker, outputs, inputs, self.size())
            return outputs

        return self._switches("allgather_coalesced", call)

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor],
                                    inputs: list[torch.Tensor], opts: Any) -> Work:
        def call() -> list[torch.Tensor]:
            allgather_into_coalesced(self.member.worker, outputs, inputs, self.size())
            return outputs

        return self._switches("all_gather_single_coalesced", call)

    def barrier(self, opts: Any) -> Work:
        def call() -> list[torch.Tensor]:
            self.member.worker.barrier()
            return []

        return self._switches("barrier", call)

    @staticmethod
    def _one(tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise UsageError(f"the ina backend takes one tensor per {what}")
        return tensors[0]

    @staticmethod
    def _one_list(lists: Sequence[Sequence[torch.Tensor]], what: str
                  ) -> list[Sequence[torch.Tensor]]:
        if len(lists) != 1:
            raise UsageError(f"the ina backend takes one list of tensors per {what}")
        return [lists[0]]

    def _switches(self, name: str, call: Callable[[], Any]) -> Work:
        """A call through the group's job: the switches, or its hosts if no switch
        takes the group (``member.where``)."""
        return self._submit(name, self.member.where, call)

    def _keep(self, tensor: torch.Tensor, reduced: Reduced) -> None:
        bound = reduced.error_bound
        if bound is None:
            return
        key = id(tensor)
        if key not in self._bounds:
            weakref.finalize(tensor, self._bounds.pop, key, None)
        self._bounds[key] = (weakref.ref(tensor), bound)

    def _keep_split(self, tensors: Sequence[torch.Tensor], reduced: Reduced) -> None:
        """The bound of a coalesced call, per tensor."""
        if reduced.error_bound is None:
            return
        for t, bound in zip(tensors, split_like(reduced.error_bound.reshape(-1), tensors),
                            strict=True):
            self._keep(t, Reduced(bound, reduced.retransmissions, reduced.packets))

    def error_bound(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The error bound of ``tensor``'s last float reduction (all_reduce, reduce at
        its root, reduce_scatter's output), if it was one."""
        entry = self._bounds.get(id(tensor))
        return entry[1] if entry is not None and entry[0]() is tensor else None

    # --- through gloo ----------------------------------------------------------------

    def _via_gloo(self, name: str, args: Sequence[Any]) -> Work:
        def call() -> Any:
            getattr(self.gloo, name)(*args).wait()
            return args[0] if args and isinstance(args[0], list) else []

        return self._submit(name, "gloo", call)

    def _reduced_by_gloo(self, name: str, args: Sequence[Any], opts: Any,
                         results: Sequence[torch.Tensor]) -> Work:
        """A reduction the switches cannot make, by the gloo group: AVG as a SUM divided
        by the ranks in ``results`` after it (integers truncated toward zero, as the
        switches' integer AVG: gloo refuses an integer AVG)."""
        if opts.reduceOp.op.name != "AVG":
            return self._via_gloo(name, args)
        opts.reduceOp = dist.ReduceOp.SUM
        size = self.size()

        def call() -> Any:
            getattr(self.gloo, name)(*args).wait()
            with torch.no_grad():
                for t in results:
                    if t.is_floating_point() or t.is_complex():
                        t.div_(size)
                    else:
                        t.copy_(torch.div(t, size, rounding_mode="trunc"))
            return args[0] if args and isinstance(args[0], list) else []

        return self._submit(name, "gloo", call)

    def _point_to_point(self, name: str, args: Sequence[Any]) -> Work:
        """``send``, ``recv`` or ``recv_anysource`` on the group's gloo group, once every
        call made before it is done (program order), gloo's own Work returned (its
        source rank is what ``recv(src=None)`` asks of it)."""
        self._calls += 1
        self.member.counts.add(name, "gloo")
        self.member.calls.drain()
        work: Work = getattr(self.gloo, name)(*args)
        return work

    # --- calls in order ----------------------------------------------------------------

    def _submit(self, name: str, where: str, call: Callable[[], Any]) -> Work:
        self._calls += 1
        self.member.counts.add(name, where)
        future: torch.futures.Future[Any] = torch.futures.Future()

        def done(result: Any, error: BaseException | None) -> None:
            if error is not None:
                LOG.debug("%s failed: %s", name, error)
                # As an error, not a value (torch's set_exception stores the exception
                # as the future's value, which a Work in C++ cannot tell from a result).
                native.load().set_error(future, error)
            else:
                future.set_result(result)

        self.member.calls.submit(call, done)
        work: Work = native.load().FutureWork(future)
        return work

    def shutdown(self) -> None:
        self.member.close()
        _LIVE.discard(self)


def _gloo_method(name: str) -> Callable[..., Work]:
    def method(self: ProcessGroupIna, *args: Any) -> Work:
        return self._via_gloo(name, args)

    method.__name__ = name
    method.__doc__ = f"``{name}`` through the backend's gloo group."
    return method


def _point_to_point_method(name: str) -> Callable[..., Work]:
    def method(self: ProcessGroupIna, *args: Any) -> Work:
        return self._point_to_point(name, args)

    method.__name__ = name
    method.__doc__ = f"``{name}`` through the backend's gloo group, in program order."
    return method


for _name in VIA_GLOO:
    setattr(ProcessGroupIna, _name, _gloo_method(_name))
for _name in POINT_TO_POINT:
    setattr(ProcessGroupIna, _name, _point_to_point_method(_name))


#: Every backend not shut down yet. torch holds a backend's C++ half; with
#: TORCH_DISTRIBUTED_DEBUG=DETAIL it wraps it (ProcessGroupWrapper) and drops every
#: reference to its Python half, whose methods the C++ half calls (getBackendName,
#: the collectives): without this, the first collective failed with "getBackendName
#: is not implemented".
_LIVE: set[ProcessGroupIna] = set()


def create(opts: Any, backend_options: Any = None) -> ProcessGroupIna:
    """torch's extended creator: the group's store, rank, size, timeout and the
    default group's ranks in it (none for the default group itself)."""
    backend = ProcessGroupIna(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                              list(opts.global_ranks_in_group))
    _LIVE.add(backend)
    return backend


def register() -> None:
    """Make ``init_process_group("ina")`` available (again: harmless)."""
    dist.Backend.register_backend(NAME, create, extended_api=True, devices=["cpu"])


def backend_of(group: dist.ProcessGroup | None = None) -> ProcessGroupIna:
    """The ``ina`` backend of ``group`` (default: the default group)."""
    pg = group if group is not None else dist.group.WORLD
    if pg is None:
        raise UsageError("no process group: call init_process_group('ina') first")
    backend = pg._get_backend(torch.device("cpu"))  # noqa: SLF001 (torch has no public one)
    if not isinstance(backend, ProcessGroupIna):
        raise UsageError(f"the group's backend is {pg.name()}, not {NAME}")
    return backend


def stats(group: dist.ProcessGroup | None = None) -> dict[str, dict[str, int]]:
    """Collectives made so far by this rank in ``group``, by where they went: "switches",
    "hosts" (a group no switch takes: see ``job``), "gloo"."""
    return backend_of(group).stats()


def job(group: dist.ProcessGroup | None = None) -> Grant:
    """``group``'s job: its id, its workers (the hosts of its ranks, in group rank
    order), and ``on_hosts`` with the reason if no switch takes it."""
    return backend_of(group).job()


def profile(group: dist.ProcessGroup | None = None) -> dict[str, float]:
    """Seconds this rank's calls through the switches spent in each phase so far."""
    return backend_of(group).profile()


def round_trip(group: dist.ProcessGroup | None = None) -> float | None:
    """The least round trip (seconds) of ``group``'s job tree seen so far, or None."""
    return backend_of(group).round_trip()


def set_half_width(width: int, group: dist.ProcessGroup | None = None) -> None:
    """Reduce float16 and bfloat16 tensors in ``group`` in ``width``-bit elements from
    now on: 32 (the default: as float32, no coarser than gloo's float16 sum) or 16
    (twice the values per packet, one exponent per 640 values: coarser). Every rank
    must set the same width before the same call (a rank that differs fails that call
    with CallMismatch at every rank)."""
    if width not in HALF_WIDTHS:
        raise UsageError(f"float16 and bfloat16 travel in 16- or 32-bit elements, not {width}")
    backend_of(group).member.half_width = width


def error_bound(tensor: torch.Tensor, group: dist.ProcessGroup | None = None
                ) -> torch.Tensor | None:
    """Per element of ``tensor``, how far the result of its last float reduction in
    ``group`` (all_reduce, reduce at its root, reduce_scatter into it) may be from
    the exact reduction (float64, shaped like it); None for an integer tensor
    (exact) or one never reduced."""
    return backend_of(group).error_bound(tensor)
