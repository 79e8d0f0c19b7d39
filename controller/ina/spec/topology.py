"""The topology file: switches, hosts and links. Mininet, the controller, the
reference model and the tests all read it; nothing else states these facts.

Format (YAML)::

    name: figure1
    switches:
      s1: {device_id: 1, grpc: "127.0.0.1:50001", loopback: 10.0.100.1}
    hosts:
      w1: {ip: 10.0.0.1, mac: "00:00:00:00:00:01", bfr_id: 1}
    links:
      - [s1:1, s5:2]     # switch:port on both ends
      - [s1:2, w1]       # a host end has no port

A switch's ``loopback`` is the address INA packets for its VAT nodes are sent to;
``mac`` is optional (default 02:00:00:00:xx:xx from the device id). Optional too::

    policing: {rate: 2000, burst: 256}   # INA packets a host may send per job (per
                                         # second, and back to back beyond); 0: no limit
    queues: {rate: 2, buffer: 30000, mark: 7500}
        # every link's rate (Mbit/s, each way); the lab's bounded egress buffer per
        # interface (bytes); the switches mark congestion (ECN) past ``mark`` bytes
        # queued toward a port (a phantom queue at the link's rate)

Every switch drops what arrives on a port that no link of the file names.
Routing is shortest path with one deterministic tree per destination, so that
every switch agrees on the next hop toward each host (what BIER needs).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ina.errors import TopologyError, Unreachable, UsageError, YamlFileError
from ina.protocol.bitmaps import bit_of
from ina.protocol.constants import (
    HOST_BURST,
    HOST_RATE,
    MAX_BFR_ID,
    MAX_PORTS,
    PHANTOM_RATE_SHIFT,
    QUEUE_BUFFER,
    QUEUE_MARK,
)
from ina.spec.yamlfile import load_yaml, show


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    device_id: int
    grpc: str
    loopback: str
    mac: str

    @property
    def grpc_port(self) -> int:
        """The TCP port of the switch's gRPC server."""
        return int(self.grpc.rpartition(":")[2])


@dataclass(frozen=True)
class HostSpec:
    name: str
    ip: str
    mac: str
    bfr_id: int

    @property
    def bit(self) -> int:
        """The host's bit in a bitmap over all BIER sets."""
        return bit_of(self.bfr_id)


@dataclass(frozen=True)
class Endpoint:
    node: str
    port: int | None  # None on a host end


@dataclass(frozen=True)
class Link:
    a: Endpoint
    b: Endpoint


@dataclass(frozen=True)
class Neighbor:
    """What a switch port leads to."""

    port: int
    node: str
    remote_port: int | None
    is_host: bool


@dataclass(frozen=True)
class Failures:
    """Switches and links that are down. A link is named by the two nodes it joins
    (parallel links between them go down together); a host's link too."""

    switches: frozenset[str] = frozenset()
    links: frozenset[frozenset[str]] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.switches or self.links)

    def __or__(self, other: Failures) -> Failures:
        return Failures(self.switches | other.switches, self.links | other.links)

    def with_switch(self, name: str, down: bool = True) -> Failures:
        switches = self.switches | {name} if down else self.switches - {name}
        return Failures(frozenset(switches), self.links)

    def with_link(self, a: str, b: str, down: bool = True) -> Failures:
        pair = frozenset((a, b))
        links = self.links | {pair} if down else self.links - {pair}
        return Failures(self.switches, frozenset(links))

    def describe(self) -> str:
        parts = [f"switch {s}" for s in sorted(self.switches)]
        parts += [f"link {'-'.join(sorted(pair))}" for pair in sorted(self.links, key=sorted)]
        return ", ".join(parts) or "nothing"


@dataclass(frozen=True)
class Policing:
    """What an edge switch lets a host send of each of its jobs: ``rate`` INA
    packets per second and ``burst`` back to back beyond it (the rest is dropped
    and counted, DROP_POLICED); ``rate`` 0: no limit."""

    rate: int = HOST_RATE
    burst: int = HOST_BURST


