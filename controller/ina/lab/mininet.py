"""Mininet with BMv2 switches for a topology file, inside the sandbox.

``Lab`` builds the network the topology file describes: one
``simple_switch_grpc --no-p4`` per switch with the file's device id, gRPC
address and port numbers, one Mininet host per host with its IP and MAC, a
default route through its edge switch's loopback (static ARP: the switches
answer no ARP). ``Lab.init_switches`` pushes the pipeline and the base state.

The control channel. Unless ``LabOptions.insecure``, the lab first makes a CA and
a certificate per switch and for the controller (ina.lab.pki), in its state
directory (``LabOptions.run_dir``, or a private temporary one), and starts every
switch with TLS and client authentication: only a client with a certificate of
this lab's CA gets a P4Runtime connection. ``Lab.access`` is how its own calls and
the commands connect. The switches run in the sandbox's own network namespace,
whose only addresses are its loopback's (the switches' ports carry no address),
and their gRPC servers listen on the topology's addresses there: only processes in
that namespace (the lab's, ``inalab exec``'s) reach them, never the hosts, which
have namespaces of their own. BMv2's Thrift server (built in, listening on every
address of that namespace, with no option to bind one) is refused by an nftables
rule in the namespace: nothing can configure a switch around P4Runtime. Their
ports are reserved in that namespace (``reserve_ports``): no connection there takes
one as its local port, which would keep a switch from listening.

Links and queues. Every switch port has its segmentation and receive offloads off
(``without_offloads``) before BMv2 opens it: BMv2 reads a port through libpcap, whose
ring held only 31 packets with veth's defaults and dropped the rest of a burst, uncounted.
With the topology's ``queues`` (``Lab.set_queues`` changes them on
a running lab), every link end's egress is an htb class at the link's rate whose
queue is a byte FIFO of ``buffer`` bytes (a shallow switch buffer, instead of the
interface's 1,000 packets: seconds at a few Mbit/s), and the controller's link
probes (EtherType ETHERTYPE_PROBE) have a class of their own served first, so that
a congested queue does not make a link look dead. The switches mark congestion
from phantom queues at the same rate (``port_queues``, which the controller writes
from the same ``queues``), and every switch has PRIORITY_QUEUES egress queues per
port, probes in the higher one. Hosts take ECN on TCP (``net.ipv4.tcp_ecn=1``), so
TCP flows sharing the links see the same marks; whether they slow down is their
congestion control's choice (cubic does, BBR does not), which the lab leaves as the
machine has it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ina.control.access import Access
from ina.control.controller import Controller
from ina.errors import LabError
from ina.lab import sandbox
from ina.lab.jobs import LabJobService
from ina.lab.labstate import LabRecord
from ina.lab.pki import make_lab_pki, switch_tls_args
from ina.protocol.constants import CPU_PORT, ETHERTYPE_PROBE, PRIORITY_QUEUES
from ina.spec.topology import Failures, Queues, Topology

LOG = logging.getLogger(__name__)
SWITCH_BINARY = "simple_switch_grpc"
COMPILER = "p4c-bm2-ss"


def import_mininet() -> None:
    """Import Mininet (ImportError if it is not installed) without what importing it
    does to every other logger: mininet.log makes each logger created afterwards a
    MininetLogger, whose own handler writes every message without a newline. This
    package's loggers (ina.control.watch, created when the failover benchmark starts
    its watcher) then said everything twice, the first time run into the next line.
    Every import of Mininet goes through here."""
    import mininet.log  # noqa: F401

    logging.setLoggerClass(logging.Logger)


def missing_tools(build_dir: Path | None = None) -> list[str]:
    """What this machine lacks to run the lab, each with how to get it; with
    ``build_dir``, the compiled program in it too."""
    problems = []
    if shutil.which(SWITCH_BINARY) is None:
        problems.append(f"{SWITCH_BINARY} not found: install BMv2 with P4Runtime support "
                        "(p4lang/behavioral-model, configured --with-pi)")
    try:
        import_mininet()
        import mininet.net  # noqa: F401
    except ImportError:
        problems.append("Mininet not importable: apt-get install mininet, and use a venv made "
                        "with --system-site-packages (make setup does both)")
    reason = sandbox.why_not_available()
    if reason:
        problems.append(reason)
    if build_dir is not None:
        missing = [str(p) for p in (build_dir / "ina.json", build_dir / "ina.p4info.txtpb")
                   if not p.exists()]
        if missing:
            problems.append(f"{', '.join(missing)} not found: compile the P4 program first "
                            "(make build" + ("" if shutil.which(COMPILER) else
                                             f", which needs {COMPILER}: not installed") + ")")
    return problems


def bmv2_build() -> str:
    """The BMv2 binary's version and its build options, from its installed config.h."""
    try:
        version = subprocess.run([SWITCH_BINARY, "--version"], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        version = "unknown version"
    options = []
    # The config.h installed with the binary that runs (a second build in a prefix of
    # its own, first on PATH, is named as that build).
    found = shutil.which(SWITCH_BINARY)
    beside = [Path(found).resolve().parent.parent / "include/bm/config.h"] if found else []
    for path in (*beside, Path("/usr/local/include/bm/config.h"),
                 Path("/usr/include/bm/config.h")):
        if path.exists():
            text = path.read_text()
            logging_on = bool(re.search(r"^#define BM_LOG_(DEBUG|TRACE)_ON\b", text, re.M))
            elog_on = bool(re.search(r"^#define BM_ELOG_ON\b", text, re.M))
            options.append("default build: logging macros and event logger compiled in"
                           if logging_on and elog_on else
                           f"logging macros {'on' if logging_on else 'off'}, "
                           f"event logger {'on' if elog_on else 'off'}")
            break
    usual = (Path("/usr/local/bin"), Path("/usr/bin"))
    where = "" if found is None or Path(found).parent in usual else f" ({found})"
    return f"{SWITCH_BINARY} {version}{where}" + (f", {options[0]}" if options else "")


def wait_until(condition: Callable[[], bool], timeout: float, what: str,
               interval: float = 0.05) -> None:
    """Poll ``condition`` until it holds; raise LabError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def _host_port(address: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets) as (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def port_open(address: str) -> bool:
    """Whether something listens at ``host:port``."""
    try:
        with socket.create_connection(_host_port(address), timeout=0.2) as conn:
            # Closed with a reset: polling leaves no TIME_WAIT on an ephemeral port.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return True
    except OSError:
        return False


def port_free(address: str) -> bool:
    """Whether a server could listen at ``host:port`` (as BMv2's gRPC server binds it,
    with SO_REUSEADDR): no socket holds the port."""
    host, port = _host_port(address)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


#: Ports the kernel never picks as a connection's local port in this namespace.
RESERVED_PORTS = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")


def reserve_ports(ports: Sequence[int]) -> None:
    """Keep ``ports`` out of the namespace's ephemeral range (the switches' servers'
    ports lie inside it, 32768-60999): a connection whose local port is a switch's
    gRPC port would keep that switch from listening (simple_switch_grpc runs on
    without its server), for as long as the connection or its TIME_WAIT lasts."""
    held = RESERVED_PORTS.read_text().strip()
    RESERVED_PORTS.write_text(",".join([*([held] if held else []),
                                        *(str(p) for p in sorted(set(ports)))]))


def thrift_port(device_id: int) -> int:
    """The TCP port of the switch's Thrift server (refused: see the module's docstring)."""
    return 9090 + device_id % 20000


def thrift_guard_command(ports: Sequence[int], on: bool) -> str:
    """The shell command that makes the lab's namespace refuse TCP connections to
    ``ports`` (the switches' Thrift servers), or stop refusing them."""
    off = "nft delete table inet ina_thrift 2>/dev/null; true"
    if not on:
        return off
    listed = ", ".join(str(p) for p in sorted(set(ports)))
    return (f"{off}; nft 'add table inet ina_thrift; add chain inet ina_thrift input "
            "{ type filter hook input priority -10; policy accept; }; "
            f"add rule inet ina_thrift input tcp dport {{ {listed} }} reject with tcp reset'")


#: The segmentation and receive offloads a veth may have. BMv2 reads each port
#: through libpcap, whose ring (2 MB) is cut into frames of the largest packet the
#: interface may hand it: 64 KB if any of these is on (veth's defaults: TSO and GSO),
#: the MTU if none is. With them on, the ring holds 31 packets, and a burst of more
#: (a window of chunks from every worker, meeting at one switch) was dropped there
#: uncounted: a lost chunk on a lossless link.
OFFLOADS = ("tso", "gso", "gro", "lro")


def without_offloads(intf: str) -> None:
    """Turn ``intf``'s OFFLOADS off (before a switch opens it); LabError if ethtool fails."""
    args = ["ethtool", "-K", intf]
    for feature in OFFLOADS:
        args += [feature, "off"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise LabError(f"{intf}: `{' '.join(args)}` failed: {out.stderr.strip()}")


def bmv2_command(device_id: int, grpc: str, interfaces: dict[int, str],
                 log_file: Path | None = None, pcap_dir: Path | None = None,
                 tls_args: Sequence[str] = ()) -> list[str]:
    """The simple_switch_grpc command line of a switch with no program yet (the
    controller pushes it) and these ports; ``tls_args``: its gRPC server's TLS
    options (ina.lab.pki.switch_tls_args), none for plaintext."""
    args = [SWITCH_BINARY, "--device-id", str(device_id), "--no-p4",
            "--thrift-port", str(thrift_port(device_id))]
    # The controller's packet-out/packet-in (link probes) go through this port.
    for port, intf in sorted(interfaces.items()):
        args += ["-i", f"{port}@{intf}"]
    if log_file is not None:
        args += ["--log-file", str(log_file), "--log-flush"]
    else:
        # With no log to write, BMv2 would still format every message at its
        # default level (trace) for a logger without sinks: a third of its CPU.
        args += ["--log-level", "off"]
    if pcap_dir is not None:
        args += ["--pcap", str(pcap_dir)]
    # Probes (packet-out and packet-in) take the higher of PRIORITY_QUEUES egress queues
    # (ingress.p4): without them, BMv2 drops a packet of priority 1.
    return [*args, "--", "--grpc-server-addr", grpc, "--cpu-port", str(CPU_PORT),
            "--priority-queues", str(PRIORITY_QUEUES), *tls_args]


@dataclass
class LabOptions:
    build_dir: Path = Path("build")
    log_dir: Path | None = None  # BMv2 logs (slow) and stdout, one file per switch
    pcap_dir: Path | None = None  # BMv2 per-port pcaps
    startup_timeout: float = 60.0
    #: Where the lab keeps its TLS credentials and its writers' lock (as
    #: ina.lab.labstate.LabRecord names them), for commands run beside it (``inalab
    #: run``: the run directory); None: a private temporary directory, removed
    #: with the lab.
    run_dir: Path | None = None
    #: Plaintext P4Runtime and Thrift reachable (in the lab's namespace): any client
    #: that reaches a switch may write to it. Only when asked for by name.
    insecure: bool = False


def _bmv2_switch_class() -> type:
    import_mininet()
    from mininet.node import Switch

    class BMv2Switch(Switch):  # type: ignore[misc]  # Mininet is untyped: Switch is Any
        """simple_switch_grpc started with no program; the controller pushes it."""

        def __init__(self, name: str, device_id: int, grpc: str, tls_args: list[str],
                     options: LabOptions, **params: Any):
            params["inNamespace"] = False
            super().__init__(name, **params)
            self.device_id = device_id
            self.grpc = grpc
            self.tls_args = tls_args
            self.options = options
            self.proc: subprocess.Popen[bytes] | None = None
            self.output: Path | None = None

        def start(self, controllers: Any) -> None:
            out: Any = subprocess.DEVNULL
            log_file = None
            if self.options.log_dir is not None:
                self.options.log_dir.mkdir(parents=True, exist_ok=True)
                log_file = self.options.log_dir / self.name
                self.output = self.options.log_dir / f"{self.name}.out"
                out = self.output.open("wb")
            if self.options.pcap_dir is not None:
                self.options.pcap_dir.mkdir(parents=True, exist_ok=True)
            ports = {port: intf.name for port, intf in self.intfs.items() if intf.name != "lo"}
            for intf in ports.values():
                without_offloads(intf)
            args = bmv2_command(self.device_id, self.grpc, ports, log_file,
                                self.options.pcap_dir, self.tls_args)
            LOG.info("%s: %s", self.name, " ".join(args))
            # Its own session: a Ctrl-C typed in the Mininet CLI is for the CLI, not
            # for the switches (they stop when the Lab stops, or with the sandbox).
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

        def connected(self) -> bool:
            if self.proc is None:
                return False
            if self.proc.poll() is not None:
                raise LabError(f"{self.name}: {SWITCH_BINARY} exited with {self.proc.returncode}"
                               + (f"; see {self.output}" if self.output else
                                  " (run with a log directory to see why)"))
            return port_open(self.grpc)

        def halt(self) -> None:
            """End the BMv2 process (a failed switch); its ports stay."""
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()

        def stop(self, deleteIntfs: bool = True) -> None:
            self.halt()
            super().stop(deleteIntfs)

    return BMv2Switch


def link_state_command(intf: str, up: bool) -> str:
    """The shell command that makes the link of interface ``intf`` drop everything it
    would send (down) or stop doing so (up).

    Not ``ip link set down``: BMv2 reads all its ports in one thread, which stalls
    while one of them is down, so the switch would stop receiving on every port.
    An nftables chain on the interface's egress drops every frame instead (as
    ``Lab.impair`` does), before it reaches the other end."""
    if up:
        return f"nft delete chain netdev ina_link_down {intf} 2>/dev/null; true"
    return ("nft 'add table netdev ina_link_down; add chain netdev ina_link_down "
            f"{intf} {{ type filter hook egress device {intf} priority -10; policy drop; }}'")


#: The htb classes of a link end's egress (``queue_command``): the link, its probes'
#: class (served first), and everything else's, whose queue is the byte FIFO.
LINK_CLASS, PROBE_CLASS, DATA_CLASS = "1:1", "1:10", "1:20"
#: Bytes an htb class sends in its turn: one full Ethernet frame.
QUANTUM = 1514


def queue_command(intf: str, queues: Queues | None) -> str:
    """The shell command that gives interface ``intf``'s egress the link of ``queues``:
    an htb class at ``queues.rate`` and under it two: the controller's link probes
    (EtherType ETHERTYPE_PROBE, by a u32 filter: this kernel has no matchall or
    basic classifier), served first (htb prio 0) at a small guaranteed rate, and
    everything else (the default class), queued in a byte FIFO of ``queues.buffer``
    bytes (bfifo; the kernel has no netem, red or codel). Each class's quantum is a
    whole frame (htb derives one from the rate otherwise, and warns at low and high
    rates). None: the interface's own queue again, no limit. Either way it first
    removes what was there."""
    clear = f"tc qdisc del dev {intf} root 2>/dev/null; true"
    if queues is None:
        return clear
    rate = max(1, round(queues.rate * 1000))  # kbit/s
    probes = max(1, min(rate // 2, max(8, rate // 100)))  # a probe every 0.1 s is ~3 kbit/s
    handle, data_minor = DATA_CLASS.split(":")
    return " && ".join([
        clear,
        f"tc qdisc add dev {intf} root handle 1: htb default {data_minor}",
        f"tc class add dev {intf} parent 1: classid {LINK_CLASS} htb "
        f"rate {rate}kbit ceil {rate}kbit",
        f"tc class add dev {intf} parent {LINK_CLASS} classid {PROBE_CLASS} htb "
        f"rate {probes}kbit ceil {rate}kbit prio 0 quantum {QUANTUM}",
        f"tc class add dev {intf} parent {LINK_CLASS} classid {DATA_CLASS} htb "
        f"rate {rate - probes}kbit ceil {rate}kbit prio 1 quantum {QUANTUM}",
        f"tc qdisc add dev {intf} parent {DATA_CLASS} handle {data_minor}: bfifo "
        f"limit {queues.buffer}",
        f"tc filter add dev {intf} parent 1: protocol {ETHERTYPE_PROBE:#06x} prio 1 u32 "
        f"match u32 0 0 flowid {PROBE_CLASS}",
    ])


def parse_backlog(tc_output: str) -> tuple[int, int]:
    """(bytes, packets) of the first ``backlog`` line of ``tc -s qdisc show`` (0, 0 if
    none: no such qdisc)."""
    match = re.search(r"backlog (\d+)([KMG]?)b (\d+)p", tc_output)
    if match is None:
        return 0, 0
    scale = {"": 1, "K": 1000, "M": 1000**2, "G": 1000**3}[match.group(2)]
    return int(match.group(1)) * scale, int(match.group(3))


def run_in_lab(cmd: str) -> str:
    """Run a shell command in the sandbox's root namespace (where the switches'
    interfaces are); its output."""
    done = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    return done.stdout + done.stderr


class Lab:
    """The topology on Mininet + BMv2. Use as a context manager, inside the sandbox."""

    def __init__(self, topology: Topology, options: LabOptions | None = None):
        self.topology = topology
        self.options = options or LabOptions()
        self.net: Any = None
        self.failures = Failures()  # what fail_switch and set_link broke
        self._private_dir: Path | None = None  # the state directory, if the lab made it
        self._record: LabRecord | None = None
        self._made_tls = False
        self.job_service: LabJobService | None = None

    @property
    def record(self) -> LabRecord:
        """Where the lab keeps its credentials and lock (once started)."""
        if self._record is None:
            raise LabError("the lab is not started")
        return self._record

    @property
    def access(self) -> Access:
        """How the lab's own calls (and commands beside it) reach its switches."""
        return self.record.access(self.options.insecure)

    @property
    def p4info(self) -> Path:
        return self.options.build_dir / "ina.p4info.txtpb"

    @property
    def p4blob(self) -> Path:
        return self.options.build_dir / "ina.json"

    def __enter__(self) -> Lab:
        try:
            self.start()
        except BaseException:  # a half-built network (or a stop signal while building)
            try:
                self.stop()
            except Exception:  # the first error is the one to report
                LOG.exception("stopping a half-started lab failed")
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not sandbox.inside():
            raise LabError("refusing to start Mininet outside the sandbox of private namespaces "
                           "(use inalab / make run, which enter it)")
        problems = missing_tools(self.options.build_dir)
        if problems:
            raise LabError("; ".join(problems))
        import_mininet()
        try:
            self._start()
        except BaseException:
            # Half a lab would keep the gRPC ports and the credentials' directory: the
            # next lab would fail on them, or talk to these switches with other keys.
            self.stop()
            raise

    def _start(self) -> None:
        from mininet.net import Mininet
        from mininet.node import Host

        # Quiet the emulation's own network: no IPv6 chatter reaching the switches.
        subprocess.run(["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"], check=False)
        self._secure_control()
        switches = self.topology.switches.values()
        # (Their Thrift ports, 9090 + device id % 20000, lie below the range.)
        reserve_ports([spec.grpc_port for spec in switches])
        # A connection made before the reservation may still hold one (its TIME_WAIT
        # lasts a minute): wait it out rather than start a switch that cannot listen.
        try:
            wait_until(lambda: all(port_free(spec.grpc) for spec in switches),
                       self.options.startup_timeout, "the switches' gRPC addresses to be free")
        except LabError as e:
            taken = [f"{spec.name} ({spec.grpc})" for spec in switches
                     if not port_free(spec.grpc)]
            raise LabError(f"{e}: still in use in the lab's namespace: {', '.join(taken)} "
                           "(another lab running in this sandbox?)") from None
        switch_cls = _bmv2_switch_class()
        net = Mininet(topo=None, switch=switch_cls, host=Host, controller=None, build=False,
                      autoSetMacs=False, autoStaticArp=False, waitConnected=False)
        self.net = net
        for name, spec in sorted(self.topology.switches.items()):
            net.addSwitch(name, device_id=spec.device_id, grpc=spec.grpc,
                          tls_args=self.tls_args(name), options=self.options)
        for name, host in sorted(self.topology.hosts.items()):
            net.addHost(name, ip=f"{host.ip}/32", mac=host.mac, defaultRoute=None)
        for link in self.topology.links:
            net.addLink(link.a.node, link.b.node, port1=link.a.port if link.a.port else 0,
                        port2=link.b.port if link.b.port else 0)
        net.build()
        net.start()
        for name in self.topology.hosts:
            self._configure_host(name)
        if self.topology.queues is not None:
            self._apply_queues()
        try:
            wait_until(lambda: all(sw.connected() for sw in net.switches),
                       self.options.startup_timeout, "every BMv2 switch to open its gRPC port")
        except LabError as e:
            closed = ", ".join(f"{sw.name} ({sw.grpc})" for sw in net.switches
                               if not port_open(sw.grpc))
            raise LabError(f"{e}: no server at {closed}") from None
        self._start_job_service()

    def _start_job_service(self) -> None:
        """The lab's job service (ina.lab.jobs), on ``record.jobs_socket``: where a
        program on the hosts asks for its process groups' jobs. A socket path the
        system cannot bind (longer than 107 bytes) leaves the lab without one: its
        programs' groups then run on their hosts, and say so."""
        path = self.record.jobs_socket
        if len(str(path.resolve())) > 107:
            LOG.warning("%s: no job service: its socket's path %s is too long for a Unix "
                        "socket", self.topology.name, path)
            return
        service = LabJobService(self.topology, self.p4info, self.access, path.resolve(),
                                lambda: self.failures, self.record.failures_file)
        service.start()
        self.job_service = service

    @property
    def jobs_socket(self) -> Path | None:
        """Where the lab's job service listens (INA_JOB_SERVICE), if it has one."""
        return None if self.job_service is None else self.job_service.path

    def _secure_control(self) -> None:
        """The state directory; unless insecure, the lab's credentials in it and the
        switches' Thrift ports refused."""
        directory = self.options.run_dir
        if directory is None:
            directory = self._private_dir = Path(tempfile.mkdtemp(
                prefix=f"ina-lab-{self.topology.name}-"))
        self._record = LabRecord(self.topology.name, directory)
        secure = not self.options.insecure
        if secure:
            make_lab_pki(self.record.tls_dir, self.topology)
            self._made_tls = True
        else:
            LOG.warning("%s: insecure lab: plaintext P4Runtime and Thrift, any client that "
                        "reaches a switch may write to it", self.topology.name)
        ports = [thrift_port(spec.device_id) for spec in self.topology.switches.values()]
        out = run_in_lab(thrift_guard_command(ports, on=secure) + "; echo rc=$?")
        if not out.strip().endswith("rc=0"):
            raise LabError(f"cannot refuse the switches' Thrift ports with nftables: "
                           f"{out.strip()}")

    def tls_args(self, switch: str) -> list[str]:
        """The switch's TLS options for simple_switch_grpc (none if insecure)."""
        return [] if self.options.insecure else switch_tls_args(self.record.tls_dir, switch)

    def _configure_host(self, name: str) -> None:
        host = self.net[name]
        intf = host.defaultIntf().name
        edge, _ = self.topology.host_attachment(name)
        gw = self.topology.switches[edge]
        for cmd in (
            "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
            "sysctl -qw net.ipv4.tcp_ecn=1",  # TCP flows take the switches' marks
            f"ethtool -K {intf} tx off rx off",  # BMv2 forwards what veth gives it: real checksums
            f"ip route add {gw.loopback}/32 dev {intf}",
            f"ip route add default via {gw.loopback} dev {intf}",
            f"ip neigh replace {gw.loopback} lladdr {gw.mac} dev {intf} nud permanent",
        ):
            out = host.cmd(cmd + " 2>&1; echo rc=$?")
            if not out.strip().endswith("rc=0"):
                raise LabError(f"{name}: `{cmd}` failed: {out.strip()}")

    def stop(self) -> None:
        if self.job_service is not None:
            self.job_service.stop()
            self.job_service = None
        if self.net is not None:
            self.net.stop()
            self.net = None
        if self._made_tls:
            shutil.rmtree(self.record.tls_dir, ignore_errors=True)
            self._made_tls = False
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None

    def host(self, name: str) -> Any:
        return self.net[name]

    def switch_pids(self) -> dict[str, int]:
        """The PID of each running switch's BMv2 process."""
        return {sw.name: sw.proc.pid for sw in self.net.switches
                if sw.proc is not None and sw.proc.poll() is None}

    # --- failures ------------------------------------------------------------------

    def fail_switch(self, name: str) -> None:
        """Stop a switch's BMv2 process, as a crash would: its state is gone."""
        self._switch(name).halt()
        self.failures = self.failures.with_switch(name)
        LOG.info("%s: stopped", name)

    def recover_switch(self, name: str) -> None:
        """Start a failed switch again, empty (no program): the controller must
        install its pipeline and state again (``inactl up``, or ``inactl watch``)."""
        switch = self._switch(name)
        if switch.proc is not None and switch.proc.poll() is None:
            raise LabError(f"{name} is running")
        switch.start([])
        wait_until(switch.connected, self.options.startup_timeout,
                   f"{name} to open its gRPC port")
        self.failures = self.failures.with_switch(name, down=False)
        LOG.info("%s: started again", name)

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Take the link between nodes a and b down (it carries no frame either way),
        or up again (``link_state_command``)."""
        ends = self.topology.link_ends(a, b)
        if not ends:
            raise LabError(f"no link between {a} and {b} in topology {self.topology.name}")
        for end in ends:
            if end.node in self.topology.switches:
                intf, run = f"{end.node}-eth{end.port}", run_in_lab
            else:
                host = self.net[end.node]
                intf, run = host.defaultIntf().name, host.cmd
            out = run(link_state_command(intf, up) + "; echo rc=$?")
            if not out.strip().endswith("rc=0"):
                raise LabError(f"{end.node}: cannot set {intf} {'up' if up else 'down'} with "
                               f"nftables: {out.strip()}")
        self.failures = self.failures.with_link(a, b, down=not up)
        LOG.info("link %s-%s %s", a, b, "up" if up else "down")

    def _switch(self, name: str) -> Any:
        if name not in self.topology.switches:
            raise LabError(f"no switch {name} in topology {self.topology.name}")
        return self.net[name]

    def impair(self, loss: float = 0.0, duplicate: float = 0.0) -> None:
        """Lose and duplicate frames on every link, both ways, with these probabilities
        (nftables on each interface's egress: this kernel has no sch_netem, so no
        delay or reordering). ``impair()`` with no argument clears it."""
        for _node, _intf, run in self._interfaces():
            run("nft delete table netdev ina_impair 2>/dev/null; true")
        if not loss and not duplicate:
            return
        rules = []
        if loss:
            rules.append(f"numgen random mod 10000 < {round(loss * 10000)} drop")
        if duplicate:
            rules.append(f"numgen random mod 10000 < {round(duplicate * 10000)} dup to {{dev}}")
        for node, intf, run in self._interfaces():
            script = ["add table netdev ina_impair",
                      f"add chain netdev ina_impair {intf} "
                      f"{{ type filter hook egress device {intf} priority 0; }}"]
            script += [f"add rule netdev ina_impair {intf} {r.format(dev=intf)}" for r in rules]
            out = run("nft '" + "; ".join(script) + "'; echo rc=$?")
            if not out.strip().endswith("rc=0"):
                raise LabError(f"{node}: cannot impair {intf} with nftables: {out.strip()}")

    def set_queues(self, queues: Queues | None) -> None:
        """Give every link, both ways, the rate and buffer of ``queues`` (None: no
        limit; see ``queue_command``), and the switches the phantom queues that mark
        congestion at that rate: the lab's topology gets ``queues`` and the
        controller's base state is reconciled with it (``inactl init``: only the
        port_queues entries change; deployed jobs stay). The switches must be
        running. Not inside a running event loop (use ``set_queues_async``)."""
        asyncio.run(self.set_queues_async(queues))

    async def set_queues_async(self, queues: Queues | None) -> None:
        """``set_queues`` from a coroutine."""
        self.topology = self.topology.with_queues(queues)
        self._apply_queues()
        await self.init_switches()
        LOG.info("links: %s", "no limit" if queues is None else queues.describe())

    def limit_links(self, rate_mbit: float | None) -> None:
        """Limit every link, both ways, to ``rate_mbit`` with the topology's buffer and
        marking threshold (the defaults if it has none: ``Queues``), or remove the
        limits (None): ``set_queues``."""
        if rate_mbit is None:
            self.set_queues(None)
            return
        current = self.topology.queues
        self.set_queues(Queues(rate=rate_mbit) if current is None
                        else dataclasses.replace(current, rate=rate_mbit))

    def backlog(self, node: str, neighbour: str) -> tuple[int, int]:
        """(bytes, frames) waiting in the byte FIFO of ``node``'s end of its link to
        ``neighbour`` now (0, 0 without queues): a link's queue depth, for a benchmark
        to sample (a few milliseconds a call)."""
        ends = [e for e in self.topology.link_ends(node, neighbour) if e.node == node]
        if not ends:
            raise LabError(f"no link between {node} and {neighbour} in topology "
                           f"{self.topology.name}")
        if node in self.topology.switches:
            intf, run = f"{node}-eth{ends[0].port}", run_in_lab
        else:
            host = self.net[node]
            intf, run = host.defaultIntf().name, host.cmd
        return parse_backlog(run(f"tc -s qdisc show dev {intf} parent {DATA_CLASS} 2>&1"))

    def _apply_queues(self) -> None:
        """The topology's queues on every link end (``queue_command``)."""
        for node, intf, run in self._interfaces():
            out = run(f"({queue_command(intf, self.topology.queues)}) 2>&1; echo rc=$?")
            if not out.strip().endswith("rc=0"):
                raise LabError(f"{node}: cannot set the queue of {intf} with tc: {out.strip()}")

    def _interfaces(self) -> list[tuple[str, str, Callable[[str], str]]]:
        """(node, interface, run a shell command where it lives) for every link end."""
        result: list[tuple[str, str, Callable[[str], str]]] = []
        for sw in sorted(self.topology.switches):
            for port in self.topology.ports(sw):
                result.append((sw, f"{sw}-eth{port}", run_in_lab))
        for name in sorted(self.topology.hosts):
            host = self.net[name]
            result.append((name, host.defaultIntf().name, host.cmd))
        return result

    async def init_switches(self) -> None:
        """Install the pipeline and the base state on every switch."""
        from ina.control.p4runtime import connect

        async with connect(self.topology, self.p4info, self.p4blob, access=self.access,
                           push=True) as clients:
            await Controller(self.topology, clients).init()

    def init_switches_sync(self) -> None:
        asyncio.run(self.init_switches())
