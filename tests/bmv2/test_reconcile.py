"""`inactl init` on running switches changes only what differs, in place: nothing
when all is right, one MODIFY for a changed route or multicast group; a ping and a
deployed job's AllReduce running meanwhile lose nothing. Run with `make test`.
"""

from __future__ import annotations

import subprocess

import numpy as np

from ina.control import p4names as n
from ina.control.controller import BaseChanges, Controller
from ina.control.entities import Entity, Lpm, McastGroup, TableEntry
from ina.control.switch_state import base_plan
from ina.host.arrays import random_array
from ina.model.harness import reduce_arrays
from ina.protocol.frames import ip_int

from bmv2.bmv2lab import Deployed, NetLab

WRONG_MAC = 0x02DEADBEEF00


def _init(lab: NetLab) -> dict[str, BaseChanges]:
    result: dict[str, BaseChanges] = lab.controller_call(lambda ctl: ctl.init())
    return result


def _written(changes: dict[str, BaseChanges]) -> dict[str, tuple[int, int, int]]:
    return {sw: (len(c.inserted), len(c.modified), len(c.deleted))
            for sw, c in changes.items() if c.written}


def _route(lab: NetLab, switch: str, dest: str) -> TableEntry:
    """The route ``switch`` must hold toward ``dest``."""
    key = (("dst_addr", Lpm(ip_int(lab.topology.address(dest)), 32)),)
    return next(e for e in base_plan(lab.topology, switch)
                if isinstance(e, TableEntry) and e.table == n.IPV4_ROUTES.name
                and e.match == key)


def _write_wrong(lab: NetLab, switch: str, entity: Entity) -> None:
    async def modify(ctl: Controller) -> None:
        await ctl.clients[switch].modify([entity])

    lab.controller_call(modify)


def _wrong_smac(entry: TableEntry) -> TableEntry:
    """The entry with another source MAC: forwarding still works (hosts do not check
    it), so only the controller notices."""
    return TableEntry(entry.table, entry.match, entry.action,
                      tuple((p, WRONG_MAC if p == "smac" else v) for p, v in entry.params))


def _read(lab: NetLab, switch: str, table: str) -> list[TableEntry]:
    result: list[TableEntry] = lab.controller_call(
        lambda ctl: ctl.clients[switch].read_table(table))
    return result


def _job_entries(lab: NetLab) -> dict[str, set[TableEntry]]:
    async def read(ctl: Controller) -> dict[str, set[TableEntry]]:
        return {sw: {e for t in n.JOB_TABLES for e in await c.read_table(t.name)}
                for sw, c in ctl.clients.items()}

    result: dict[str, set[TableEntry]] = lab.controller_call(read)
    return result


def _start_ping(lab: NetLab, src: str, dst: str, count: int) -> subprocess.Popen[bytes]:
    """A fast ping (every 10 ms), already answered once when this returns."""
    ping: subprocess.Popen[bytes] = lab.lab.host(src).popen(
        ["ping", "-n", "-i", "0.01", "-c", str(count), "-W", "1", lab.topology.address(dst)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert ping.stdout is not None
    while b"bytes from" not in (line := ping.stdout.readline()):
        assert line, "ping got no answer"
    return ping


def _finish_ping(ping: subprocess.Popen[bytes], count: int) -> None:
    out, _ = ping.communicate(timeout=120)
    assert f"{count} packets transmitted, {count} received".encode() in out, out


def test_init_on_initialised_switches_writes_nothing(figure1_lab: NetLab) -> None:
    assert _written(_init(figure1_lab)) == {}
    assert _written(_init(figure1_lab)) == {}


def test_init_puts_a_changed_route_back_with_one_modify_and_ping_loses_nothing(
        figure1_lab: NetLab) -> None:
    # w5 -> w8 crosses s3, s6, s4; s6's route toward w8 is changed while ping runs.
    ping = _start_ping(figure1_lab, "w5", "w8", count=500)
    try:
        right = _route(figure1_lab, "s6", "w8")
        _write_wrong(figure1_lab, "s6", _wrong_smac(right))
        assert _written(_init(figure1_lab)) == {"s6": (0, 1, 0)}
        assert _written(_init(figure1_lab)) == {}
        assert ping.poll() is None, "ping ended before init ran: make it longer"
    finally:
        _finish_ping(ping, 500)
    assert right in _read(figure1_lab, "s6", n.IPV4_ROUTES.name)


def test_init_modifies_a_changed_multicast_group_in_place(figure1_lab: NetLab) -> None:
    right = next(e for e in base_plan(figure1_lab.topology, "s4")
                 if isinstance(e, McastGroup) and len(e.replicas) > 1)
    _write_wrong(figure1_lab, "s4", McastGroup(right.group_id, right.replicas[:1]))
    assert _written(_init(figure1_lab)) == {"s4": (0, 1, 0)}
    groups = figure1_lab.controller_call(lambda ctl: ctl.clients["s4"].read_groups())
    assert right in groups


def test_allreduce_stays_exact_while_init_runs_and_modifies(
        figure1_lab: NetLab, deployed: Deployed) -> None:
    (path, job), = deployed
    entries_before = _job_entries(figure1_lab)
    size = 64 * 6000  # long enough for three inits, which read every base table
    procs = figure1_lab.start_workers(path, job, size, seed=300, timeout=30)
    try:
        assert _written(_init(figure1_lab)) == {}
        # s1's partial result crosses s5 and s7 toward s6: change s7's route to s6.
        _write_wrong(figure1_lab, "s7", _wrong_smac(_route(figure1_lab, "s7", "s6")))
        assert _written(_init(figure1_lab)) == {"s7": (0, 1, 0)}
        assert _written(_init(figure1_lab)) == {}
        assert any(p.poll() is None for p in procs.values()), \
            "the AllReduce ended before init ran: make it longer"
    finally:
        results = figure1_lab.finish_workers(job, procs)
    expected = reduce_arrays(job.op, [random_array(size, 300 + i)
                                      for i in range(len(job.workers))])
    for w in job.workers:
        assert np.array_equal(results[w], expected), w
    assert _job_entries(figure1_lab) == entries_before