#: The least buffer a link may have: a whole Ethernet frame of 1,500 bytes of IPv4 (a
#: byte FIFO smaller than a frame would drop every such frame).
MIN_BUFFER = 1514
#: The most. BMv2 sends every frame of a switch from one thread, with a blocking send
#: on the port's socket, whose send buffer (212,992 bytes, the kernel's default, which
#: a network namespace cannot change) also pays for what waits in the link's queue:
#: about 2.3 KB per frame of up to ~1.7 KB, so about 92 such frames. A link queue that
#: holds more blocks that thread, and the switch stops sending on every port, not only
#: the congested one (measured: a ping through an idle port of the switch took 2 s;
#: with 30,000 bytes, 2 ms). 64,000 bytes keeps every queue of frames of 500 bytes and
#: more below it; a queue of smaller frames alone can still reach it.
MAX_BUFFER = 64_000
#: The fastest link rate the file may name (Mbit/s), and the slowest (a phantom queue
#: counts its rate in whole bytes per 2**PHANTOM_RATE_SHIFT microseconds).
MAX_RATE = 100_000.0
MIN_RATE = 0.1


def check_link_rate(rate: float) -> float:
    """``rate`` (Mbit/s) if a link can be given it, else ValueError saying the bounds."""
    if not MIN_RATE <= rate <= MAX_RATE:
        raise UsageError(f"{rate:g} Mbit/s is not a link rate: {MIN_RATE:g} to {MAX_RATE:g}")
    return rate


@dataclass(frozen=True)
class Queues:
    """Every link's rate and queue (the topology's ``queues``): ``rate`` Mbit/s each
    way; the lab bounds each interface's egress buffer to ``buffer`` bytes (a byte
    FIFO under an htb class at the rate, instead of the interface's 1,000 packets);
    the switches mark packets as congested (ECN) when a port's phantom queue,
    draining at ``rate``, holds more than ``mark`` bytes (p4src/include/congestion.p4)."""

    rate: float
    buffer: int = QUEUE_BUFFER
    mark: int = QUEUE_MARK

    def __post_init__(self) -> None:
        """ValueError for what a topology file would be refused (``from_dict`` says
        which field of the file, and why)."""
        check_link_rate(self.rate)
        if not (MIN_BUFFER <= self.buffer <= MAX_BUFFER and 0 <= self.mark < self.buffer):
            raise UsageError(f"queues need a buffer of {MIN_BUFFER}..{MAX_BUFFER} bytes and "
                             f"a mark below it: {self}")

    @property
    def phantom_rate(self) -> int:
        """``rate`` as the data plane counts it: bytes per 2**PHANTOM_RATE_SHIFT us."""
        return max(1, round(self.rate / 8 * (1 << PHANTOM_RATE_SHIFT)))

    def describe(self) -> str:
        return f"{self.rate:g} Mbit/s, buffer {self.buffer} bytes, marks above {self.mark}"


_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
_GRPC = re.compile(r"[\w.\-\[\]:]+:\d+", re.ASCII)
_NAME = re.compile(r"[A-Za-z_][\w.-]*", re.ASCII)
_ENDPOINT = re.compile(r"([A-Za-z_][\w.-]*)(?::(\d+))?", re.ASCII)


