"""A topology on Mininet + BMv2, with what the tests do to it: deploy jobs, run
workers on hosts, listen on hosts, put raw frames on a host's link."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import yaml

from ina.control.controller import Controller
from ina.control.switch import CounterValue
from ina.host.arrays import random_array
from ina.lab.deploy import controller_call, deploy
from ina.lab.labstate import run_dir
from ina.lab.mininet import Lab, LabOptions, wait_until
from ina.model.harness import reduce_arrays
from ina.protocol.bitmaps import one_set
from ina.protocol.codec import InaHeader
from ina.protocol.constants import Flag, JobStat
from ina.protocol.frames import ina_frame, parse_frame, udp_frame
from ina.spec.job import Job, JobSpec, validate_job
from ina.spec.topology import Topology

HERE = Path(__file__).resolve().parent
#: The destination port of ``NetLab.udp``'s frames (plain UDP, not INA).
UDP_PORT = 5001
#: Jobs deployed for a test: (job file, job) each.
Deployed = list[tuple[Path, Job]]
T = TypeVar("T")


@dataclass
class NetLab:
    """A topology on Mininet + BMv2, with helpers to deploy and run workers."""

    lab: Lab
    topology: Topology
    topology_path: Path
    workdir: Path
    reports: dict[str, Any] = field(default_factory=dict)

    def controller_call(self, fn: Callable[[Controller], Awaitable[T]],
                        write: bool = True) -> T:
        """Run ``fn(controller)`` over fresh P4Runtime connections."""
        return controller_call(self.lab, fn, write)

    def write_job(self, **spec: Any) -> Path:
        path = self.workdir / f"job{spec['job_id']}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return path

    def deploy(self, path: Path) -> Job:
        return deploy(self.lab, validate_job(JobSpec.load(path), self.topology))

    def teardown(self, job_id: int) -> None:
        self.controller_call(lambda ctl: ctl.teardown(job_id))

    @contextlib.contextmanager
    def deployed(self, *specs: dict[str, Any]) -> Iterator[Deployed]:
        """The jobs of ``specs`` deployed while the block runs."""
        jobs: Deployed = []
        try:
            for spec in specs:
                path = self.write_job(**spec)
                jobs.append((path, self.deploy(path)))
            yield jobs
        finally:
            for _, job in jobs:
                self.teardown(job.job_id)

    def start_workers(self, job_path: Path, job: Job, size: int | None, seed: int,
                      timeout: float = 10.0, only: Sequence[str] | None = None,
                      extra: Sequence[str] = ()) -> dict[str, subprocess.Popen[bytes]]:
        """Start ``inaworker`` on the hosts of the job's workers (or of ``only``);
        worker i's array is ``--random size --seed seed+i`` (no array if ``size`` is
        None: a barrier). ``extra``: more options (``--collective``, ``--root``...)."""
        procs = {}
        for i, w in enumerate(job.workers):
            if only is not None and w not in only:
                continue
            array = [] if size is None else ["--random", str(size), "--seed", str(seed + i)]
            procs[w] = self.lab.host(w).popen(
                [sys.executable, "-m", "ina.cli.inaworker", "-t", str(self.topology_path), "--job",
                 str(job_path), "--worker", w, *array,
                 "--timeout", str(timeout),
                 "--output", str(self.workdir / f"{w}-{job.job_id}.npy"), *extra],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
        return procs

    def finish_workers(self, job: Job, procs: dict[str, subprocess.Popen[bytes]]
                       ) -> dict[str, np.ndarray]:
        """Wait for the workers; their arrays (their JSON reports go to ``reports``)."""
        results = {}
        for w, proc in procs.items():
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, f"{w}: {err.decode()}"
            self.reports[w] = json.loads(out.decode().strip().splitlines()[-1])
            self.reports[w]["log"] = err.decode(errors="replace")[-2000:]  # its warnings
            results[w] = np.load(self.workdir / f"{w}-{job.job_id}.npy")
        return results

    def allreduce(self, job_path: Path, job: Job, size: int, seed: int, timeout: float = 10.0,
                  extra: Sequence[str] = ()) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Run every worker of the job on its host; (results, expected)."""
        results = self.finish_workers(
            job, self.start_workers(job_path, job, size, seed, timeout=timeout, extra=extra))
        arrays = [random_array(size, seed + i) for i in range(len(job.workers))]
        return results, reduce_arrays(job.op, arrays)

    def listen(self, host: str, record: Path | None = None) -> subprocess.Popen[bytes]:
        """Count (and record) INA datagrams arriving at ``host`` until stopped."""
        proc: subprocess.Popen[bytes] = self.lab.host(host).popen(
            [sys.executable, str(HERE / "listen.py"), *([str(record)] if record else [])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"listening"
        return proc

    @staticmethod
    def stop_listening(proc: subprocess.Popen[bytes]) -> int:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        return int(out.decode().strip() or "-1")

    def open_call(self, job: Job, proposal: int = 0) -> None:
        """The plan's first SYNC, from the job's first worker, proposing ``proposal``:
        the root's progress is then ``proposal - slots - 1`` and it takes
        contributions up to ``proposal`` (aggregation.p4, "The window")."""
        worker = job.workers[0]
        h = self.topology.hosts[worker]
        edge, _ = self.topology.host_attachment(worker)
        si, bits = one_set(h.bit)
        sync = InaHeader(job_id=job.job_id, seq=proposal, pbm=bits, count=1, si=si,
                         flags=Flag.SYNC).pack()
        self.send_frames(worker, [ina_frame(h.mac, self.topology.switches[edge].mac, h.ip,
                                            self.topology.address(job.root), sync)])

        def synced() -> bool:
            status = self.controller_call(lambda ctl: ctl.status())[job.root]
            return status.job_stats[job.job_id][JobStat.SYNCED].packets > 0

        wait_until(synced, 10, f"{job.root} to answer the SYNC")

    def port_counters(self, switch: str
                      ) -> tuple[dict[int, CounterValue], dict[int, CounterValue]]:
        """(packets sent, packets marked) per port of ``switch``."""
        s = self.controller_call(lambda ctl: ctl.status(), write=False)[switch]
        return s.port_packets, s.port_marks

    def udp(self, src: str, dst: str, size: int, tos: int = 0) -> bytes:
        """A plain UDP frame (not INA) of ``size`` bytes from ``src`` to ``dst``, IPv4
        TOS ``tos``, addressed to ``src``'s edge switch."""
        s, d = self.topology.hosts[src], self.topology.hosts[dst]
        edge, _ = self.topology.host_attachment(src)
        frame = parse_frame(udp_frame(s.mac, self.topology.switches[edge].mac, s.ip, d.ip,
                                      5000, UDP_PORT, bytes(size - 42)))
        assert frame.ipv4 is not None
        frame.ipv4.tos = tos
        return frame.pack()

    def send_frames(self, host: str, frames: list[bytes]) -> None:
        """Put raw Ethernet frames on the host's link (as a misbehaving host would)."""
        hexfile = self.workdir / f"frames-{host}.hex"
        hexfile.write_text("\n".join(f.hex() for f in frames))
        intf = self.lab.host(host).defaultIntf().name
        out = self.lab.host(host).cmd(
            f"{sys.executable} {HERE / 'sendframes.py'} {intf} {hexfile}; echo rc=$?")
        assert out.strip().endswith("rc=0"), out


class Labs:
    """At most one lab runs at a time (every topology uses the same gRPC ports):
    asking for another topology stops the running one."""

    def __init__(self, compiled: Path, tmp: pytest.TempPathFactory):
        self.compiled, self.tmp = compiled, tmp
        self.current: NetLab | None = None

    def get(self, topology_path: Path) -> NetLab:
        if self.current is not None and self.current.topology_path == topology_path:
            return self.current
        self.stop()
        topology = Topology.load(topology_path)
        log_dir = Path(os.environ["INA_TEST_BMV2_LOGS"]) \
            if "INA_TEST_BMV2_LOGS" in os.environ else None
        # In the run directory (the tests' own), as `inalab run` does: the commands the
        # tests run beside it find its credentials there.
        lab = Lab(topology, LabOptions(build_dir=self.compiled, log_dir=log_dir,
                                       run_dir=run_dir()))
        lab.start()
        try:
            lab.init_switches_sync()
        except BaseException:
            lab.stop()
            raise
        self.current = NetLab(lab, topology, topology_path, self.tmp.mktemp(topology.name))
        return self.current

    def stop(self) -> None:
        if self.current is not None:
            self.current.lab.stop()
            self.current = None
