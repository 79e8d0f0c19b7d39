"""The call on a ring of hosts: a job that no switch aggregates (its edge switch
answers the workers' packets with ON_HOSTS) is reduced among its workers, on a
ring of TCP connections (ina.host.baselines.Ring, whose peers prove they hold the
job's ring secret), with the same call body and the data plane's arithmetic.

Every collective runs there as on switches, reduction by reduction: a chunk a
worker sends NODATA for counts as the op's identity (0 for SUM, the largest or
smallest value for MIN and MAX), so a chunk's result is what the data its workers
sent reduce to; 16-bit elements are reduced in 32 bits and wrapped to 16 (the
OVERFLOW flag set if a SUM left them); a worker keeps the data of the chunks the
flow gives it (zeros elsewhere, as a window's completions). The ring moves the
whole array whatever the collective (2(N-1)/N of it per worker): the fallback's
results are the switches', not their traffic.

The workers first agree on the call's start (those that know it), so that workers
in different calls fail rather than mix their arrays. A limit: a worker that
finished a call on switches before the job moved to hosts does not join the ring
for it, so those still in the call fail (AllreduceTimeout or AllreduceError,
saying so).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.errors import AllreduceError, AllreduceTimeout, RingError
from ina.host.config import WorkerConfig
from ina.host.flow import Flow, elems_per_packet
from ina.host.results import AllreduceResult, CallBody, CallStats, Lead, Reduce
from ina.host.ring import Ring
from ina.host.window import MAX_LEAD
from ina.protocol.arith import INT16_MAX, INT16_MIN, INT32_MAX, INT32_MIN, wrap_int16
from ina.protocol.constants import WIDTH16, Op

LOG = logging.getLogger(__name__)


def call_on_hosts(config: WorkerConfig, timeout: float, stats: CallStats, body: CallBody,
                  start: int, known: bool) -> tuple[AllreduceResult, int]:
    """The call of ``body`` on a ring of TCP connections among the job's workers, from
    ``start`` (``known``: from the root or a completed call, not a fresh worker's
    proposal), once the ring's workers agree on it: the result and the sequence
    number after the call's last. ``timeout`` bounds each wait on the ring."""
    c = config
    if not c.addresses:
        raise AllreduceError(f"job {c.job_id}: no switch aggregates the job and "
                             f"{c.name} does not know its peers' addresses to reduce "
                             "on hosts")
    stats.on_hosts += 1
    peers = ", ".join(c.peers) or "every worker"
    ring = Ring(c.rank, [c.ring_address(r) for r in range(len(c.addresses))],
                timeout, tag=c.job_id, secret=c.ring_secret)
    try:
        ring.open()
    except RingError as exc:
        raise AllreduceError(f"job {c.job_id}: {c.name} could not join the ring on "
                             f"hosts: {exc}") from exc
    except OSError as exc:
        raise AllreduceTimeout(
            f"job {c.job_id}: {c.name} could not join the ring on hosts (port "
            f"{c.ring_address(c.rank)[1]}): {exc}; is every worker of the job "
            f"({peers}) in this call? (a limit: a worker that finished the call on "
            "switches before the job moved to hosts does not join)") from exc
    finally:
        stats.ring_refused += len(ring.refused)
        for why in ring.refused:
            LOG.warning("job %d: %s: the ring on hosts refused a connection (%s)",
                        c.job_id, c.name, why)
    try:
        def reduce(values: npt.NDArray[Any], op: Op, seq: int, phase: str,
                   flow: Flow | None = None, lead: Lead | None = None) -> AllreduceResult:
            flow = Flow() if flow is None else flow
            try:
                led = None
                if lead is not None:  # as long as on switches (ina.host.window)
                    padded = np.zeros(MAX_LEAD, dtype=np.int32)
                    padded[: lead.values.size] = lead.values
                    led = ring.allreduce(padded, Op.MAX)[0][: lead.values.size]
                    lead.check(led)
                if values.size == 0:  # the lead alone (ina.host.window)
                    return AllreduceResult(values.astype(np.int32), False, 1,
                                           on_hosts=True, lead=led)
                reduced, overflow = ring.allreduce(contribution(values, op, flow), op)
            except RingError as exc:
                raise AllreduceError(f"job {c.job_id}: {c.name}: the ring on hosts "
                                     f"broke off while {phase}: {exc}") from exc
            except OSError as exc:
                raise AllreduceTimeout(
                    f"job {c.job_id}: {c.name} lost the ring on hosts while {phase}: "
                    f"{exc}; is every worker of the job ({peers}) still running?"
                    ) from exc
            result, wrapped = kept(reduced, flow, c.pbm.bit_length())
            return AllreduceResult(result, overflow or wrapped,
                                   _chunks(values.size, flow) + (lead is not None),
                                   on_hosts=True, lead=led)

        start = _agree_on_start(reduce, c.job_id, start, known)
        return body(reduce, start)
    finally:
        ring.close()


