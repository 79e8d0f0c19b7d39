"""Helpers shared by the tests: paths, the Figure 1 job, the reference model of a network,
processes, and captures decoded by the Wireshark dissector."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import yaml

from ina.control.controller import Controller
from ina.control.memory_switch import MemorySwitch
from ina.control.switch import CounterValue
from ina.host.config import WorkerConfig
from ina.host.sync import sync_answer, sync_request
from ina.host.window import ReductionWindow
from ina.host.worker import Worker
from ina.model.embedded import EmbeddedNetwork
from ina.model.harness import initialised_network, reduce_arrays
from ina.model.network import ModelNetwork, ModelTransport
from ina.protocol.constants import SwitchStat
from ina.spec.job import Job, JobSpec, validate_job
from ina.spec.topology import Topology

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
FIGURE1 = ROOT / "topologies" / "figure1.yaml"
FIGURE1_JOB = ROOT / "jobs" / "figure1-sum.yaml"
#: The draft's Figure 1 job (job 1: s1 aggregates w1, w2, s7 w3, w4, s6 is the root).
FIGURE1_SPEC: dict[str, Any] = yaml.safe_load(FIGURE1_JOB.read_text())


def job_from(topology: Topology, **spec: Any) -> Job:
    return validate_job(JobSpec.from_dict(spec), topology)


def figure1_job(topology: Topology, **overrides: Any) -> Job:
    """The draft's Figure 1 job, with fields replaced by ``overrides``."""
    return job_from(topology, **{**FIGURE1_SPEC, **overrides})


@dataclass
class ModelLab:
    """A topology on the reference model, initialised by the real controller."""

    topology: Topology
    stores: dict[str, MemorySwitch]
    ctl: Controller
    net: ModelNetwork

    def deploy(self, job: Job) -> Job:
        """``job`` deployed by the controller on every switch; ``job``."""
        asyncio.run(self.ctl.deploy(job))
        return job

    def deploy_figure1(self, **overrides: Any) -> Job:
        """The draft's Figure 1 job, with fields replaced by ``overrides``, deployed."""
        return self.deploy(figure1_job(self.topology, **overrides))


def make_model_lab(topology: Topology) -> ModelLab:
    net, ctl = initialised_network(topology)
    return ModelLab(topology, {name: sw.store for name, sw in net.switches.items()}, ctl, net)


def int_arrays(job: Job, size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A random int32 array per worker, small enough that no SUM overflows."""
    rng = np.random.default_rng(seed)
    return {w: rng.integers(-(2**20), 2**20, size, dtype=np.int32) for w in job.workers}


def assert_exact(job: Job, arrays: Mapping[str, npt.ArrayLike],
                 results: Mapping[str, npt.ArrayLike]) -> None:
    """Every worker of the job got the reduction of every worker's array."""
    expected = reduce_arrays(job.op, list(arrays.values()))
    for w in job.workers:
        assert np.array_equal(results[w], expected), w


def session_results(sessions: Mapping[str, ReductionWindow]) -> dict[str, npt.NDArray[Any]]:
    """Each worker's result from its finished session."""
    return {w: s.outcome().values for w, s in sessions.items()}


def switch_stat(lab: ModelLab, switch: str, stat: SwitchStat) -> int:
    """Packets a switch-wide counter of the model lab has counted."""
    return asyncio.run(lab.ctl.status())[switch].switch_stats.get(stat, CounterValue()).packets


def open_call(lab: ModelLab, job: Job, proposal: int = 0) -> int:
    """A call's start, as a job's first worker makes it: its SYNC to the root (the
    root takes contributions only in a call of the job's plan), proposing
    ``proposal``; the answer (the call's first sequence number), its inbox emptied."""
    worker = job.workers[0]
    config = WorkerConfig.for_job(job, lab.topology, worker)
    lab.net.host_send_payload(worker, config.sync_target, sync_request(config, 1, proposal))
    (answer,) = [seq for payload in lab.net.received_payloads(worker)
                 if (seq := sync_answer(payload, config, 1)) is not None]
    return answer


def model_workers(lab: ModelLab, job: Job, timeout: float = 5.0) -> dict[str, Worker]:
    """A real Worker per worker of the job, on the model network."""
    workers = {}
    for w in job.workers:
        config = WorkerConfig.for_job(job, lab.topology, w)
        workers[w] = Worker(config, ModelTransport(lab.net, w, config.target), timeout=timeout)
    return workers


def in_threads(calls: dict[str, Callable[[], T]]) -> dict[str, T | Exception]:
    """Run each call in a thread of its own (as workers on their hosts); what each
    returned or raised."""
    outcomes: dict[str, T | Exception] = {}

    def run(name: str) -> None:
        try:
            outcomes[name] = calls[name]()
        except Exception as exc:  # noqa: BLE001 (returned to the test)
            outcomes[name] = exc

    threads = [threading.Thread(target=run, args=(name,)) for name in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return outcomes


# --- processes and sandboxes -----------------------------------------------------------

def children(pid: int) -> list[int]:
    """The PIDs of a process's children (none if it is gone)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def processes_in(namespace: str) -> list[int]:
    """Every process (as this test sees it) whose PID namespace is ``namespace``."""
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and pid_namespace(int(p.name)) == namespace]


# --- captures, through the Wireshark dissector ----------------------------------------

TSHARK = shutil.which("tshark")
DISSECTOR = ROOT / "tools" / "wireshark" / "ina.lua"
NO_TSHARK = "tshark not found: apt-get install tshark (tests of tools/wireshark/ina.lua)"


def dissect(pcap: Path, fields: Sequence[str],
            display_filter: str | None = None) -> list[dict[str, list[str]]]:
    """Every frame of ``pcap`` (any capture: one written here, or a port's of
    ``inalab run --pcap DIR``) that passes ``display_filter``, as tshark decodes it
    with tools/wireshark/ina.lua: per field, its values in the frame (none if it is
    absent; several for a field that occurs several times, such as ina.value)."""
    assert TSHARK is not None, NO_TSHARK
    argv = [TSHARK, "-X", f"lua_script:{DISSECTOR}", "-r", str(pcap), "-T", "fields",
            "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    argv += ["-Y", display_filter] if display_filter else []
    for field in fields:
        argv += ["-e", field]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    # A Lua error is reported on stderr, and tshark carries on without the dissector.
    problems = [line for line in done.stderr.splitlines()
                if line.strip() and not line.startswith("Running as user")]
    assert done.returncode == 0 and not problems, done.stderr
    return [{field: cell.split(",") if cell else []
             for field, cell in zip(fields, line.split("\t"), strict=True)}
            for line in done.stdout.splitlines()]


def serving(net: EmbeddedNetwork) -> Iterator[EmbeddedNetwork]:
    """``net`` serving in a thread of this process until the generator is closed (a
    fixture's ``yield from``), then stopped and closed."""
    thread = threading.Thread(target=net.serve, daemon=True)
    thread.start()
    try:
        yield net
    finally:
        net.stop()
        thread.join(10)
        net.close()
