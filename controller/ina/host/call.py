"""The call protocol: how the workers of a job make one call together, whatever the
call's body (the collective: ina.host.allreduce, broadcast, reduce, reduce_scatter,
allgather, barrier; ina.host.worker offers them).

A deployed job serves any number of calls, from one process or from successive
ones. A worker sends every packet to its edge switch, which steers it in the job's
current plan: SYNCs to the job's root, contributions to the worker's parent VAT
node (so the worker needs no VAT, and the VAT may change). Each call
(``Caller.call``) has three steps:

1. **Start.** The worker asks the job's root where the call's sequence numbers
   begin (a SYNC packet, proposing the sequence number after its last call; the
   root answers the first SYNC after a deployment or a re-plan with its proposal,
   the others with 2W + 1 past the highest sequence number it has completed, W
   being the job's slots: the call's first 2W rounds then take no cell of the
   last W rounds before it, whose results a worker may still lack while the
   others have started the call). Every worker of a call gets the same answer, since
   nothing of the new call can complete before all of them have started, and the
   answer lies past anything an earlier call, finished or interrupted, has sent.
   The answer carries the plan's generation (``gen``), which every packet of the
   worker carries from then on.
2. **Agree.** At that first sequence number the workers reduce a descriptor of
   the call (``CallDescriptor``: array length, kind, op, collective, root, element
   width) with MAX: a barrier that shows every worker whether they all make the
   same call, and fails all of them with a clear error if not (``agree``).
3. **Reduce.** The call's body: its reductions, with the following sequence
   numbers (an AllReduce: the array, cut into packets; a float array: first its
   block exponents, then its values; ina.host.collective), each in a window of
   the job's slots on the network (ina.host.window: per chunk, data or NODATA,
   and a result with data or a completion, as the body's ``Flow`` says) over the
   worker's transport (ina.host.transport).

A re-plan of the job during a call (the edge switch turns a contribution back with
REPLAN and the new ``gen``: a ``Notice``) makes every worker run the call again from
its start; a job that no switch aggregates (ON_HOSTS) runs the same body on hosts,
on a TCP ring of its workers (ina.host.onhosts). A worker that gives up on a call
(a timeout, a failure, a stop signal) sends the root an ABORT with the highest
sequence number it sent, so that the next call starts past what this one left in
the cells. A call gives up after ``timeout`` seconds without a result, unless its
``patience`` hook says to wait on (every peer alive, only slow); the error then
says what was observed (the stall message).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from ina.errors import (
    AllreduceError,
    AllreduceTimeout,
    PlanChanged,
)
from ina.host.config import WorkerConfig
from ina.host.congestion import PACING_QUANTUM, CongestionWindow
from ina.host.flow import Flow
from ina.host.guesses import Guesses
from ina.host.onhosts import call_on_hosts
from ina.host.results import (
    REDUCING,
    AllreduceResult,
    CallBody,
    CallStats,
    Lead,
)
from ina.host.sync import Notice, SyncReply, notice_of, sync_reply, sync_request
from ina.host.transport import Transport, batched
from ina.host.window import (
    DEFAULT_RTO,
    MAX_BACKOFF_DOUBLINGS,
    ReductionWindow,
    RtoEstimator,
)
from ina.protocol.arith import seq_add, seq_diff
from ina.protocol.bitmaps import one_set
from ina.protocol.codec import InaHeader
from ina.protocol.constants import (
    OP_COPY,
    Flag,
    Op,
)

LOG = logging.getLogger(__name__)
_SYNC = int(Flag.SYNC)  # a plain int: tested on every received packet
_RESULT = int(Flag.RESULT)
#: First wait for the root's answer to a SYNC (doubled on each retry).
SYNC_RTO = 0.02
#: Until round trips of the array's packets are measured, the RTO is this many
#: times the SYNC's round trip (a header through idle queues).
SYNC_RTT_FACTOR = 8
#: Copies of the ABORT a worker sends when it gives up on a call.
ABORT_COPIES = 3
#: Times a call may be run again under a new plan of the job before it fails.
MAX_REPLANS = 8
#: Seconds between two questions to a Caller's ``patience`` while a call waits on
#: (cheap: a process group's timeout then fails the call within this of its end).
PATIENCE_RECHECK = 0.05
#: A call started without a SYNC (``Caller.next_start``) that has no result after
#: this many RTOs (and at least SYNC_CHECK_MIN seconds) asks the root once, with a
#: SYNC proposing its start: a root that lost the job's progress (a redeployment)
#: takes the proposal, and one whose job moved to hosts says so.
SYNC_CHECK_RTOS = 4
SYNC_CHECK_MIN = 0.25
#: Receive coalescing (``Caller._pause``): with at least this many packets
#: outstanding, the worker waits this share of the smoothed round trip (at most the
#: pacer's quantum) before it looks for results (so one wake takes several), unless
#: that is shorter than COALESCE_LEAST seconds (a sleep costs a timer's slack, about
#: 50 us). Up to 3 ms, against 1 ms before: DDP's ranks on Figure 1 with links
#: unlimited spent 31% less CPU a step; half the round trip went further there but
#: made a worker on a short round trip wait on its own pause
#: (docs/benchmarks-history.md, "Training").
COALESCE_IN_FLIGHT = 8
COALESCE_SHARE = 4
COALESCE_LEAST = 0.0002
#: An owner's values (OP_COPY) that arrive before this worker's window for them
#: exists (it is still in its last call, or asking the root for this one's start)
#: are kept, up to this many, for the next window: else each would wait for its
#: owner's retransmission.
EARLY_KEPT = 512


@dataclass
class Caller:
    """A worker of one job as it makes calls: ``call(body)`` runs a call's body (the
    collective) under the call protocol.

    Plans. The worker keeps ``gen``, the generation of the job's plan (from the
    root's answers and the edge switch's notices), and ``continuation``, the
    sequence number after its last completed call, which its SYNC proposes as the
    call's start (the root takes the first proposal after a deployment or a
    re-plan). If the job is planned anew during a call (REPLAN), the worker SYNCs
    again proposing the call's start and runs the whole call again from there
    under the new plan. If no switch aggregates the job (ON_HOSTS), the call runs
    on hosts: a TCP ring among the job's workers (ina.host.onhosts); the next call
    asks the root again.

    One round trip. After a call completed on switches, the worker knows where the
    next one starts: 2W past its end (``next_start``), where the root would answer
    a SYNC, since the job's progress is then the call's last sequence number. So
    it starts the next call there without asking (``pipelined_start``), and the
    call's descriptor rides in the lead chunk of its first reduction, with the
    array (``agreeing``): a call costs one round trip plus its data's time (a float
    call too if it repeats its kind, its exponents guessed: ina.host.guesses; else
    two, its exponents first). A SYNC is still sent by a worker that does not know
    the start (a fresh one, or after a failed call or a call on hosts), and by one
    whose call got no result for a while (SYNC_CHECK_RTOS): a root that lost the
    job's progress takes its proposal, an edge switch whose job moved to hosts says
    so, and a re-planned job's edge switch turns the first contribution back
    anyway.

    How fast it sends: ``cc``, the congestion window (ina.host.congestion), which
    lives across the worker's calls as the RTO estimate does.

    Limits: workers that completed a call before the job was re-planned, or moved to
    hosts, cannot redo it with the others: those still in the call fail (with
    AllreduceError saying so, or AllreduceTimeout on hosts).
    """

    config: WorkerConfig
    transport: Transport
    timeout: float = 5.0
    rto: RtoEstimator = field(default_factory=RtoEstimator)
    progress: Callable[[int, int], None] | None = None
    stats: CallStats = field(default_factory=CallStats)
    highest_sent: int = 0  # in the current call
    gen: int = 0  # the generation of the job's plan, as far as this worker knows
    continuation: int | None = None  # the sequence number after the last completed call
    max_replans: int = MAX_REPLANS  # per call
    #: Asked once no result has arrived for ``timeout`` seconds while reducing (and
    #: every PATIENCE_RECHECK seconds after), with the seconds without one: None to
    #: keep waiting (every peer is alive, only slow), or why to give up. Without it,
    #: the call gives up after ``timeout`` seconds.
    patience: Callable[[float], str | None] | None = None
    #: Start a call where the last one says, without a SYNC (see above).
    pipelined_start: bool = True
    #: Where the next call starts without a SYNC (None: unknown, ask the root).
    next_start: int | None = None
    #: The congestion window (default: one of the job's window, made on first use).
    cc: CongestionWindow | None = None
    #: Agreed exponents of earlier float calls, to send the next ones' values with
    #: their exponents (ina.host.guesses; None: exponents first, always).
    guesses: Guesses | None = field(default_factory=Guesses)
    #: Owners' values that came before their window (EARLY_KEPT).
    _early: deque[bytes] = field(default_factory=lambda: deque(maxlen=EARLY_KEPT))
    unconfirmed: int | None = None  # a call's start taken without a SYNC, no result yet
    _joined: bool = False  # a reduction of the call has completed: every worker is in it
    _on_hosts: bool = False  # the call ran on hosts

    def call(self, body: CallBody) -> AllreduceResult:
        """Run ``body`` as one call of the job: start it, run it (again under each new
        plan, or on hosts), give it up with an ABORT if it fails."""
        self._joined = self._on_hosts = False
        if self.pipelined_start and self.next_start is not None:
            reply, self.unconfirmed = SyncReply(self.next_start, self.gen), self.next_start
        else:
            reply, self.unconfirmed = self._start(), None
        self.next_start = None
        if (not reply.on_hosts and self.continuation is not None
                and seq_diff(reply.seq, self.continuation) < 0):
            raise AllreduceError(
                f"job {self.config.job_id}: {self.config.name}'s call would start at seq "
                f"{reply.seq}, before the end of its last call ({self.continuation}): the "
                "job's root has lost the progress of earlier calls (the job was re-planned "
                "while its workers were in different calls); the results of this call "
                "could mix different calls' arrays, so it is not run")
        self.highest_sent = seq_add(reply.seq, -1)
        try:
            result, end = self._calls(body, reply)
        except BaseException:
            self._abort()
            raise
        self.continuation = end
        if not self._on_hosts:
            self.next_start = seq_add(end, 2 * self.config.window)
        return result

    def _calls(self, body: CallBody, reply: SyncReply) -> tuple[AllreduceResult, int]:
        """The call from ``reply``'s start, run again under each new plan, or on hosts."""
        start, on_hosts, replans = reply.seq, reply.on_hosts, 0
        # A start without a SYNC: the array may go with the descriptor (agreeing).
        early = self.unconfirmed is not None
        # On hosts, the call's start is known if it came from the root (or from a
        # completed call); a fresh worker's proposal (0) is not.
        known = not reply.on_hosts or self.continuation is not None
        while True:
            try:
                self._on_hosts = on_hosts
                if on_hosts:
                    return call_on_hosts(self.config, self.timeout, self.stats, body, start,
                                         known)
                return body(_OnSwitches(self, early), start)
            except PlanChanged as notice:
                self.gen = notice.gen
                early = False
                if notice.on_hosts:
                    on_hosts, known = True, True
                    LOG.info("job %d: %s: no switch aggregates the job now: the call from "
                             "seq %d runs on hosts", self.config.job_id, self.config.name, start)
                    continue
                replans += 1
                self.stats.replans += 1
                if replans > self.max_replans:
                    raise AllreduceError(
                        f"job {self.config.job_id}: {self.config.name}'s call was re-planned "
                        f"{replans} times (more than {self.max_replans}): the job's plan "
                        "keeps changing (switches or links failing and coming back?)"
                        ) from None
                LOG.info("job %d: %s: the job was planned anew (gen %d): the call runs "
                         "again from seq %d", self.config.job_id, self.config.name,
                         notice.gen, start)
                again = self._start(start)
                if again.on_hosts:
                    on_hosts = True
                    LOG.info("job %d: %s: no switch aggregates the job now: the call from "
                             "seq %d runs on hosts", self.config.job_id, self.config.name, start)
                elif seq_diff(again.seq, start) < 0:
                    raise AllreduceError(
                        f"job {self.config.job_id}: {self.config.name}'s call (from seq "
                        f"{start}) cannot run again after the job was re-planned: the root "
                        f"starts calls at seq {again.seq}, before it: the job's root has "
                        "lost the progress of earlier calls (the job was re-planned while "
                        "its workers were in different calls)") from None
                elif again.seq != start:
                    raise AllreduceError(
                        f"job {self.config.job_id}: {self.config.name}'s call (from seq "
                        f"{start}) cannot run again after the job was re-planned: the root "
                        f"starts calls at seq {again.seq} now, so other workers had already "
                        "finished this call when the job was re-planned (a limit: a call "
                        "survives a re-plan only if no worker has finished it)") from None

    # --- the call on switches --------------------------------------------------------

    def _start(self, proposal: int | None = None) -> SyncReply:
        """The call's start from the job's root (``_sync``), its time counted."""
        began = time.monotonic()
        try:
            return self._sync(proposal)
        finally:
            self.stats.spent("starting", time.monotonic() - began)

    def _sync(self, proposal: int | None) -> SyncReply:
        """Ask the job's root for the call's first sequence number (SYNC), proposing
        ``proposal`` (default: the continuation, or 0); learn the plan's generation
        from the answer."""
        if proposal is None:
            proposal = 0 if self.continuation is None else self.continuation
        nonce = secrets.randbits(16)
        payload = sync_request(self.config, nonce, proposal, self.gen)
        started = time.monotonic()
        tries = 0
        while True:
            now = time.monotonic()
            if now - started > self.timeout:
                raise AllreduceTimeout(
                    f"job {self.config.job_id}: {self.config.name} got no answer from the "
                    f"job's root (through {self.config.sync_target}) to the start of the "
                    f"call within {self.timeout:g}s ({tries} requests sent): is the job "
                    "deployed, and its root reachable?")
            self.transport.send(payload, self.config.sync_target)
            sent = time.monotonic()
            self.stats.syncs += 1
            # The root answers at once, whatever the other workers do: a short wait,
            # doubled on each retry; but no shorter than the measured RTO, since the
            # answer queues as the calls' packets do (on the rate-limited fat-tree,
            # SYNCs every 80 ms while their answers waited seconds in a queue: 20 a call).
            wait = min(max(self.rto.floor, SYNC_RTO * (1 << min(tries, MAX_BACKOFF_DOUBLINGS)),
                           self.rto.rto if self.rto.srtt is not None else 0.0),
                       self.rto.ceiling, started + self.timeout - now)
            tries += 1
            deadline = sent + max(wait, 0.0)
            while (left := deadline - time.monotonic()) > 0:
                received = self.transport.recv(left)
                if received is None:
                    break
                reply = sync_reply(received, self.config, nonce)
                if reply is None:
                    self._keep_early(received)
                    continue
                self.gen = reply.gen
                if reply.on_hosts:
                    LOG.info("job %d: %s: no switch aggregates the job: the call runs on "
                             "hosts", self.config.job_id, self.config.name)
                    return reply
                # A header alone through idle queues: no round-trip sample for the
                # array's packets, but a better first RTO than the default.
                if tries == 1 and self.rto.srtt is None:
                    self.rto.initial = min(DEFAULT_RTO, max(
                        self.rto.floor, SYNC_RTT_FACTOR * (time.monotonic() - sent)))
                LOG.debug("job %d: call starts at seq %d (gen %d)", self.config.job_id,
                          reply.seq, reply.gen)
                return reply

    def _abort(self) -> None:
        """Tell the root this call is given up, and the highest sequence number sent
        in it, so that the next call starts past what this one left in the cells.
        Nothing answers: sent a few times, in case one is lost."""
        si, bits = one_set(self.config.pbm)
        payload = InaHeader(job_id=self.config.job_id, seq=self.highest_sent, pbm=bits,
                            count=0, op=self.config.op, flags=Flag.SYNC | Flag.ABORT,
                            si=si, gen=self.gen).pack()
        for _ in range(ABORT_COPIES):
            try:
                self.transport.send(payload, self.config.sync_target)
            except OSError as exc:  # the call failed already; say why, not this
                LOG.debug("could not send the call's ABORT: %s", exc)
                return

    def reduce_in_network(self, values: npt.NDArray[Any], op: Op, seq_base: int, phase: str,
                flow: Flow | None = None, lead: Lead | None = None) -> AllreduceResult:
        """One reduction in the network (what each chunk carries: ``flow``; ``lead``:
        values reduced with MAX before it, in its window); PlanChanged if the edge
        switch turns a contribution back with news."""
        if self.cc is None:
            self.cc = CongestionWindow.for_slots(self.config.window)
        window = ReductionWindow(self.config, values, seq_base, self.rto, op, self.gen, flow,
                                 self.cc, lead, self._joined)
        last_progress = began = time.monotonic()
        if window.plan.owners:
            while self._early:
                window.hold(self._early.popleft())
        give_up_at = last_progress + self.timeout
        check = _StartCheck(self, began) if self.unconfirmed is not None else None
        io = batched(self.transport)
        try:
            while not window.done:
                now = time.monotonic()
                sends = window.packets_to_send(now)
                if sends:
                    io.send_many(sends)
                if now > give_up_at:
                    why = (self.patience(now - last_progress) if self.patience is not None
                           else "")
                    if why is not None:
                        raise AllreduceTimeout(self._stalled(window, phase, why))
                    give_up_at = now + PATIENCE_RECHECK
                wake = give_up_at
                timer = window.next_timer()
                if timer is not None:
                    wake = min(wake, timer)
                if check is not None:
                    wake = min(wake, check.due(now))
                pause = self._pause(window, give_up_at - now)
                if pause:
                    time.sleep(pause)  # results gather: one wake takes several
                batch = io.recv_many(wake - time.monotonic())
                while batch:  # until nothing is queued
                    for received in batch:
                        # Only a notice, a QUERY's answer or a SYNC's answer has SYNC
                        # set among what a window receives.
                        if len(received) > 1 and received[1] & _SYNC:
                            notice = notice_of(received, self.config)
                            if notice is not None:
                                self._heed(notice, window)
                            elif window.answer(received, time.monotonic()):
                                pass
                            elif check is not None:
                                check.answered(received)
                        elif received and received[0] & 0xF == OP_COPY:  # an owner's values
                            if not window.hold(received):
                                self._keep_early(received)
                        elif window.accept(received, arrived := time.monotonic()):
                            last_progress = arrived
                            give_up_at = last_progress + self.timeout
                            self.unconfirmed = check = None  # the start is right
                            if self.progress is not None and phase == REDUCING:
                                self.progress(window.results, window.plan.chunks)
                    batch = io.recv_many(0.0)
        finally:
            # What the call's ABORT must cover, if it comes to one (``_abort``).
            if window.next and seq_diff(window.seq_of(window.next - 1),
                                         self.highest_sent) > 0:
                self.highest_sent = window.seq_of(window.next - 1)
            self.stats.spent(phase, time.monotonic() - began)
            self.stats.packets += window.next
            self.stats.retransmissions += window.retransmissions
            self.stats.early_retransmissions += window.early_retransmissions
            self.stats.probes += window.probes
            self.stats.queries += window.queries
            self.stats.held += window.held_answers
            self.stats.marked += window.marked
        self._joined = True
        return window.outcome()

    def _keep_early(self, payload: bytes) -> None:
        """Keep an owner's values that no window took (EARLY_KEPT)."""
        if len(payload) > 1 and payload[0] & 0xF == OP_COPY and payload[1] & _RESULT:
            self._early.append(payload)

    def _pause(self, window: ReductionWindow, left: float) -> float:
        """How long to let results gather before looking for them: a share of the
        round trip (COALESCE_SHARE) while COALESCE_IN_FLIGHT packets are outstanding,
        no longer than the pacer's quantum (what falls due meanwhile goes back to back
        when it wakes) nor ``left``; 0 if shorter than COALESCE_LEAST. Each wake costs
        the worker tens of microseconds of Python; a switch in a CPU-bound emulation
        answers a packet at a time, and is fed a packet at a time by a worker that
        answers each result as it comes."""
        srtt = self.rto.srtt
        if srtt is None or window.in_flight < COALESCE_IN_FLIGHT:
            return 0.0
        pause = min(srtt / COALESCE_SHARE, PACING_QUANTUM, left)
        return pause if pause >= COALESCE_LEAST else 0.0

    def _heed(self, notice: Notice, window: ReductionWindow) -> None:
        """A contribution turned back: act on news, ignore what is known already (a
        late notice of a packet sent before the worker learned the new plan)."""
        if notice.on_hosts:
            chunk = seq_add(notice.seq, -window.plan.seq_base)
            if chunk < window.next:  # of this reduction (not a late one of another)
                raise PlanChanged(notice.gen, on_hosts=True)
        elif notice.gen != self.gen:
            raise PlanChanged(notice.gen)

    def _stalled(self, window: ReductionWindow, phase: str, why: str = "") -> str:
        missing = window.missing()
        peers = ", ".join(self.config.peers) or "every worker"
        what = (f"job {self.config.job_id}: {self.config.name} got no result within "
                f"{self.timeout:g}s while {phase}: {len(missing)} of {window.plan.chunks} "
                f"packets unanswered (seq {missing[0]}"
                + (f"..{missing[-1]}" if len(missing) > 1 else "")
                + f"), {window.results} answered, {window.retransmissions} retransmissions"
                + (f", {window.unexpected} completions without the data this worker should "
                   "get (do the workers agree on the collective's destinations?)"
                   if window.unexpected else ""))
        if why:
            return f"{what}; {why}"
        if window.results == 0 and (phase == "agreeing on the call" or window.plan.offset):
            return (what + f"; the call did not start: not every worker of the job ({peers}) "
                    "has started this call (one stopped, or is still in an earlier one?)")
        return what + f"; is every worker of the job ({peers}) still running?"