@dataclass
class Topology:
    name: str
    switches: dict[str, SwitchSpec]
    hosts: dict[str, HostSpec]
    links: list[Link]
    #: What is down: ``without`` leaves the failed switches and links out, and
    #: hosts may then be cut off and switches unreachable from each other.
    failures: Failures = field(default_factory=Failures)
    policing: Policing = field(default_factory=Policing)
    #: Every link's rate, buffer and marking threshold; None: links as fast as they go,
    #: no phantom queues (marks only where BMv2's own queue is deep).
    queues: Queues | None = None
    _ports: dict[str, dict[int, Neighbor]] = field(default_factory=dict, repr=False)
    #: Every port of the file's links, failed or not (``ports`` has the live ones).
    _declared: dict[str, dict[int, Neighbor]] = field(default_factory=dict, repr=False)
    _next_hop: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    _attachment: dict[str, tuple[str, int]] = field(default_factory=dict, repr=False)

    # --- loading -----------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path) -> Topology:
        path = Path(path)
        try:
            data = load_yaml(path)
        except YamlFileError as exc:
            raise TopologyError([f"cannot read it: {exc}"], str(path)) from exc
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "topology") -> Topology:
        problems: list[str] = []
        where = None if source == "topology" else source
        if not isinstance(data, dict):
            raise TopologyError(["expected a mapping with name, switches, hosts, links, got "
                                 + show(data)], where)
        unknown = set(data) - {"name", "switches", "hosts", "links", "policing", "queues"}
        if unknown:
            problems.append(f"unknown top-level keys: {sorted(map(str, unknown))}")
        name = data.get("name", Path(source).stem)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            problems.append(f"name {show(name)} is not a name (letters, digits, _ . -, "
                            "starting with a letter or _): state files are named after it")
        switches = _parse_switches(data.get("switches"), problems)
        hosts = _parse_hosts(data.get("hosts"), problems)
        for both in set(switches) & set(hosts):
            problems.append(f"{both!r} is both a switch and a host")
        links = _parse_links(data.get("links"), problems)
        policing = _parse_policing(data.get("policing", {}), problems)
        queues = _parse_queues(data["queues"], problems) if "queues" in data else None
        if problems:
            raise TopologyError(problems, where)
        topo = cls(name, switches, hosts, links, policing=policing, queues=queues)
        topo._validate(problems)
        if problems:
            raise TopologyError(problems, where)
        topo._declared = topo._ports
        topo._compute_routes()
        return topo

    def without(self, failures: Failures) -> Topology:
        """This topology with ``failures`` down (replacing any it had): the failed
        switches and links left out, routes recomputed on what is left. Hosts
        behind a failed switch or link stay in ``hosts``, cut off (``attached``
        is False); parts of the network may be unreachable from each other.
        TopologyError names a switch or link that the topology does not have."""
        unknown = [f"switch {s!r}" for s in sorted(failures.switches - set(self.switches))]
        have = {frozenset((link.a.node, link.b.node)) for link in self.links}
        unknown += [f"link {'-'.join(sorted(pair))}" for pair in
                    sorted(failures.links - have, key=sorted)]
        if unknown:
            raise TopologyError([f"topology {self.name!r} has no {u}" for u in unknown])
        links = [link for link in self.links
                 if frozenset((link.a.node, link.b.node)) not in failures.links
                 and link.a.node not in failures.switches
                 and link.b.node not in failures.switches]
        switches = {n: s for n, s in self.switches.items() if n not in failures.switches}
        topo = Topology(self.name, switches, dict(self.hosts), links, failures, self.policing,
                        self.queues)
        problems: list[str] = []
        topo._validate(problems)
        assert not problems, problems  # a part of a valid topology is valid
        topo._declared = {sw: ports for sw, ports in self._declared.items() if sw in switches}
        topo._compute_routes()
        return topo

    def with_queues(self, queues: Queues | None) -> Topology:
        """This topology with other link rates and queues (None: none), all else the
        same: what a lab switches between regimes with (``Lab.set_queues``)."""
        return dataclasses.replace(self, queues=queues)

    # --- validation --------------------------------------------------------

    def _validate(self, problems: list[str]) -> None:
        _unique(problems, "device_id", ((s.name, s.device_id) for s in self.switches.values()))
        _unique(problems, "grpc address", ((s.name, s.grpc) for s in self.switches.values()))
        _unique(
            problems, "IPv4 address",
            [(s.name, s.loopback) for s in self.switches.values()]
            + [(h.name, h.ip) for h in self.hosts.values()],
        )
        _unique(
            problems, "MAC address",
            [(s.name, s.mac.lower()) for s in self.switches.values()]
            + [(h.name, h.mac.lower()) for h in self.hosts.values()],
        )
        _unique(problems, "bfr_id", ((h.name, h.bfr_id) for h in self.hosts.values()))

        ports: dict[str, dict[int, Neighbor]] = {s: {} for s in self.switches}
        host_links: dict[str, list[str]] = {h: [] for h in self.hosts}
        for link in self.links:
            ends = (link.a, link.b)
            bad = False
            for end in ends:
                if end.node in self.switches:
                    if end.port is None:
                        problems.append(f"link {_fmt(link)}: switch end {end.node} needs a port")
                        bad = True
                    elif not 1 <= end.port < MAX_PORTS:
                        problems.append(
                            f"link {_fmt(link)}: port {end.port} outside 1..{MAX_PORTS - 1}"
                        )
                        bad = True
                elif end.node in self.hosts:
                    if end.port is not None:
                        problems.append(f"link {_fmt(link)}: host end {end.node} takes no port")
                        bad = True
                else:
                    problems.append(f"link {_fmt(link)}: unknown node {end.node!r}")
                    bad = True
            if bad:
                continue
            if link.a.node in self.hosts and link.b.node in self.hosts:
                problems.append(f"link {_fmt(link)}: hosts must attach to a switch")
                continue
            if link.a.node == link.b.node:
                problems.append(f"link {_fmt(link)}: a link needs two different nodes")
                continue
            for near, far in (ends, ends[::-1]):
                if near.node in self.hosts:
                    host_links[near.node].append(far.node)
                    continue
                assert near.port is not None
                if near.port in ports[near.node]:
                    problems.append(f"{near.node} port {near.port} is used by two links")
                    continue
                ports[near.node][near.port] = Neighbor(
                    near.port, far.node, far.port, far.node in self.hosts
                )
        for host, attached in host_links.items():
            if len(attached) != 1 and not (self.failures and not attached):
                problems.append(
                    f"host {host} must have exactly one link to a switch, has {len(attached)}"
                )
        self._ports = ports
        if not problems and not self.failures:
            unreachable = self._unreachable()
            if unreachable:
                problems.append(f"not connected: cannot reach {sorted(unreachable)}")

    def _unreachable(self) -> set[str]:
        if not self.switches:
            return set(self.hosts)
        start = sorted(self.switches)[0]
        seen = {start}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            if node in self.hosts:
                continue
            for nb in self._ports[node].values():
                if nb.node not in seen:
                    seen.add(nb.node)
                    queue.append(nb.node)
        return (set(self.switches) | set(self.hosts)) - seen

    # --- routing ------------------------------------------------------------

    def _compute_routes(self) -> None:
        """One BFS tree per destination: next_hop[switch][dest] = port.

        Trees are deterministic (neighbours visited by name, then port), and a
        tree never loops, so hop-by-hop forwarding toward a destination is
        consistent across switches: what RFC 8279 needs for disjoint F-BMs.
        """
        self._attachment = {nb.node: (sw, port) for sw, ports in self._ports.items()
                            for port, nb in ports.items() if nb.is_host}
        self._next_hop = {s: {} for s in self.switches}
        for dest in sorted(self.switches) + sorted(self.hosts):
            if dest in self.hosts:
                if not self.attached(dest):
                    continue
                sw, port = self.host_attachment(dest)
                self._next_hop[sw][dest] = port
                frontier = [sw]
            else:
                frontier = [dest]
            seen = set(frontier)
            while frontier:
                nxt: list[str] = []
                for node in frontier:
                    for nb in sorted(self._ports[node].values(), key=lambda n: (n.node, n.port)):
                        if nb.is_host or nb.node in seen:
                            continue
                        assert nb.remote_port is not None
                        seen.add(nb.node)
                        self._next_hop[nb.node][dest] = nb.remote_port
                        nxt.append(nb.node)
                frontier = sorted(nxt)

    def link_ends(self, a: str, b: str) -> list[Endpoint]:
        """Both ends of every link between nodes a and b (none: no such link)."""
        return [end for link in self.links if {link.a.node, link.b.node} == {a, b}
                for end in (link.a, link.b)]

    def ports(self, switch: str) -> dict[int, Neighbor]:
        """The switch's used ports and what each leads to."""
        return dict(sorted(self._ports[switch].items()))

    def declared_ports(self, switch: str) -> dict[int, Neighbor]:
        """Every port the file's links give the switch, failed or not: what the
        switch may hear from (a failed link's, to know when it is back)."""
        return dict(sorted(self._declared.get(switch, self._ports[switch]).items()))

    def attached(self, host: str) -> bool:
        """Whether the host has a link to a switch (not so behind a failure)."""
        return host in self._attachment

    def host_attachment(self, host: str) -> tuple[str, int]:
        """(edge switch, port) of a host; Unreachable if a failure cut it off."""
        try:
            return self._attachment[host]
        except KeyError:
            if host in self.hosts:
                raise Unreachable(f"host {host} is cut off ({self.failures.describe()} "
                                  "down)") from None
            raise

    def reaches(self, src: str, dest: str) -> bool:
        """Whether a route joins nodes ``src`` and ``dest`` (hosts or switches)."""
        if src == dest:
            return True
        if src in self.hosts:
            if not self.attached(src):
                return False
            src = self._attachment[src][0]
            if src == dest:
                return True
        return src in self._next_hop and dest in self._next_hop[src]

    def next_hop(self, switch: str, dest: str) -> int:
        """Port on which ``switch`` forwards toward node ``dest`` (a host or switch);
        Unreachable if no route joins them."""
        try:
            return self._next_hop[switch][dest]
        except KeyError:
            if switch in self._next_hop and (dest in self.hosts or dest in self.switches):
                raise Unreachable(f"{switch} cannot reach {dest} "
                                  f"({self.failures.describe()} down)") from None
            raise

    def path(self, src: str, dest: str) -> list[str]:
        """Nodes from ``src`` to ``dest`` (both included) along the routes;
        Unreachable if no route joins them."""
        if src == dest:
            return [src]
        node = self.host_attachment(src)[0] if src in self.hosts else src
        nodes = [src] if src in self.hosts else []
        while True:
            nodes.append(node)
            if node == dest:
                return nodes
            nb = self._ports[node][self.next_hop(node, dest)]
            if nb.is_host:
                nodes.append(nb.node)
                return nodes
            node = nb.node

    def address(self, node: str) -> str:
        """A host's IP or a switch's loopback."""
        if node in self.hosts:
            return self.hosts[node].ip
        return self.switches[node].loopback

    def mac(self, node: str) -> str:
        if node in self.hosts:
            return self.hosts[node].mac
        return self.switches[node].mac


