"""Failures injected into a running lab from outside it (``inalab fail|recover``):
a switch's BMv2 process stopped and started again, a link made to drop every
frame both ways and made to carry them again. Only the lab's own processes are
touched, found by their PID namespace (the sandbox's) and their command line (the
switch's device id).

A restarted switch is empty: ``inactl up switch NAME`` gives it the pipeline and
its state again (or ``inactl watch`` does, when it runs).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from pathlib import Path

from ina.errors import LabError
from ina.lab import sandbox
from ina.lab.mininet import SWITCH_BINARY, bmv2_command, link_state_command, wait_until
from ina.lab.pki import switch_tls_args
from ina.spec.topology import SwitchSpec, Topology

LOG = logging.getLogger(__name__)
#: Seconds a switch may take to stop, or to open its gRPC port.
SWITCH_TIMEOUT = 30.0


def _in_sandbox(init: int, pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") == os.readlink(f"/proc/{init}/ns/pid")
    except OSError:
        return False


def switch_pid(init: int, spec: SwitchSpec) -> int | None:
    """The PID (as this machine sees it) of the switch's BMv2 in the sandbox."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if (argv and argv[0].decode(errors="replace").endswith(SWITCH_BINARY)
                and b"--device-id" in argv
                and argv[argv.index(b"--device-id") + 1] == str(spec.device_id).encode()):
            pid = int(cmdline.parent.name)
            if _in_sandbox(init, pid):
                return pid
    return None


def _listening(init: int, port: int) -> bool:
    """Whether a TCP socket listens on ``port`` in the sandbox's network namespace."""
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{init}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                return True
    return False


def fail_switch(init: int, topology: Topology, name: str) -> int:
    """Stop the switch's BMv2 (SIGTERM, as a crash that leaves no state); its PID."""
    pid = switch_pid(init, topology.switches[name])
    if pid is None:
        raise LabError(f"{name} is not running")
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: switch_pid(init, topology.switches[name]) is None, SWITCH_TIMEOUT,
               f"{name} to stop")
    return pid


def recover_switch(init: int, topology: Topology, name: str, tls_dir: Path | None) -> None:
    """Start the switch's BMv2 again in the sandbox (its PID, network and mount
    namespaces, so it ends with the lab), empty, with the same ports and, if the lab
    has credentials (``tls_dir``; None for a lab started insecure), the same TLS."""
    spec = topology.switches[name]
    if switch_pid(init, spec) is not None:
        raise LabError(f"{name} is running")
    ports = {port: f"{name}-eth{port}" for port in topology.ports(name)}
    tls = [] if tls_dir is None else switch_tls_args(tls_dir, name)
    cmd = ["nsenter", "--target", str(init), "--net", "--pid", "--mount", "--",
           *bmv2_command(spec.device_id, spec.grpc, ports, tls_args=tls)]
    subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    wait_until(lambda: _listening(init, spec.grpc_port), SWITCH_TIMEOUT,
               f"{name} to open its gRPC port")


def set_link(init: int, hosts: dict[str, int], topology: Topology, a: str, b: str,
             up: bool) -> None:
    """Both interfaces of the link between a and b down, or up."""
    ends = topology.link_ends(a, b)
    if not ends:
        raise LabError(f"no link between {a} and {b} in topology {topology.name}")
    for end in ends:
        if end.node in topology.switches:
            target, intf = init, f"{end.node}-eth{end.port}"
        else:
            target, intf = sandbox.outer_pid(init, hosts[end.node]), f"{end.node}-eth0"
        done = subprocess.run(["nsenter", "--target", str(target), "--net", "--", "sh", "-c",
                               link_state_command(intf, up)], capture_output=True, text=True)
        if done.returncode:
            raise LabError(f"{end.node}: cannot set {intf} {'up' if up else 'down'}: "
                           f"{done.stderr.strip()}")
