"""The chaos soak's processes on the lab's hosts, each driven over stdin/stdout by
the soak (ina.bench.soak), one JSON object a line each way.

    python -m ina.bench.soak_host worker -t TOPO --job JOB --worker NAME --seed S --timeout T
    python -m ina.bench.soak_host inject --host NAME

``worker``: one long-lived worker of the job, as a training process is: one
``Worker`` for all its calls. It says ``ready``, then for each line
``{"call": i, "size": n, "float": f}`` runs call ``i`` with its array from
(seed, i, rank) (ina.bench.chaos_calls.call_array), checks the result against the exact
one (every worker computes it: the arrays are seeded) and answers
``{"ok", "exact", "error", "kind", "elapsed", "replans", "on_hosts", "seq",
"gen"}``; an empty line ends it. SIGTERM during a call ends it the way a failure
does (the worker tells the root it gives up).

``inject``: puts raw Ethernet frames on the host's link, as a misbehaving host
would: ``{"frames": [hex, ...]}`` sends them; ``{"duplicates": seconds,
"replay": n}`` makes the host's link send a copy of about every second frame it
sends for that long (nftables ``dup`` on the interface's egress) and captures the frames the
host's worker sends meanwhile, then sends ``n`` of those captured so far (this
time's, and older ones) again. It answers ``{"sent": n}`` to each line.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ina.bench.chaos_calls import CallPlan, call_array, expected_result
from ina.errors import InaError
from ina.host.config import WorkerConfig
from ina.host.results import AllreduceResult
from ina.host.transport import UdpTransport
from ina.host.worker import Worker
from ina.protocol.constants import ETHERTYPE_IPV4, INA_UDP_PORT
from ina.protocol.frames import parse_frame

_ETH_P_ALL = 0x0003
#: Captured frames the injector keeps for replays.
KEEP = 256


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def worker(args: argparse.Namespace) -> int:
    config = WorkerConfig.from_files(args.topology, args.job, args.worker)
    signal.signal(signal.SIGTERM, _stop)
    with UdpTransport(config.target) as transport:
        w = Worker(config, transport, timeout=args.timeout)
        print("ready", flush=True)
        for line in sys.stdin:
            if not line.strip():
                break
            request = json.loads(line)
            plan = CallPlan(int(request["call"]), int(request["size"]), bool(request["float"]))
            print(json.dumps(_call(w, args.seed, plan)), flush=True)
    return 0


def _call(w: Worker, seed: int, plan: CallPlan) -> dict[str, Any]:
    """One run of the call: the result checked, or the error it ended with."""
    config = w.config
    values = call_array(seed, plan, config.rank)
    replans, on_hosts = w.stats.replans, w.stats.on_hosts
    started = time.monotonic()
    report: dict[str, Any] = {"call": plan.index, "ok": False, "exact": False, "error": "",
                              "kind": ""}
    try:
        result = w.allreduce(values)
    except (InaError, OSError) as exc:
        report.update(error=str(exc).splitlines()[0][:400], kind=type(exc).__name__)
    else:
        try:  # a float call's values as scaled by the exponents it used (a guess?)
            expected = expected_result(seed, plan, config.workers, result.exponents)
        except ValueError as exc:  # below the agreed ones: values were clipped
            report.update(ok=True, error=str(exc)[:400])
        else:
            _check(report, result, expected, plan)
    report.update(elapsed=round(time.monotonic() - started, 4),
                  replans=w.stats.replans - replans, on_hosts=w.stats.on_hosts - on_hosts,
                  seq=w.continuation if w.continuation is not None else 0, gen=w.gen)
    return report


def _check(report: dict[str, Any], result: AllreduceResult, expected: npt.NDArray[Any],
           plan: CallPlan) -> None:
    """Whether ``result`` is ``expected``, bit for bit, in ``report``."""
    exact = (result.values.dtype == expected.dtype and not result.overflow
             and np.array_equal(result.values, expected))
    report.update(ok=True, exact=bool(exact))
    if not exact:
        wrong = np.flatnonzero(result.values != expected)
        report["error"] = (f"{wrong.size} of {plan.size} values wrong (first at "
                           f"{int(wrong[0]) if wrong.size else -1}), overflow "
                           f"{result.overflow}, dtype {result.values.dtype}")


# --- The injector ---------------------------------------------------------------------


class Injector:
    """Raw frames onto a host's link, and duplicates and replays of its worker's."""

    def __init__(self, intf: str, ip: str):
        self.intf, self.ip = intf, ip
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
        self.sock.bind((intf, 0))
        self.sock.setblocking(False)
        self.captured: list[bytes] = []
        self.rng = random.Random(0)

    def send(self, frames: list[bytes]) -> int:
        sent = 0
        for f in frames:
            try:
                self.sock.send(f)
                sent += 1
            except OSError:  # a frame the kernel refuses (too short, too long): garbage
                pass
        return sent

    def _drain(self) -> None:
        """Keep the INA frames the host's worker sent (contributions, SYNCs) that
        arrived on the socket since the last drain."""
        while True:
            try:
                frame, address = self.sock.recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                return
            if address[2] != socket.PACKET_OUTGOING or len(frame) < 14 + 20 + 8:
                continue
            if int.from_bytes(frame[12:14], "big") != ETHERTYPE_IPV4:
                continue
            parsed = parse_frame(frame)
            if (parsed.ipv4 is not None and parsed.ipv4.src == self.ip
                    and parsed.udp is not None and parsed.udp.dport == INA_UDP_PORT
                    and parsed.ina is not None):
                self.captured.append(frame)

    def duplicates(self, seconds: float, replay: int) -> int:
        """Duplicate every frame the host sends for ``seconds``, capture what its
        worker sends meanwhile, then replay ``replay`` captured frames."""
        self._drain()
        _nft(_dup_command(self.intf, on=True))
        try:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(0.05)
                self._drain()
        finally:
            _nft(_dup_command(self.intf, on=False))
        self.captured = self.captured[-KEEP:]
        chosen = [self.rng.choice(self.captured) for _ in range(replay)] if self.captured else []
        return self.send(chosen)

    def close(self) -> None:
        _nft(_dup_command(self.intf, on=False))
        self.sock.close()


def _dup_command(intf: str, on: bool) -> str:
    off = "nft delete table netdev ina_soak_dup 2>/dev/null; true"
    if not on:
        return off
    return (f"{off}; nft 'add table netdev ina_soak_dup; add chain netdev ina_soak_dup "
            f"{intf} {{ type filter hook egress device {intf} priority 0; }}; "
            f"add rule netdev ina_soak_dup {intf} numgen random mod 2 == 0 dup to {intf}'")


def _nft(command: str) -> None:
    subprocess.run(["sh", "-c", command], check=False, capture_output=True)


def inject(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _stop)
    injector = Injector(args.intf, args.ip)
    try:
        print("ready", flush=True)
        for line in sys.stdin:
            if not line.strip():
                break
            request = json.loads(line)
            if "duplicates" in request:
                sent = injector.duplicates(float(request["duplicates"]),
                                           int(request.get("replay", 0)))
            else:
                sent = injector.send([bytes.fromhex(f) for f in request["frames"]])
            print(json.dumps({"sent": sent}), flush=True)
    finally:
        injector.close()
    return 0



def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ina.bench.soak_host", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("-t", "--topology", type=Path, required=True)
    w.add_argument("--job", type=Path, required=True)
    w.add_argument("--worker", required=True)
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--timeout", type=float, required=True)
    i = sub.add_parser("inject")
    i.add_argument("--ip", required=True, help="the host's address (its worker's frames)")
    i.add_argument("--intf", required=True, help="the host's interface")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return worker(args) if args.cmd == "worker" else inject(args)


if __name__ == "__main__":
    sys.exit(main())