def _fmt(link: Link) -> str:
    def end(e: Endpoint) -> str:
        return e.node if e.port is None else f"{e.node}:{e.port}"

    return f"{end(link.a)} -- {end(link.b)}"


def _unique(problems: list[str], what: str, pairs: Iterable[tuple[str, object]]) -> None:
    seen: dict[object, str] = {}
    for name, value in pairs:
        if value in seen:
            problems.append(f"{seen[value]} and {name} share {what} {value}")
        else:
            seen[value] = name


def _is_node_name(name: Any, what: str, problems: list[str]) -> bool:
    if isinstance(name, str) and _NAME.fullmatch(name):
        return True
    problems.append(f"{what} {show(name)}: not a name (letters, digits, _ . -, starting "
                    "with a letter or _)")
    return False


def _mapping(value: Any, what: str, problems: list[str]) -> dict[str, Any]:
    if value is None:
        problems.append(f"no {what}")
        return {}
    if not isinstance(value, dict):
        problems.append(f"{what} must be a mapping of name to attributes")
        return {}
    return value


def _fields(name: str, attrs: Any, required: set[str], optional: set[str],
            problems: list[str]) -> dict[str, Any] | None:
    if not isinstance(attrs, dict):
        problems.append(f"{name}: expected a mapping of attributes")
        return None
    missing = required - set(attrs)
    extra = set(attrs) - required - optional
    if missing:
        problems.append(f"{name}: missing {sorted(missing)}")
    if extra:
        problems.append(f"{name}: unknown attributes {sorted(map(str, extra))}")
    return None if missing else attrs