@dataclass(frozen=True)
class _OnSwitches:
    """The Reduce a call's body gets on switches: the Caller's, and whether this
    run of the call started without a SYNC (``early``: see ``agreeing``)."""

    caller: Caller
    early: bool

    def __call__(self, values: npt.NDArray[Any], op: Op, seq: int, phase: str,
                 flow: Flow | None = None, lead: Lead | None = None, /) -> AllreduceResult:
        return self.caller.reduce_in_network(values, op, seq, phase, flow, lead)


class _StartCheck:
    """A call started without a SYNC (``Caller.next_start``) that has had no result
    for SYNC_CHECK_RTOS RTOs asks the root with a SYNC proposing its start (again,
    each wait doubled, until answered): a root that lost the job's progress (the
    job redeployed) takes the proposal, so the call's packets are taken from then
    on; an edge switch whose job moved to hosts answers ON_HOSTS (PlanChanged). Any
    other answer changes nothing: the root has the call's start already (its other
    workers may just be late), or moved past it (a peer gave the call up), which
    the call's timeout reports."""

    def __init__(self, caller: Caller, began: float):
        self.caller = caller
        self.wait = max(SYNC_CHECK_MIN, SYNC_CHECK_RTOS * caller.rto.rto)
        self.at = began + self.wait
        self.nonce: int | None = None

    def due(self, now: float) -> float:
        """When to look again; sends the SYNC if it is time."""
        if now >= self.at:
            c = self.caller
            assert c.unconfirmed is not None
            self.nonce = secrets.randbits(16)
            c.transport.send(sync_request(c.config, self.nonce, c.unconfirmed, c.gen),
                             c.config.sync_target)
            c.stats.syncs += 1
            self.wait *= 2
            self.at = now + self.wait
        return self.at

    def answered(self, payload: bytes) -> None:
        c = self.caller
        if self.nonce is None:
            return
        reply = sync_reply(payload, c.config, self.nonce)
        if reply is None:
            return
        self.nonce, self.at = None, float("inf")  # answered: no more checks
        if reply.on_hosts:
            raise PlanChanged(reply.gen, on_hosts=True)
        if reply.seq != c.unconfirmed:
            LOG.debug("job %d: %s: the root starts calls at seq %d, this call at %d",
                      c.config.job_id, c.config.name, reply.seq, c.unconfirmed)
