"""Data-plane benchmark: what one BMv2 switch running the INA program does per second.

    inabench dataplane --json-out FILE.json --png FILE.png

One simple_switch_grpc with the real program (build/ina.json) and four hosts'
interfaces, inside private namespaces. A closed loop keeps a fixed number of
packets in flight through one path of the program at a time and counts what
comes out:

- ``forward``: plain IPv4 UDP frames h1 -> h2 of the same size as an INA packet,
  routed by the same program (its IPv4 path: host port, local address, route);
- ``absorb``: a VAT node below the root (job 1: s1 aggregates h1 and h2 for a
  root elsewhere): every contribution is absorbed into a cell, every second one
  completes it and leaves toward the parent;
- ``root``: the VAT root (job 2: s1 is the root of h1 and h2): the second
  contribution of each sequence number leaves as a BIER result to both workers
  (after a SYNC, as a call starts: a root takes contributions within its window);
- ``transit``: a worker's contribution that s1 only steers, as its edge switch,
  toward a parent elsewhere (job 3: a server root on h4, no switch aggregates);
- ``bier``: a result that s1 only replicates (job 3's server root on h4 sends it
  in BIER to h1 and h2): one packet in, two copies out, decapsulated.

Each host's contributions are policed, at a rate far above what the loop sends:
the meter costs what it costs, and drops nothing.

Rounds alternate the paths (median of the rounds), so a change in the machine's
load hits all of them alike. Packets per second are input packets the switch
processed; values per second count ELEMS_PER_PACKET aggregated values per
contribution. The ratio to ``forward`` is what the wide-lane design is judged by.
"""

from __future__ import annotations

import asyncio
import os
import select
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ina.bench.output import pyplot, save
from ina.control.access import Access
from ina.control.controller import Controller
from ina.errors import LabError
from ina.lab import sandbox
from ina.lab.mininet import bmv2_build
from ina.lab.pki import make_lab_pki, switch_tls_args
from ina.protocol.codec import InaHeader, ina_payload
from ina.protocol.constants import (
    ELEMS_PER_PACKET,
    ETHERNET_BYTES,
    INA_PAYLOAD_BYTES,
    INA_UDP_PORT,
    IPV4_UDP_BYTES,
    Flag,
)
from ina.protocol.frames import Bier, bier_frame, ina_frame, udp_frame
from ina.spec.job import JobSpec, validate_job
from ina.spec.topology import Topology

SWITCH = "s1"
HOSTS = ("h1", "h2", "h3", "h4")
#: Frame size of every path: an INA packet (Ethernet, IPv4, UDP, INA header, array).
FRAME_BYTES = ETHERNET_BYTES + IPV4_UDP_BYTES + INA_PAYLOAD_BYTES
#: Offset of the INA sequence number in a frame.
SEQ_OFFSET = ETHERNET_BYTES + IPV4_UDP_BYTES + 4
PACKET_OUTGOING = 4  # socket.PACKET_OUTGOING: our own transmissions, seen by raw sockets
ETH_P_ALL = 0x0003


#: INA packets per second each host of the rig may send of a job: far above what
#: the loop sends, so that the meter runs on every contribution and drops none.
RIG_HOST_RATE = 1_000_000