def _ipv4(name: str, value: Any, problems: list[str]) -> str:
    try:
        return str(ipaddress.IPv4Address(str(value)))
    except ValueError:
        problems.append(f"{name}: {show(value)} is not an IPv4 address")
        return "0.0.0.0"


def _mac(name: str, value: Any, problems: list[str]) -> str:
    if not isinstance(value, str) or not _MAC.fullmatch(value):
        problems.append(f"{name}: {show(value)} is not a MAC address (aa:bb:cc:dd:ee:ff)")
        return "00:00:00:00:00:00"
    return value.lower()


def _int(name: str, value: Any, low: int, high: int, problems: list[str]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        problems.append(f"{name}: {show(value)} is not an integer in {low}..{high}")
        return low
    return value


def _parse_switches(value: Any, problems: list[str]) -> dict[str, SwitchSpec]:
    result = {}
    for name, attrs in _mapping(value, "switches", problems).items():
        if not _is_node_name(name, "switch", problems):
            continue
        f = _fields(name, attrs, {"device_id", "grpc", "loopback"}, {"mac"}, problems)
        if f is None:
            continue
        device_id = _int(f"{name}.device_id", f["device_id"], 0, 2**40 - 1, problems)
        grpc = f["grpc"]
        if not isinstance(grpc, str) or not _GRPC.fullmatch(grpc):
            problems.append(f"{name}.grpc: {show(grpc)} is not host:port")
            grpc = str(grpc)
        elif not 1 <= int(grpc.rpartition(":")[2]) <= 65535:
            problems.append(f"{name}.grpc: port {grpc.rpartition(':')[2]} is not from 1 to "
                            "65535")
        # From the low 32 bits of the device id; the uniqueness check catches clashes.
        default_mac = "02:00:" + ":".join(
            f"{b:02x}" for b in (device_id & 0xFFFFFFFF).to_bytes(4, "big"))
        result[name] = SwitchSpec(
            name=name, device_id=device_id, grpc=grpc,
            loopback=_ipv4(f"{name}.loopback", f["loopback"], problems),
            mac=_mac(f"{name}.mac", f.get("mac", default_mac), problems),
        )
    if not result and value is not None:
        problems.append("no switches")
    return result


def _parse_hosts(value: Any, problems: list[str]) -> dict[str, HostSpec]:
    result = {}
    for name, attrs in _mapping(value, "hosts", problems).items():
        if not _is_node_name(name, "host", problems):
            continue
        f = _fields(name, attrs, {"ip", "mac", "bfr_id"}, set(), problems)
        if f is None:
            continue
        result[name] = HostSpec(
            name=name,
            ip=_ipv4(f"{name}.ip", f["ip"], problems),
            mac=_mac(f"{name}.mac", f["mac"], problems),
            bfr_id=_int(f"{name}.bfr_id", f["bfr_id"], 1, MAX_BFR_ID, problems),
        )
    return result


def _parse_policing(value: Any, problems: list[str]) -> Policing:
    f = _fields("policing", value, set(), {"rate", "burst"}, problems)
    if f is None:
        return Policing()
    return Policing(rate=_int("policing.rate", f.get("rate", HOST_RATE), 0, 2**32 - 1, problems),
                    burst=_int("policing.burst", f.get("burst", HOST_BURST), 1, 2**31 - 1,
                               problems))


def _parse_queues(value: Any, problems: list[str]) -> Queues | None:
    f = _fields("queues", value, {"rate"}, {"buffer", "mark"}, problems)
    if f is None:
        return None
    rate = f["rate"]
    if not isinstance(rate, int | float) or isinstance(rate, bool):
        problems.append(f"queues.rate: {show(rate)} is not a rate in Mbit/s")
        return None
    try:
        check_link_rate(rate)
    except ValueError as e:
        problems.append(f"queues.rate: {e}")
        return None
    before = len(problems)
    buffer = _int("queues.buffer", f.get("buffer", QUEUE_BUFFER), MIN_BUFFER, 2**31 - 1,
                  problems)
    if buffer > MAX_BUFFER:
        problems.append(f"queues.buffer: {buffer} bytes is more than a link may queue "
                        f"({MAX_BUFFER}): beyond it BMv2's send blocks and the switch stops "
                        "sending on every port")
    mark = _int("queues.mark", f.get("mark", QUEUE_MARK), 0, 2**31 - 1, problems)
    if len(problems) == before and mark >= buffer:
        problems.append(f"queues.mark: {mark} bytes is not below the buffer ({buffer} bytes): "
                        "a queue that never holds more would never mark")
    if len(problems) != before:
        return None
    return Queues(rate=float(rate), buffer=buffer, mark=mark)


def _parse_links(value: Any, problems: list[str]) -> list[Link]:
    if not isinstance(value, list):
        problems.append("links must be a list of [a, b] pairs")
        return []
    result = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            problems.append(f"link {show(item)}: expected [a, b]")
            continue
        ends = []
        for raw in item:
            m = _ENDPOINT.fullmatch(raw) if isinstance(raw, str) else None
            if not m:
                problems.append(f"link {show(item)}: {show(raw)} is not node or node:port")
                break
            ends.append(Endpoint(m.group(1), int(m.group(2)) if m.group(2) else None))
        if len(ends) == 2:
            result.append(Link(ends[0], ends[1]))
    return result
