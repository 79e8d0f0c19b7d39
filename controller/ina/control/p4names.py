"""Names of the P4 program's tables, actions, parameters and counters.

The controller and the reference model refer to P4 objects only through this
module. ``check_p4info`` compares it with the P4Info that p4c writes; the tests
run it on every compile, and ``inactl`` runs it before it talks to a switch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ina.protocol.constants import BITSTRING_BITS


@dataclass(frozen=True)
class ActionSpec:
    name: str
    params: tuple[tuple[str, int], ...] = ()  # (name, bitwidth)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p for p, _ in self.params)


@dataclass(frozen=True)
class TableSpec:
    name: str
    keys: tuple[tuple[str, str, int], ...]  # (name, match kind, bitwidth)
    actions: tuple[ActionSpec, ...]
    default: ActionSpec  # the program's default action, not writable by the controller
    #: The table has a direct meter (in packets): its entries may carry a MeterConfig.
    metered: bool = False

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(k for k, _, _ in self.keys)


BM = BITSTRING_BITS

# Ingress: IPv4 routing and the switch's own addresses.
IS_LOCAL = ActionSpec("InaIngress.addresses.is_local")
FORWARD = ActionSpec("InaIngress.routing.forward", (("port", 9), ("smac", 48), ("dmac", 48)))
NO_ROUTE = ActionSpec("InaIngress.routing.no_route")
NOT_LOCAL = ActionSpec("InaIngress.addresses.not_local")
LOCAL_ADDRESSES = TableSpec(
    "InaIngress.addresses.local_addresses", (("dst_addr", "exact", 32),), (IS_LOCAL,), NOT_LOCAL
)
IPV4_ROUTES = TableSpec(
    "InaIngress.routing.ipv4_routes", (("dst_addr", "lpm", 32),), (FORWARD,), NO_ROUTE
)

# Ingress: what each port leads to (a host: its bit and address; a switch); a port
# without an entry is undeclared and carries nothing.
FROM_HOST = ActionSpec("InaIngress.edge.from_host",
                       (("host_bit", BM), ("host_si", 8), ("host_ip", 32)))
FROM_SWITCH = ActionSpec("InaIngress.edge.from_switch")
UNDECLARED = ActionSpec("InaIngress.edge.undeclared")
HOST_PORTS = TableSpec(
    "InaIngress.edge.host_ports", (("ingress_port", "exact", 9),), (FROM_HOST, FROM_SWITCH),
    UNDECLARED,
)

# Ingress: the jobs this switch holds a VAT node of, or counts transit for.
VAT_NODE = ActionSpec(
    "InaIngress.jobs.vat_node",
    (("job_index", 8), ("slot_base", 16), ("slot_mask", 16), ("lap", 32),
     ("epoch", 32), ("gen", 8), ("node_ip", 32), ("parent_ip", 32), ("set_id", 8),
     ("abm", BM)),
)
# A root's A-BM is in (set_id, abm) when it lies in one set (sets == 1), else in vat_sets.
# lap (2 x slots) and reach (5 x slots) bound the job's window (aggregation.p4).
VAT_ROOT = ActionSpec(
    "InaIngress.jobs.vat_root",
    (("job_index", 8), ("sets", 8), ("slot_base", 16), ("slot_mask", 16), ("lap", 32),
     ("reach", 32), ("epoch", 32), ("gen", 8), ("node_ip", 32), ("set_id", 8), ("abm", BM)),
)
TRANSIT = ActionSpec("InaIngress.jobs.transit", (("job_index", 8), ("node_ip", 32)))
NO_JOB = ActionSpec("InaIngress.jobs.no_job")
VAT_JOBS = TableSpec(
    "InaIngress.jobs.vat_jobs", (("job_id", "exact", 16),), (VAT_NODE, VAT_ROOT, TRANSIT), NO_JOB
)
# The A-BM of a root spanning several BIER sets, per set.
SET_ABM = ActionSpec("InaIngress.jobs.set_abm", (("abm", BM),))
NO_SET = ActionSpec("InaIngress.jobs.no_set")
VAT_SETS = TableSpec(
    "InaIngress.jobs.vat_sets", (("job_id", "exact", 16), ("si", "exact", 8)), (SET_ABM,), NO_SET
)

# Egress: a root's result gets its job's A-BM in each set.
RESULT_SET = ActionSpec("InaEgress.bier.result_set", (("abm", BM),))
NO_RESULT_SET = ActionSpec("InaEgress.bier.no_result_set")
RESULT_SETS = TableSpec(
    "InaEgress.bier.result_sets", (("job_id", "exact", 16), ("si", "exact", 8)), (RESULT_SET,),
    NO_RESULT_SET,
)

# Egress: BIER F-BM per (port, set); host ports decapsulate.
TO_BFR = ActionSpec("InaEgress.bier.to_bfr", (("fbm", BM), ("smac", 48), ("dmac", 48)))
TO_HOST = ActionSpec(
    "InaEgress.bier.to_host", (("fbm", BM), ("smac", 48), ("dmac", 48), ("host_ip", 32))
)
PRUNE = ActionSpec("InaEgress.bier.prune")
BIER_PORTS = TableSpec(
    "InaEgress.bier.bier_ports", (("egress_port", "exact", 9), ("si", "exact", 8)),
    (TO_BFR, TO_HOST), PRUNE,
)

# Ingress: which host ports may contribute to which job, or inject its results.
# A worker's edge switch steers its contributions to its parent VAT node and its
# SYNCs to the root, in the plan's generation; on hosts: no switch aggregates the job.
# Each entry's meter polices the host's INA packets of the job.
MEMBER = ActionSpec("InaIngress.edge.member",
                    (("parent_ip", 32), ("root_ip", 32), ("gen", 8), ("slots", 16),
                     ("peers", BM)))
MEMBER_ON_HOSTS = ActionSpec("InaIngress.edge.member_on_hosts", (("gen", 8), ("slots", 16)))
BIER_SOURCE = ActionSpec("InaIngress.edge.bier_source")
NOT_MEMBER = ActionSpec("InaIngress.edge.not_member")
JOB_MEMBERS = TableSpec(
    "InaIngress.edge.job_members",
    (("job_id", "exact", 16), ("ingress_port", "exact", 9)),
    (MEMBER, MEMBER_ON_HOSTS, BIER_SOURCE), NOT_MEMBER, metered=True,
)

# Egress: each port's phantom queue (congestion.p4), from the topology's queues:
# ``rate`` bytes per 2**PHANTOM_RATE_SHIFT us (the link's rate), packets marked above
# ``mark`` bytes, at most ``limit`` bytes held (the link's buffer). No entry: none.
PHANTOM_QUEUE = ActionSpec("InaEgress.congestion.phantom_queue",
                           (("rate", 32), ("mark", 32), ("limit", 32)))
NO_PHANTOM_QUEUE = ActionSpec("InaEgress.congestion.no_phantom_queue")
PORT_QUEUES = TableSpec(
    "InaEgress.congestion.port_queues", (("egress_port", "exact", 9),), (PHANTOM_QUEUE,),
    NO_PHANTOM_QUEUE,
)

TABLES = (LOCAL_ADDRESSES, IPV4_ROUTES, HOST_PORTS, VAT_JOBS, VAT_SETS, JOB_MEMBERS,
          RESULT_SETS, BIER_PORTS, PORT_QUEUES)
#: Tables whose entries belong to jobs; each is keyed by job_id first.
JOB_TABLES = (VAT_JOBS, VAT_SETS, JOB_MEMBERS, RESULT_SETS)
#: Tables that ``inactl init`` owns (the rest belong to jobs).
BASE_TABLES = (LOCAL_ADDRESSES, IPV4_ROUTES, HOST_PORTS, BIER_PORTS, PORT_QUEUES)

# Counters. Every statistic is counted in exactly one of the ingress/egress pair,
# so a statistic's value is the sum of the pair at its index.
INGRESS_JOB_STATS = "InaIngress.job_stats"
EGRESS_JOB_STATS = "InaEgress.job_stats"
INGRESS_SWITCH_STATS = "InaIngress.switch_stats"
EGRESS_SWITCH_STATS = "InaEgress.switch_stats"
JOB_STAT_COUNTERS = (INGRESS_JOB_STATS, EGRESS_JOB_STATS)
SWITCH_STAT_COUNTERS = (INGRESS_SWITCH_STATS, EGRESS_SWITCH_STATS)
# Per port (index: the port; not the CPU port): packets sent, those of them marked
# as congested (congestion.p4), and packets received (ingress.p4).
PORT_PACKETS = "InaEgress.congestion.port_packets"
PORT_MARKS = "InaEgress.congestion.port_marks"
PORT_RECEIVED = "InaIngress.port_received"
PORT_COUNTERS = (PORT_PACKETS, PORT_MARKS, PORT_RECEIVED)
COUNTERS = JOB_STAT_COUNTERS + SWITCH_STAT_COUNTERS + PORT_COUNTERS

TABLE_BY_NAME = {t.name: t for t in TABLES}
ACTION_BY_NAME = {a.name: a for t in TABLES for a in t.actions + (t.default,)}


def check_p4info(path: str | Path) -> list[str]:
    """Differences between this module and a P4Info file; empty when they agree."""
    from finsy import P4Schema  # heavy import, only needed here

    schema = P4Schema(Path(path))
    problems: list[str] = []
    tables = {t.name: t for t in schema.tables}
    actions = {a.name: a for a in schema.actions}
    for spec in TABLES:
        table = tables.get(spec.name)
        if table is None:
            problems.append(f"table {spec.name} missing from the P4Info")
            continue
        got_keys = tuple(
            (f.name, str(getattr(f.match_type, "name", f.match_type)).lower(), f.bitwidth)
            for f in table.match_fields
        )
        if got_keys != spec.keys:
            problems.append(f"table {spec.name}: keys {got_keys}, expected {spec.keys}")
        if spec.metered != (table.direct_meter is not None):
            problems.append(f"table {spec.name}: direct meter "
                            f"{'missing' if spec.metered else 'unexpected'}")
        got_actions = {ref.name for ref in table.actions}
        expected = {a.name for a in spec.actions} | {spec.default.name}
        if got_actions != expected:
            problems.append(
                f"table {spec.name}: actions {sorted(got_actions)}, expected {sorted(expected)}"
            )
        for action_spec in spec.actions + (spec.default,):
            action = actions.get(action_spec.name)
            if action is None:
                continue
            got_params = tuple((p.name, p.bitwidth) for p in action.params)
            if got_params != action_spec.params:
                problems.append(
                    f"action {action_spec.name}: params {got_params}, "
                    f"expected {action_spec.params}"
                )
    counters = {c.name for c in schema.counters}
    for name in COUNTERS:
        if name not in counters:
            problems.append(f"counter {name} missing from the P4Info")
    return problems
