"""A call's SYNC and what answers it: the root's answer (the call's first sequence
number and the plan's generation), or the edge switch's notices (a contribution
turned back: the job planned anew, or on its hosts). Step 1 of a call (ina.host.call).
"""

from __future__ import annotations

from dataclasses import dataclass

from ina.host.config import WorkerConfig
from ina.host.window import RESULT_FIELDS
from ina.protocol.bitmaps import one_set
from ina.protocol.codec import InaHeader
from ina.protocol.constants import INA_HEADER_BYTES, INA_PAYLOAD_BYTES, Flag

GEN_OFFSET = 11  # the header's gen byte


def sync_request(config: WorkerConfig, nonce: int, proposal: int = 0, gen: int = 0) -> bytes:
    """A call's SYNC to the job's root: an INA header alone, its ``count`` a nonce
    that tells the answer to this SYNC from a late answer to an earlier one, its
    ``seq`` the worker's proposal for the call's start (what the root answers to the
    first SYNC of a deployment or of a new plan), its ``gen`` the plan's generation
    the worker knows (its edge switch stamps the current one)."""
    si, bits = one_set(config.pbm)
    return InaHeader(job_id=config.job_id, seq=proposal, pbm=bits, count=nonce & 0xFFFF,
                     op=config.op, flags=Flag.SYNC, si=si, gen=gen).pack()


@dataclass(frozen=True)
class SyncReply:
    """The answer to a call's SYNC: from the root, the call's first sequence number
    and the plan's generation; or, from the edge switch, ON_HOSTS (``seq`` is then
    the proposal sent back): no switch aggregates the job."""

    seq: int
    gen: int
    on_hosts: bool = False


def sync_reply(payload: bytes, config: WorkerConfig, nonce: int) -> SyncReply | None:
    """What ``payload`` says, if it answers our SYNC (a header alone, SYNC | REPLY,
    our job and nonce)."""
    if not INA_HEADER_BYTES <= len(payload) < INA_PAYLOAD_BYTES:
        return None
    flags, job_id, seq, count = RESULT_FIELDS.unpack_from(payload)
    answer = Flag.SYNC | Flag.REPLY
    if job_id != config.job_id or flags & answer != answer or count != nonce & 0xFFFF:
        return None
    gen = payload[GEN_OFFSET]
    if flags & Flag.ON_HOSTS:
        return SyncReply(int(seq), gen, on_hosts=True)
    if flags & (Flag.REPLAN | Flag.ABORT | Flag.RESULT):
        return None
    return SyncReply(int(seq), gen)


def sync_answer(payload: bytes, config: WorkerConfig, nonce: int) -> int | None:
    """The call's first sequence number, if ``payload`` is the root's answer to our
    SYNC (not an ON_HOSTS notice)."""
    reply = sync_reply(payload, config, nonce)
    return None if reply is None or reply.on_hosts else reply.seq


@dataclass(frozen=True)
class Notice:
    """A worker's contribution turned back by its edge switch (SYNC | REPLY and
    REPLAN or ON_HOSTS; the array comes back with it): the job was planned anew, in
    generation ``gen``, or no switch aggregates it now."""

    on_hosts: bool  # else REPLAN
    gen: int
    seq: int


def notice_of(payload: bytes, config: WorkerConfig) -> Notice | None:
    """The notice ``payload`` is, if it turns back one of our contributions (with its
    array, or a header alone with NODATA; a SYNC turned back, a header alone
    without NODATA, answers a SYNC: see sync_reply)."""
    if len(payload) < INA_HEADER_BYTES:
        return None
    flags, job_id, seq, _ = RESULT_FIELDS.unpack_from(payload)
    if len(payload) < INA_PAYLOAD_BYTES and not flags & Flag.NODATA:
        return None
    told = Flag.SYNC | Flag.REPLY
    if job_id != config.job_id or flags & told != told or flags & Flag.ABORT:
        return None
    if flags & Flag.ON_HOSTS:
        return Notice(True, payload[GEN_OFFSET], int(seq))
    if flags & Flag.REPLAN:
        return Notice(False, payload[GEN_OFFSET], int(seq))
    return None
