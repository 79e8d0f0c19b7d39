"""What the chaos soak's misbehaving member and outsider send (ina.bench.soak),
decided by a seed: ``member_frames`` and ``outsider_frames`` build the frames of
each kind of misbehaviour."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from ina.bench.chaos_calls import INT_RANGE
from ina.errors import UsageError
from ina.protocol.bitmaps import one_set
from ina.protocol.codec import InaHeader
from ina.protocol.constants import (
    BITSTRING_BITS,
    ELEMS_PER_PACKET,
    ETHERTYPE_BIER,
    ETHERTYPE_IPV4,
    INA_UDP_PORT,
    Flag,
    Op,
)
from ina.protocol.frames import Bier, Ethernet, Ipv4, Udp, bier_frame, ina_frame
from ina.spec.topology import Topology

# --- What the misbehaving member and the outsider send ----------------------------------

#: A worker of the job sending bad INA packets (ina.bench.soak_host's injector sends
#: the frames; "duplicates" makes it duplicate the worker's own frames on its link
#: for a moment and replay frames it captured).
MEMBER_KINDS = ("abort-far-ahead", "contributions-far-ahead", "another-count", "another-op",
                "forged-pbm", "duplicates")
#: A host that is no member of the job sending garbage.
OUTSIDER_KINDS = ("random-bytes", "forged-ina", "bier-from-host")
#: How far ahead "far ahead" is: beyond any window, up to just below half the
#: sequence-number space (further would count as behind).
FAR_AHEAD = (1 << 12, (1 << 31) - 1)


@dataclass(frozen=True)
class HostView:
    """A host as its frames show it: its addresses and its edge switch's."""

    name: str
    ip: str
    mac: str
    edge_ip: str  # where a worker sends everything (its edge switch's loopback)
    edge_mac: str
    bit: int  # its bit over all BIER sets

    @classmethod
    def of(cls, topology: Topology, host: str) -> HostView:
        edge, _ = topology.host_attachment(host)
        h = topology.hosts[host]
        return cls(host, h.ip, h.mac, topology.address(edge), topology.mac(edge), h.bit)


@dataclass(frozen=True)
class JobView:
    """What the misbehaviours need of the job."""

    job_id: int
    window: int  # the job's slots
    bits: dict[str, int]  # every worker's bit
    ips: dict[str, str]  # every worker's address
    switch_ips: tuple[str, ...]  # every switch's loopback (where roots and nodes are)


@dataclass(frozen=True)
class MemberState:
    """What the misbehaving member knows of its job, from its own last call: the
    sequence number after it (``seq``), the plan's generation, and the element
    counts of the calls under way (``counts``: a forged count avoids them)."""

    seq: int
    gen: int
    counts: frozenset[int] = frozenset()


def _header(job_id: int, seq: int, bitmap: int, count: int, op: int, flags: Flag,
            gen: int) -> bytes:
    si, bits = one_set(bitmap)
    return InaHeader(job_id=job_id, seq=seq & 0xFFFFFFFF, pbm=bits, count=count, op=op,
                     flags=flags, si=si, gen=gen & 0xFF).pack()


def _contribution(rng: random.Random, job_id: int, seq: int, bitmap: int, count: int,
                  op: int, gen: int) -> bytes:
    values = np.array([rng.randrange(-INT_RANGE, INT_RANGE) for _ in range(ELEMS_PER_PACKET)],
                      dtype=">i4").tobytes()
    return _header(job_id, seq, bitmap, count, op, Flag.NONE, gen) + values


def _from(host: HostView, payload: bytes, dst: str | None = None) -> bytes:
    return ina_frame(host.mac, host.edge_mac, host.ip, dst or host.edge_ip, payload)