def rig_topology() -> Topology:
    """One switch, four hosts on ports 1..4."""
    return Topology.from_dict({
        "name": "dataplane-rig",
        "switches": {SWITCH: {"device_id": 1, "grpc": "127.0.0.1:50001",
                              "loopback": "10.0.100.1"}},
        "hosts": {h: {"ip": f"10.0.0.{i}", "mac": f"00:00:00:00:00:0{i}", "bfr_id": i}
                  for i, h in enumerate(HOSTS, start=1)},
        "links": [[f"{SWITCH}:{i}", h] for i, h in enumerate(HOSTS, start=1)],
        "policing": {"rate": RIG_HOST_RATE, "burst": RIG_HOST_RATE // 100},
    })


#: Job 1: s1 aggregates h1 and h2 below a server root (h4), which never runs:
#: s1's partial results are what the loop counts, on h4's link.
ABSORB_JOB = {"job_id": 1, "op": "sum", "workers": ["h1", "h2", "h3"], "root": "h4",
              "aggregators": {SWITCH: ["h1", "h2"]}, "slots": 64}
#: Job 2: s1 is the root of h1 and h2 and multicasts each result to both.
ROOT_JOB = {"job_id": 2, "op": "sum", "workers": ["h1", "h2"], "root": SWITCH, "slots": 64,
            "aggregators": {}}
#: Job 3: no switch aggregates; s1 steers h1's contributions to the server root on
#: h4 and replicates h4's BIER results to h1 and h2.
PASS_JOB_ID = 3
PASS_JOB = {"job_id": PASS_JOB_ID, "op": "sum", "workers": ["h1", "h2"], "root": "h4",
            "slots": 64, "aggregators": {}}


@dataclass
class PathRate:
    path: str
    packets_per_s: float  # input packets the switch processed
    values_per_s: float  # aggregated values (0 for forwarding)
    rounds: list[float]  # packets/s of each round
    lost: int  # packets the loop gave up waiting for
    cpu_us_per_packet: float  # the switch process's CPU time (all threads) per input packet
    #: CPU time per input packet of the switch's busiest thread, and the packets per
    #: second that thread could do at most (the switch's capacity, whatever the
    #: load generator can offer)
    bottleneck_us_per_packet: float
    capacity_per_s: float


#: The paths as the picture names them.
PATH_NAMES = {
    "forward": "plain IPv4 forwarding\n(no aggregation)",
    "absorb": "aggregation at a VAT node\nbelow the root (\"absorb\")",
    "root": "aggregation at the root,\nthen the BIER result (\"root\")",
    "transit": "a contribution steered\ntoward its parent (\"transit\")",
    "bier": "a BIER result replicated\nto two hosts (\"bier\")",
}


@dataclass
class DataplaneReport:
    bmv2: str
    frame_bytes: int
    values_per_packet: int
    window: int
    seconds_per_round: float
    paths: list[PathRate]

    def ratio(self, path: str) -> float:
        rates = {p.path: p.packets_per_s for p in self.paths}
        return rates[path] / rates["forward"]

    def capacity_ratio(self, path: str) -> float:
        rates = {p.path: p.capacity_per_s for p in self.paths}
        return rates[path] / rates["forward"]

    def figures(self) -> dict[str, Any]:
        """The report as JSON-ready data, with the ratios to forwarding."""
        data: dict[str, Any] = asdict(self)
        data["ratios"] = {path.path: self.ratio(path.path) for path in self.paths}
        data["capacity_ratios"] = {path.path: self.capacity_ratio(path.path)
                                   for path in self.paths}
        return data

    @classmethod
    def from_figures(cls, doc: Any) -> DataplaneReport:
        """From ``figures()``'s data (KeyError or TypeError if it is not that)."""
        return cls(doc["bmv2"], doc["frame_bytes"], doc["values_per_packet"], doc["window"],
                   doc["seconds_per_round"], [PathRate(**p) for p in doc["paths"]])

    def render(self) -> str:
        lines = [f"Data plane of one BMv2 switch ({self.bmv2}), the INA program, closed loop "
                 f"with {self.window} packets in flight, {self.frame_bytes}-byte frames "
                 f"({self.values_per_packet} int32 values); median of "
                 f"{len(self.paths[0].rounds)} rounds of {self.seconds_per_round:g} s.", "",
                 f"{'path':<36} {'packets/s':>9} {'values/s':>9} {'vs fwd':>7}   "
                 f"{'CPU/pkt':>8} {'busiest thread':>14} {'capacity':>9} {'vs fwd':>7}"]
        names = {"forward": "forward: plain IPv4, same program",
                 "absorb": "absorb: VAT node below the root",
                 "root": "root: absorb, then BIER result",
                 "transit": "transit: a contribution steered on",
                 "bier": "bier: a result replicated to two"}
        for p in self.paths:
            values = f"{p.values_per_s / 1e6:8.2f}M" if p.values_per_s else f"{'-':>9}"
            lines.append(f"{names[p.path]:<36} {p.packets_per_s:>9,.0f} {values:>9} "
                         f"{self.ratio(p.path):>6.2f}x   {p.cpu_us_per_packet:>5.1f} us "
                         f"{p.bottleneck_us_per_packet:>11.1f} us {p.capacity_per_s:>9,.0f} "
                         f"{self.capacity_ratio(p.path):>6.2f}x")
        lines.append("(packets/s: through the closed loop; CPU/pkt: the switch process, all "
                     "threads; capacity: 1 / the busiest thread's CPU per packet, what the "
                     "switch could do whatever the load generator offers)")
        lost = sum(p.lost for p in self.paths)
        if lost:
            lines.append(f"({lost} packets were lost and waited for: the figures are low)")
        return "\n".join(lines)

    def plot(self, path: Path) -> None:
        """Packets per second into the switch on each path, with the aggregated values
        per second and the ratio to plain forwarding written on each bar."""
        from matplotlib.ticker import FuncFormatter

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7.2, 4.2))
        names = [PATH_NAMES.get(p.path, p.path) for p in self.paths]
        rates = [p.packets_per_s for p in self.paths]
        bars = ax.bar(names, rates, color=["#888888", "#2a7ab0", "#1b5e20", "#b0892a", "#8e24aa"])
        for bar, p in zip(bars, self.paths, strict=True):
            values = (f"\n{p.values_per_s / 1e6:.2f} million values/s" if p.values_per_s else "")
            ax.annotate(f"{p.packets_per_s:,.0f} packets/s{values}\n"
                        f"{self.ratio(p.path):.2f}x forwarding",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.set_ylabel("packets per second into the switch\n(higher is better)")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}"))
        ax.tick_params(axis="x", labelsize=8)
        ax.set_ylim(0, max(rates) * 1.35)
        ax.set_title(f"One BMv2 switch running the INA program: {self.frame_bytes:,}-byte "
                     f"frames, {self.values_per_packet} values per INA packet,\n{self.window} "
                     f"packets in flight; median of {len(self.paths[0].rounds)} rounds",
                     fontsize=9)
        save(fig, path, self.bmv2, rect=(0, 0.04, 1, 1), footnote_y=0.01)