def _agree_on_start(reduce: Reduce, job_id: int, start: int, known: bool) -> int:
    """The call's start, agreed among the ring's workers with MAX: the highest and
    lowest start known (each 32-bit number in two 16-bit halves); a worker that
    does not know it (a fresh one) takes the others'."""
    halves = (start >> 16, start & 0xFFFF)
    mine = [v for h in halves for v in (h, -h)] if known else [INT32_MIN + 1] * 4
    got = reduce(np.array([*mine, int(known)], dtype=np.int32), Op.MAX, start,
                 "agreeing on the call's start").values
    if not got[4]:
        return start  # no worker knows: all fresh, all proposed 0
    high = (int(got[0]) << 16) | int(got[2])
    low = ((-int(got[1])) << 16) | -int(got[3])
    if high != low:
        raise AllreduceError(
            f"job {job_id}: the workers on hosts are in different calls "
            f"(starting at seq {low} and {high}): some finished a call on switches "
            "before the job moved to hosts, others did not (a limit: those cannot "
            "redo it together)")
    return high


def _per_element(per_chunk: npt.NDArray[Any], size: int, flow: Flow) -> npt.NDArray[Any]:
    return np.repeat(per_chunk, elems_per_packet(flow.width))[:size]


def contribution(values: npt.NDArray[Any], op: Op, flow: Flow) -> npt.NDArray[np.int32]:
    """A worker's values as the ring reduces them (int32): its NODATA chunks as the
    op's identity in the flow's width."""
    array = np.asarray(values).astype(np.int32)
    if flow.data is None:
        return array
    narrow = flow.width == WIDTH16
    identity = {Op.SUM: 0, Op.MIN: INT16_MAX if narrow else INT32_MAX,
                Op.MAX: INT16_MIN if narrow else INT32_MIN}[op]
    return np.where(_per_element(flow.data, array.size, flow), array,
                    np.int32(identity)).astype(np.int32)


def kept(reduced: npt.NDArray[np.int32], flow: Flow, bfr_id: int
         ) -> tuple[npt.NDArray[Any], bool]:
    """The ring's result as a window gives it, and whether a 16-bit SUM wrapped:
    in the flow's width, zeros in the chunks whose data goes to another worker."""
    result: npt.NDArray[Any] = reduced
    wrapped = False
    if flow.width == WIDTH16:
        narrow = wrap_int16(reduced.astype(np.int64))
        wrapped = bool(np.any(narrow != reduced))
        result = narrow.astype(np.int16)
    if flow.dest is not None or flow.empty:
        chunks = _chunks(result.size, flow)
        gets = _per_element(flow.received(chunks, bfr_id), result.size, flow)
        result = np.where(gets, result, 0).astype(result.dtype)
    return result, wrapped


def _chunks(size: int, flow: Flow) -> int:
    if flow.counts is not None:
        return len(flow.counts)
    return -(-size // elems_per_packet(flow.width))