def member_frames(kind: str, seed: int, member: HostView, job: JobView,
                  state: MemberState) -> list[bytes]:
    """The frames of one misbehaviour of ``kind`` by ``member`` (none for
    "duplicates", which its injector does itself), sent as the worker sends: to its
    edge switch, from its own addresses. None of them can pass for one of the
    worker's real packets: far ahead of every call, or with a count or op that no
    packet of the calls under way has, or with bits that are not the member's own."""
    rng = random.Random(seed)
    own = member.bit
    frames: list[bytes] = []
    if kind == "abort-far-ahead":
        # Some just below half the sequence space ahead: that far, the next call
        # would start "before" the workers' last one.
        far = rng.choice([rng.randint(*FAR_AHEAD), (1 << 31) - rng.randint(1, 2 * job.window)])
        frames.append(_from(member, _header(job.job_id, state.seq + far, own, 0, Op.SUM,
                                            Flag.SYNC | Flag.ABORT, state.gen)))
    elif kind == "contributions-far-ahead":
        for _ in range(rng.randint(1, 4)):
            seq = state.seq + rng.randint(*FAR_AHEAD)
            frames.append(_from(member, _contribution(rng, job.job_id, seq, own,
                                                      ELEMS_PER_PACKET, Op.SUM, state.gen)))
    elif kind == "another-count":
        counts = [c for c in range(1, ELEMS_PER_PACKET + 1) if c not in state.counts]
        for _ in range(rng.randint(1, 4)):
            seq = state.seq + rng.randrange(2 * job.window)
            count = rng.choice(counts + [0, ELEMS_PER_PACKET + 1 + rng.randrange(1000)])
            frames.append(_from(member, _contribution(rng, job.job_id, seq, own, count,
                                                      Op.SUM, state.gen)))
    elif kind == "another-op":
        for _ in range(rng.randint(1, 4)):
            seq = state.seq + rng.randrange(2 * job.window)
            # MIN: the soak's calls use SUM and MAX only; 0 and 4..15: no op at all.
            op = rng.choice([Op.MIN, Op.MIN, 0, rng.randint(4, 15)])
            frames.append(_from(member, _contribution(rng, job.job_id, seq, own,
                                                      ELEMS_PER_PACKET, op, state.gen)))
    elif kind == "forged-pbm":
        others = [b for b in job.bits.values() if b != own]
        for _ in range(rng.randint(1, 4)):
            other = rng.choice(others)
            bitmap = rng.choice([other, other | own, sum(job.bits.values())])
            seq = state.seq + rng.randrange(2 * job.window)
            if rng.random() < 0.3:  # a SYNC or an ABORT in another worker's name
                flags = rng.choice([Flag.SYNC, Flag.SYNC | Flag.ABORT])
                payload = _header(job.job_id, seq, bitmap, 0, Op.SUM, flags, state.gen)
            else:
                payload = _contribution(rng, job.job_id, seq, bitmap, ELEMS_PER_PACKET,
                                        Op.SUM, state.gen)
            frames.append(_from(member, payload))
    elif kind != "duplicates":
        raise UsageError(f"no misbehaviour {kind!r} of a member ({', '.join(MEMBER_KINDS)})")
    return frames


def outsider_frames(kind: str, seed: int, outsider: HostView, job: JobView) -> list[bytes]:
    """The frames of one burst of garbage of ``kind`` from ``outsider``, a host of
    no job: random bytes, INA packets in the job's name (or others') with forged
    P-BMs, sometimes a worker's source address, or BIER frames."""
    rng = random.Random(seed)
    frames: list[bytes] = []
    n = rng.randint(1, 8)
    all_bits = sum(job.bits.values())
    if kind == "random-bytes":
        for _ in range(n):
            body = rng.randbytes(rng.randint(0, 1400))
            ethertype = rng.choice([ETHERTYPE_IPV4, ETHERTYPE_BIER, rng.randrange(1 << 16)])
            dst = rng.choice([outsider.edge_mac, ":".join(f"{rng.randrange(256):02x}"
                                                          for _ in range(6))])
            frames.append(Ethernet(dst, outsider.mac, ethertype).pack() + body)
    elif kind == "forged-ina":
        for _ in range(n):
            job_id = rng.choice([job.job_id, job.job_id, rng.randrange(1 << 16)])
            bitmap = rng.choice([outsider.bit, all_bits, rng.choice(list(job.bits.values())),
                                 1 << rng.randrange(BITSTRING_BITS)])
            flags = rng.choice([Flag.NONE, Flag.NONE, Flag.SYNC, Flag.SYNC | Flag.ABORT,
                                Flag.SYNC | Flag.REPLY, Flag.RESULT, Flag.SYNC | Flag.REPLY
                                | Flag.REPLAN])
            seq = rng.randrange(1 << 32)
            if flags & Flag.SYNC:
                payload = _header(job_id, seq, bitmap, rng.randrange(1 << 16), Op.SUM, flags,
                                  rng.randrange(256))
            else:
                payload = _contribution(rng, job_id, seq, bitmap, ELEMS_PER_PACKET, Op.SUM,
                                        rng.randrange(256))
            dst = rng.choice([outsider.edge_ip, rng.choice(job.switch_ips),
                              rng.choice(list(job.ips.values()))])
            src = rng.choice([outsider.ip, rng.choice(list(job.ips.values()))])  # spoofed
            udp = Udp(INA_UDP_PORT, INA_UDP_PORT, 8 + len(payload))
            ip = Ipv4(src=src, dst=dst, ttl=64, total_len=20 + udp.length)
            frames.append(Ethernet(outsider.edge_mac, outsider.mac, ETHERTYPE_IPV4).pack()
                          + ip.pack() + udp.pack() + payload)
    elif kind == "bier-from-host":
        for _ in range(n):
            si, bits = one_set(all_bits)
            payload = _contribution(rng, job.job_id, rng.randrange(1 << 32), all_bits,
                                    ELEMS_PER_PACKET, Op.SUM, 0)
            payload = bytes([payload[0], Flag.RESULT]) + payload[2:]
            frames.append(bier_frame(outsider.mac, outsider.edge_mac, outsider.ip,
                                     Bier.for_set(si, bits), payload))
    else:
        raise UsageError(f"no garbage {kind!r} ({', '.join(OUTSIDER_KINDS)})")
    return frames
