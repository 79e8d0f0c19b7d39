"""Benchmark: one AllReduce three ways on the same Mininet + BMv2 network.

INA (the switches aggregate), a parameter server on a host outside the job, and
a ring among the workers (both over TCP, through the same switches doing plain
IPv4 forwarding). It prints values per second for each, the ratios INA/PS and
INA/ring measured in this one run, and the bytes each link carried per value,
next to what theory predicts: for INA the reference model's count of the very
frames the job sends, for PS and ring DESIGN-NOTES section 4 (PS: N x S in and
out of the server's link; ring: 2(N-1)/N x S each way on a worker's link).

    inalab -t topologies/figure1.yaml bench --job jobs/figure1-sum.yaml --size 262144
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ina.controller import Controller
from ina.job import Job, JobSpec, validate_job
from ina.model import allreduce_on_model, deployed_network
from ina.topology import Topology
from ina.worker_cli import random_array

Link = tuple[str, str]  # (from node, to node)
Procs = dict[str, "subprocess.Popen[bytes]"]
PS_PORT = 7100
RING_PORT = 7200
#: TCP/IP on Ethernet: a full segment carries 1448 payload bytes in a 1514-byte frame.
TCP_WIRE_PER_BYTE = 1514 / 1448


@dataclass
class Run:
    name: str
    seconds: float
    link_bytes: dict[Link, int]


def _intf_bytes(topology: Topology) -> dict[Link, int]:
    """Bytes sent on each link direction, read from the switch-side interfaces
    (/proc/net/dev: /sys still shows the machine's own namespace in the sandbox)."""
    counters: dict[str, tuple[int, int]] = {}
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, fields = line.partition(":")
        values = fields.split()
        counters[name.strip()] = (int(values[0]), int(values[8]))  # rx, tx bytes
    out: dict[Link, int] = {}
    for sw in topology.switches:
        for port, nb in topology.ports(sw).items():
            rx, tx = counters[f"{sw}-eth{port}"]
            out[(sw, nb.node)] = tx  # the switch sends toward the neighbour
            out[(nb.node, sw)] = rx
    return out


def _delta(after: dict[Link, int], before: dict[Link, int]) -> dict[Link, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def _wait_all(workers: Procs, others: Procs, timeout: float) -> dict[str, Any]:
    """Wait for every process; the workers' last output line is their JSON report."""
    results = {}
    for name, proc in {**workers, **others}.items():
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed ({proc.returncode}): {err.decode().strip()}")
        if name in workers:
            results[name] = json.loads(out.decode().strip().splitlines()[-1])
    return results


def predicted_ina_bytes(topology: Topology, job: Job, size: int) -> dict[Link, int]:
    """The bytes per link the reference model carries for this AllReduce."""
    net, _ = deployed_network(topology, job)
    allreduce_on_model(net, job, {w: random_array(size, i) for i, w in enumerate(job.workers)})
    return dict(net.bytes_on_link)


def run_bench(topology_path: Path, job_path: Path, size: int, build_dir: Path,
              ps_host: str | None = None) -> str:
    """Inside the sandbox: run the three AllReduces and return the report."""
    from ina.lab import Lab, LabOptions
    from ina.p4rt import connect

    topology = Topology.load(topology_path)
    job = validate_job(JobSpec.load(job_path), topology)
    ps_host = ps_host or next(h for h in sorted(topology.hosts) if h not in job.workers)
    workers = list(job.workers)
    n = len(workers)
    py = sys.executable
    runs: list[Run] = []
    with Lab(topology, LabOptions(build_dir=build_dir)) as lab:
        lab.init_switches_sync()

        async def deploy() -> None:
            async with connect(topology, lab.p4info) as clients:
                await Controller(topology, clients).deploy(job)

        asyncio.run(deploy())

        def measure(name: str, start: Callable[[], tuple[Procs, Procs]]) -> None:
            before = _intf_bytes(topology)
            main, helpers = start()
            results = _wait_all(main, helpers, timeout=600)
            runs.append(Run(name, max(r["elapsed"] for r in results.values()),
                            _delta(_intf_bytes(topology), before)))

        def start_ina() -> tuple[Procs, Procs]:
            return {w: lab.host(w).popen(
                [py, "-m", "ina.worker_cli", "-t", str(topology_path), "--job", str(job_path),
                 "--worker", w, "--random", str(size), "--seed", str(i), "--timeout", "30"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for i, w in enumerate(workers)}, {}

        def start_ps() -> tuple[Procs, Procs]:
            server = lab.host(ps_host).popen(
                [py, "-m", "ina.baselines", "ps-server", "--port", str(PS_PORT),
                 "--workers", str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            procs = {w: lab.host(w).popen(
                [py, "-m", "ina.baselines", "ps-worker", "--server", topology.hosts[ps_host].ip,
                 "--port", str(PS_PORT), "--random", str(size), "--seed", str(i)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i, w in enumerate(workers)}
            return procs, {"ps-server": server}

        def start_ring() -> tuple[Procs, Procs]:
            hosts = ",".join(topology.hosts[w].ip for w in workers)
            return {w: lab.host(w).popen(
                [py, "-m", "ina.baselines", "ring", "--rank", str(i), "--hosts", hosts,
                 "--port", str(RING_PORT), "--random", str(size), "--seed", str(i)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for i, w in enumerate(workers)}, {}

        measure("INA", start_ina)
        measure("PS", start_ps)
        measure("ring", start_ring)
    return _report(topology, job, size, ps_host, runs,
                   predicted_ina_bytes(topology, job, size))


def _report(topology: Topology, job: Job, size: int, ps_host: str, runs: list[Run],
            predicted: dict[Link, int]) -> str:
    n = len(job.workers)
    by = {r.name: r for r in runs}
    lines = [f"AllReduce of {size} int32 values from {n} workers ({', '.join(job.workers)}) "
             f"on {topology.name}, BMv2 switches; PS on {ps_host}.", ""]
    lines.append(f"{'method':<6} {'seconds':>8} {'values/s':>12}")
    for r in runs:
        lines.append(f"{r.name:<6} {r.seconds:>8.2f} {size / r.seconds:>12,.0f}")
    ina, ps, ring = by["INA"].seconds, by["PS"].seconds, by["ring"].seconds
    lines.append(f"ratios (same run): INA/PS {ps / ina:.2f}x, INA/ring {ring / ina:.2f}x "
                 "(values/s of INA over values/s of the other)")
    lines.append("")
    lines.append("Bytes carried per value (measured on the switch interfaces | theory):")
    root_links = [(a, b) for (a, b) in by["INA"].link_bytes if job.root in (a, b)]
    ps_edge, _ = topology.host_attachment(ps_host)

    def per_value(run: Run, link: Link) -> float:
        return run.link_bytes.get(link, 0) / size

    def busiest(run: Run) -> tuple[Link, float]:
        link = max(run.link_bytes, key=lambda k: run.link_bytes[k])
        return link, per_value(run, link)

    for a, b in sorted(root_links):
        if by["INA"].link_bytes.get((a, b), 0) or predicted.get((a, b), 0):
            lines.append(f"  INA root link {a}->{b}: {per_value(by['INA'], (a, b)):6.2f} | "
                         f"{predicted.get((a, b), 0) / size:6.2f} (reference model, same frames)")
    link, value = busiest(by["INA"])
    lines.append(f"  INA busiest link {link[0]}->{link[1]}: {value:6.2f} | "
                 f"{predicted.get(link, 0) / size:6.2f} (reference model)")
    tcp = 4 * TCP_WIRE_PER_BYTE
    for direction in ((ps_host, ps_edge), (ps_edge, ps_host)):
        lines.append(f"  PS server link {direction[0]}->{direction[1]}: "
                     f"{per_value(by['PS'], direction):6.2f} | {n * tcp:6.2f} (N x S)")
    link, value = busiest(by["PS"])
    lines.append(f"  PS busiest link {link[0]}->{link[1]}: {value:6.2f} | {n * tcp:6.2f}")
    link, value = busiest(by["ring"])
    lines.append(f"  ring busiest link {link[0]}->{link[1]}: {value:6.2f} | "
                 f"{2 * (n - 1) / n * tcp:6.2f} (2(N-1)/N x S)")
    lines.append("")
    lines.append(f"Theory uses 4-byte values on the wire: INA frames carry 64 values in "
                 f"342 bytes (5.34 B/value; 6.03 inside BIER), TCP {tcp:.2f} B/value "
                 "(data segments only; ACKs come on top).")
    return "\n".join(lines)


def run_deploy_bench(topology_path: Path, job_path: Path, build_dir: Path,
                     repeat: int = 5) -> str:
    """Inside the sandbox: deploy and tear down a job ``repeat`` times with all switches
    written at once, and as many times one switch after another; report both."""
    import statistics

    from ina.lab import Lab, LabOptions
    from ina.p4rt import connect

    topology = Topology.load(topology_path)
    spec = JobSpec.load(job_path)
    times: dict[bool, list[float]] = {True: [], False: []}
    with Lab(topology, LabOptions(build_dir=build_dir)) as lab:
        lab.init_switches_sync()

        async def measure() -> None:
            async with connect(topology, lab.p4info) as clients:
                for _ in range(repeat):
                    for concurrent in (True, False):
                        ctl = Controller(topology, clients, concurrent=concurrent)
                        started = time.perf_counter()
                        deployment = await ctl.deploy(spec)
                        times[concurrent].append(time.perf_counter() - started)
                        await ctl.teardown(deployment.job.job_id)

        asyncio.run(measure())
    at_once, serial = statistics.median(times[True]), statistics.median(times[False])
    switches = len(topology.switches)
    return (f"Deploying {job_path} on {topology.name} ({switches} switches), median of "
            f"{repeat}:\n  all switches at once:   {at_once * 1000:7.1f} ms\n"
            f"  one after another:      {serial * 1000:7.1f} ms\n"
            f"  speed-up: {serial / at_once:.2f}x")