class Rig:
    """simple_switch_grpc with the program and four veth pairs, inside the sandbox."""

    def __init__(self, build_dir: Path):
        self.build_dir = build_dir
        self.topology = rig_topology()
        self.proc: subprocess.Popen[bytes] | None = None
        self.tls_dir: Path | None = None  # the switch's and the controller's credentials

    def __enter__(self) -> Rig:
        from ina.lab.mininet import (
            bmv2_command,
            port_open,
            run_in_lab,
            thrift_guard_command,
            thrift_port,
            wait_until,
            without_offloads,
        )

        if not sandbox.inside():
            raise LabError("the data-plane rig runs only inside the sandbox")
        subprocess.run(["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"], check=True)
        interfaces = {}
        for i, host in enumerate(HOSTS, start=1):
            sw_if, host_if = f"{SWITCH}-eth{i}", f"{host}-eth0"
            _ip("link", "add", sw_if, "type", "veth", "peer", "name", host_if)
            for intf in (sw_if, host_if):
                _ip("link", "set", intf, "up")
            without_offloads(sw_if)
            interfaces[i] = sw_if
        spec = self.topology.switches[SWITCH]
        self.tls_dir = Path(tempfile.mkdtemp(prefix="ina-rig-")) / "tls"
        make_lab_pki(self.tls_dir, self.topology)
        run_in_lab(thrift_guard_command([thrift_port(spec.device_id)], on=True))
        self.proc = subprocess.Popen(
            bmv2_command(spec.device_id, spec.grpc, interfaces,
                         tls_args=switch_tls_args(self.tls_dir, SWITCH)),
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_until(lambda: port_open(spec.grpc), 30, "simple_switch_grpc to listen")
        asyncio.run(self._configure())
        return self

    async def _configure(self) -> None:
        from ina.control.p4runtime import connect

        assert self.tls_dir is not None
        async with connect(self.topology, self.build_dir / "ina.p4info.txtpb",
                           self.build_dir / "ina.json", access=Access.tls_in(self.tls_dir),
                           push=True) as clients:
            ctl = Controller(self.topology, clients)
            await ctl.init()
            for spec in (ABSORB_JOB, ROOT_JOB, PASS_JOB):
                await ctl.deploy(validate_job(JobSpec.from_dict(spec), self.topology))

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.tls_dir is not None:
            shutil.rmtree(self.tls_dir.parent, ignore_errors=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


def _cpu_seconds(pid: int) -> float:
    """User and system time of a process, all its threads."""
    return _stat_seconds(Path(f"/proc/{pid}/stat"))


def _thread_seconds(pid: int) -> dict[int, float]:
    """User and system time of each thread of a process."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = _stat_seconds(task / "stat")
        except OSError:
            continue  # the thread ended
    return out


def _stat_seconds(stat: Path) -> float:
    fields = stat.read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _raw(interface: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((interface, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return sock


class Loop:
    """A closed loop over one path: ``send(unit)`` injects the packets of one unit
    (a sequence number, or one frame), each arrival on ``out`` completes one."""

    def __init__(self, send: Callable[[int], None], inputs_per_unit: int, out: socket.socket,
                 is_output: Callable[[bytes], bool]):
        self.send, self.inputs_per_unit = send, inputs_per_unit
        self.out, self.is_output = out, is_output
        self.next_unit = 0
        self.lost = 0
        self.inputs = 0  # input packets of the last run

    def run(self, seconds: float, window: int) -> float:
        """Input packets per second over ``seconds``, ``window`` packets in flight."""
        self.inputs = 0
        units_in_flight = max(1, window // self.inputs_per_unit)
        outstanding = done = 0
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            now = time.perf_counter()
            if now >= deadline:
                break
            while outstanding < units_in_flight:
                self.send(self.next_unit)
                self.next_unit += 1
                outstanding += 1
            ready, _, _ = select.select([self.out], [], [], 0.5)
            if not ready:  # a packet went missing: stop waiting for this window
                self.lost += outstanding
                outstanding = 0
                continue
            while True:
                try:
                    data, addr = self.out.recvfrom(4096, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                if addr[2] != PACKET_OUTGOING and self.is_output(data):
                    outstanding -= 1
                    done += 1
        elapsed = time.perf_counter() - start
        self.inputs = done * self.inputs_per_unit
        return self.inputs / elapsed


def _loops(topology: Topology) -> dict[str, Loop]:
    hosts = topology.hosts
    s1 = topology.switches[SWITCH]
    send_socks = {h: _raw(f"{h}-eth0") for h in ("h1", "h2")}
    out_h2, out_h4, out_h1 = _raw("h2-eth0"), _raw("h4-eth0"), _raw("h1-eth0")

    padding = bytes(FRAME_BYTES - 14 - 20 - 8)
    plain = udp_frame(hosts["h1"].mac, s1.mac, hosts["h1"].ip, hosts["h2"].ip, 5000, 5001,
                      padding)
    assert len(plain) == FRAME_BYTES

    def forward(unit: int) -> None:
        send_socks["h1"].send(plain)

    def udp_to(port: int) -> Callable[[bytes], bool]:
        def check(frame: bytes) -> bool:
            return len(frame) >= 38 and int.from_bytes(frame[36:38], "big") == port
        return check

    # The root takes contributions within a call's window: a call starts at seq 0.
    sync = InaHeader(job_id=2, seq=0, pbm=hosts["h1"].bit, count=1, flags=Flag.SYNC).pack()
    send_socks["h1"].send(ina_frame(hosts["h1"].mac, s1.mac, hosts["h1"].ip, s1.loopback, sync))
    deadline = time.monotonic() + 5.0
    while True:
        if not select.select([out_h1], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise LabError("the rig's root did not answer its SYNC: is the program built?")
        data, addr = out_h1.recvfrom(4096)
        if addr[2] != PACKET_OUTGOING and udp_to(INA_UDP_PORT)(data):
            break

    def contributions(job_id: int) -> Callable[[int], None]:
        frames = {h: bytearray(ina_frame(hosts[h].mac, s1.mac, hosts[h].ip, s1.loopback,
                                         ina_payload(job_id, 0, hosts[h].bit,
                                                     [i % 1000 for i in range(ELEMS_PER_PACKET)])))
                  for h in ("h1", "h2")}
        for frame in frames.values():
            assert len(frame) == FRAME_BYTES

        def send(unit: int) -> None:
            for h, frame in frames.items():
                frame[SEQ_OFFSET:SEQ_OFFSET + 4] = (unit & 0xFFFFFFFF).to_bytes(4, "big")
                send_socks[h].send(frame)

        return send

    send_h4 = _raw("h4-eth0")
    result = bytearray(bier_frame(
        hosts["h4"].mac, s1.mac, hosts["h4"].ip,
        Bier.for_set(0, hosts["h1"].bit | hosts["h2"].bit),
        ina_payload(PASS_JOB_ID, 0, hosts["h1"].bit | hosts["h2"].bit,
                    list(range(ELEMS_PER_PACKET)), flags=Flag.RESULT)))
    result_seq = len(result) - INA_PAYLOAD_BYTES + 4

    def results(unit: int) -> None:
        result[result_seq:result_seq + 4] = (unit & 0xFFFFFFFF).to_bytes(4, "big")
        send_h4.send(result)

    return {
        "forward": Loop(forward, 1, out_h2, udp_to(5001)),
        "absorb": Loop(contributions(1), 2, out_h4, udp_to(INA_UDP_PORT)),
        "root": Loop(contributions(2), 2, out_h1, udp_to(INA_UDP_PORT)),
        "transit": Loop(contributions(PASS_JOB_ID), 2, out_h4, udp_to(INA_UDP_PORT)),
        "bier": Loop(results, 1, out_h1, udp_to(INA_UDP_PORT)),
    }


def run(build_dir: Path, rounds: int, seconds: float, window: int) -> DataplaneReport:
    """Inside the sandbox: measure every path ``rounds`` times, alternating."""
    with Rig(build_dir) as rig:
        loops = _loops(rig.topology)
        for loop in loops.values():  # warm up every path (and check it works)
            if loop.run(0.5, window) == 0:
                raise LabError("a path of the rig carries nothing: is the program built?")
        for loop in loops.values():
            loop.lost = 0
        samples: dict[str, list[float]] = {name: [] for name in loops}
        cpu: dict[str, list[float]] = {name: [] for name in loops}
        busiest: dict[str, list[float]] = {name: [] for name in loops}
        assert rig.proc is not None
        for _ in range(rounds):
            for name, loop in loops.items():
                before, threads = _cpu_seconds(rig.proc.pid), _thread_seconds(rig.proc.pid)
                samples[name].append(loop.run(seconds, window))
                inputs = max(loop.inputs, 1)
                cpu[name].append((_cpu_seconds(rig.proc.pid) - before) / inputs)
                after = _thread_seconds(rig.proc.pid)
                busiest[name].append(max(after[t] - threads.get(t, 0.0) for t in after) / inputs)
    paths = []
    for name, rates in samples.items():
        pps = statistics.median(rates)
        bottleneck = statistics.median(busiest[name])
        aggregates = name in ("absorb", "root")
        paths.append(PathRate(name, pps, pps * ELEMS_PER_PACKET if aggregates else 0.0,
                              rates, loops[name].lost, statistics.median(cpu[name]) * 1e6,
                              bottleneck * 1e6, 1 / bottleneck if bottleneck else 0.0))
    return DataplaneReport(bmv2_build(), FRAME_BYTES, ELEMS_PER_PACKET, window, seconds, paths)
