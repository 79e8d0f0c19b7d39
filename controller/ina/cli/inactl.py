# PYTHON_ARGCOMPLETE_OK
"""inactl: deploy INA jobs on the switches of a topology over P4Runtime.

    inactl -t topologies/figure1.yaml init
    inactl -t topologies/figure1.yaml deploy --job jobs/figure1-sum.yaml
    inactl -t topologies/figure1.yaml status [--job jobs/figure1-sum.yaml | --job-id 1] [--json]
    inactl -t topologies/figure1.yaml teardown --job jobs/figure1-sum.yaml   # or --job-id 1
    inactl -t topologies/figure1.yaml check --job JOB [--json]   # contacts no switch
    inactl -t topologies/figure1.yaml plan --job JOB -o FILE     # -o -: on stdout
    inactl -t topologies/figure1.yaml bift [--json]
    inactl -t topologies/leaf-spine-2x4.yaml down switch spine1   # or: down link leaf1 spine1
    inactl -t topologies/leaf-spine-2x4.yaml up switch spine1

-t can be left out with INA_TOPOLOGY=FILE in the environment. An invalid
topology or job is refused before anything is written. Switches and links
declared down (``down``, until ``up``) or detected down (``watch``) are recorded
next to the running lab (ina.lab.labstate), apart, and both left out of the
topology by every command.

Every command connects over TLS with the lab's credentials (made by ``inalab
run``, in the run directory: $INA_RUN_DIR/<topology>.tls, default .run);
``--insecure`` connects in plaintext, to switches started without TLS. Commands
that write take turns: see ina.control.p4runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from ina.cli import common, inactl_watch
from ina.control import p4names
from ina.control.access import Access
from ina.control.controller import Controller, SwitchStatus
from ina.control.localstate import RecordedFailures, load_failures, update_failures
from ina.control.repair import ON_HOSTS, read_jobs, repair, repair_switches
from ina.control.report import render_status
from ina.control.switch import CounterValue, SwitchClient
from ina.control.vat_planner import resolve, root_only, stream_cost
from ina.errors import P4InfoError, PlanError, UsageError
from ina.lab.labstate import LabRecord
from ina.protocol.bitmaps import format_bitmap, split_sets
from ina.spec.bier import bift
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Failures, Topology

PROG = "inactl"
LOG = logging.getLogger(PROG)


def parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, __doc__)
    common.add_topology(p)
    common.add_build(p)
    p.add_argument("--p4info", type=Path, metavar="FILE",
                   help="P4Info of the compiled program (default: BUILD/ina.p4info.txtpb)")
    p.add_argument("--p4blob", type=Path, metavar="FILE",
                   help="BMv2 JSON of the compiled program, for init, up, repair and watch "
                        "(default: BUILD/ina.json)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to reach each switch, and to wait for another controller "
                        "writing to it")
    p.add_argument("--insecure", action="store_true",
                   help="connect without TLS (to switches started without it: inalab run "
                        "--insecure); default: TLS with the lab's credentials")
    sub = common.commands(p)
    common.command(sub, "init", "install the pipeline if needed and the base state "
                                "(routes, BIER)")
    d = common.command(sub, "deploy", "validate (or plan) a job and install it on every "
                                      "switch it needs")
    common.add_job(d)
    d.add_argument("--save-plan", type=Path, metavar="FILE",
                   help="write the deployed job, with its VAT, as an explicit job file "
                        "(default: not written)")
    d.add_argument("--no-fallback", action="store_true",
                   help="refuse a job no switch can take, instead of running it on its hosts")
    t = common.command(sub, "teardown", "remove every entry of a job from the switches")
    common.add_job_or_id(t, required=True, what="the job to remove")
    s = common.command(sub, "status", "per switch: job entries, counters, drops by reason")
    common.add_job_or_id(s, required=False, what="show only this job (default: every job)")
    common.add_json(s, "the status")
    c = common.command(sub, "check", "validate (or plan) a job and print its VAT "
                                     "(contacts no switch)")
    common.add_job(c)
    common.add_json(c, "the VAT")
    pl = common.command(sub, "plan", "plan a job and write it as an explicit job file "
                                     "(contacts no switch)")
    common.add_job(pl)
    pl.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                    help="where to write the explicit job file; - for stdout (the summary "
                         "then goes to stderr)")
    common.add_json(pl, "the VAT (as check --json does)")
    b = common.command(sub, "bift", "print every switch's BIER forwarding table "
                                    "(contacts no switch)")
    common.add_json(b, "the tables")
    for verb, what in (("down", "failed: routes and jobs move around it"),
                       ("up", "back: routes return to the shortest paths")):
        common.add_element(common.command(sub, verb, f"declare a switch or link {what}"))
    common.command(sub, "repair", "make the switches right for the declared failures again "
                                  "(after a repair was interrupted)")
    inactl_watch.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = common.parse(parser(), argv)
    common.setup_logging(args.verbose)
    args.p4info = args.p4info or args.build / "ina.p4info.txtpb"
    args.p4blob = args.p4blob or args.build / "ina.json"
    return common.run(PROG, lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    full = Topology.load(args.topology)
    record = LabRecord(full.name)
    failures_file = record.failures_file
    if args.command in ("down", "up"):
        element = _element(args, full)
        # Recorded first, under the file's lock: the failure is real whether or not
        # the repair completes (``inactl repair`` finishes an interrupted one).
        failures = update_failures(failures_file, lambda r: _declared(args, element, r)).all
    else:
        failures = load_failures(failures_file).all
    topology = full.without(failures) if failures else full
    if args.command in ("check", "plan"):
        return _check(topology, args.job, getattr(args, "output", None), args.json)
    if args.command == "bift":
        return _bift(topology, args.json)
    if args.command in ("teardown", "status"):
        args.job_id = common.job_id_of(args)  # a job file is read before any switch
    # A job is checked before anything else, so an invalid one never reaches a switch.
    # (A job without aggregators is planned here as a dry run, and again at deploy
    # time with the switches' free capacity.)
    spec = JobSpec.load(args.job) if args.command == "deploy" else None
    if spec is not None:
        try:
            resolve(spec, topology)
        except PlanError:
            if args.no_fallback:
                raise
    _check_program(args)
    access = record.access(args.insecure)
    if args.command == "watch":
        return asyncio.run(inactl_watch.run(args, full, _repair_on_change(
            args, full, failures_file, access), access))
    return asyncio.run(_run(args, full, topology, spec, access))


def _check_program(args: argparse.Namespace) -> None:
    """P4InfoError unless the compiled program is there and agrees with this controller
    (the switch commands need it)."""
    problems = p4names.check_p4info(args.p4info) if args.p4info.exists() else [
        f"{args.p4info} not found: compile the P4 program first (make build)"]
    if problems:
        raise P4InfoError("the P4Info does not match this controller:\n  "
                          + "\n  ".join(problems))
    if args.command in ("init", "watch", "up", "repair") and not args.p4blob.exists():
        raise P4InfoError(f"{args.p4blob} not found: compile the P4 program first (make build)")


def _element(args: argparse.Namespace, full: Topology) -> tuple[str, ...]:
    """The switch or link of ``down|up switch NAME`` or ``link A B``, checked against
    the topology."""
    element = common.element_of(args)
    common.check_element(full, element)
    return element


def _declared(args: argparse.Namespace, element: tuple[str, ...],
              recorded: RecordedFailures) -> RecordedFailures:
    """The failures after ``inactl down|up``: only the declared ones change."""
    down = args.command == "down"
    declared = recorded.declared
    if element[0] == "switch":
        declared = declared.with_switch(element[1], down)
    else:
        declared = declared.with_link(element[1], element[2], down)
    return RecordedFailures(declared, recorded.detected)


async def _run(args: argparse.Namespace, full: Topology, topology: Topology,
               spec: JobSpec | None, access: Access) -> int:
    # A switch that is back (or restarted empty) gets the pipeline again.
    push = args.command in ("init", "up", "repair")
    async with _switches(args, topology, push, access) as clients:
        ctl = Controller(topology, clients, claim_timeout=args.timeout)
        handlers: dict[str, Callable[[], Awaitable[int]]] = {
            "init": lambda: _init(ctl),
            "deploy": lambda: _deploy(ctl, spec, args.save_plan, not args.no_fallback),
            "teardown": lambda: _teardown(ctl, args.job_id),
            "status": lambda: _status(ctl, args.job_id, args.json),
            "down": lambda: _repair(full, topology, clients),
            "up": lambda: _repair(full, topology, clients),
            "repair": lambda: _repair(full, topology, clients),
        }
        return await handlers[args.command]()


def _switches(args: argparse.Namespace, topology: Topology, push: bool,
              access: Access) -> AbstractAsyncContextManager[Mapping[str, SwitchClient]]:
    """A client of every switch of the topology, over P4Runtime: writers take turns
    (ina.control.p4runtime); ``status`` only reads, and waits for nobody."""
    from ina.control.p4runtime import connect

    return connect(topology, args.p4info, args.p4blob, access=access, push=push,
                   timeout=args.timeout, write=args.command != "status")


def _repair_on_change(args: argparse.Namespace, full: Topology, failures_file: Path,
                      access: Access) -> Callable[[Failures], Awaitable[None]]:
    """What ``inactl watch`` does on each change it detects: record it as its own
    verdict (what was declared with ``inactl down`` stays), and repair for every
    failure recorded, declared or detected, over one-shot connections (whose
    election id is above the watcher's, so they may write; taking turns with the
    other commands, see ina.control.p4runtime)."""
    async def on_change(detected: Failures) -> None:
        recorded = await asyncio.to_thread(
            update_failures, failures_file,
            lambda r: RecordedFailures(r.declared, detected))
        report = await repair_switches(full, recorded.all, args.p4info, args.p4blob, access,
                                       args.timeout)
        for line in report.describe().splitlines():
            LOG.warning("repair: %s", line)

    return on_change


async def _repair(full: Topology, topology: Topology,
                  clients: Mapping[str, SwitchClient]) -> int:
    report = await repair(full, topology.failures, clients)
    print(report.describe())
    return 0


async def _init(ctl: Controller) -> int:
    for sw, changes in sorted((await ctl.init()).items()):
        if changes.written:
            print(f"{sw}: base state: {changes.describe()}")
        else:
            print(f"{sw}: base state unchanged ({changes.unchanged} entries and groups "
                  "already right)")
    return 0


async def _deploy(ctl: Controller, spec: JobSpec | None, save_plan: Path | None,
                  fallback: bool) -> int:
    assert spec is not None
    d = await ctl.deploy(spec, fallback=fallback)
    if d.job is None:
        warning = (f"WARNING: job {spec.job_id} runs on its hosts, not in the network: no "
                   f"switch can aggregate it ({d.fallback}); its workers reduce among "
                   "themselves over TCP (inactl deploy --no-fallback refuses such a job)")
        print(f"{PROG}: {warning}", file=sys.stderr)
        print(warning)
        if save_plan is not None:
            raise UsageError(f"job {spec.job_id} runs on its hosts: it has no VAT to save "
                             f"in {save_plan}")
        return 0
    if save_plan is not None:
        _save(save_plan, d.job, f"job {d.job.job_id} is deployed, but its plan was not saved: ")
    print(f"job {d.job.job_id} ({d.job.op.name.lower()}) deployed:")
    for sw, a in sorted(d.allocations.items()):
        node = d.job.nodes.get(sw)
        if node is None:
            print(f"  {sw}: transit, counters at index {a.job_index}")
        else:
            role = "root" if node.is_root else f"aggregator -> {node.parent}"
            print(f"  {sw}: {role}, covers {', '.join(node.covers)}, "
                  f"slots {a.slot_base}..{a.slot_base + d.job.slots - 1}")
    if d.job.root_is_server(ctl.topology):
        print(f"  {d.job.root}: server root, covers {', '.join(d.job.workers)}: "
              f"run inaroot on it")
    for w in d.job.workers:
        print(f"  worker {w}: its edge switch steers it to {d.job.worker_parent[w]} "
              f"({d.job.target_of(w, ctl.topology)})")
    if save_plan is not None:
        print(f"  the job with its VAT is in {save_plan}")
    return 0


async def _teardown(ctl: Controller, job_id: int) -> int:
    switches = await ctl.teardown(job_id)
    print(f"job {job_id} removed from {', '.join(switches)}")
    return 0


def _counts(v: CounterValue) -> dict[str, int]:
    return {"packets": v.packets, "bytes": v.bytes}


def _status_json(status: dict[str, SwitchStatus], job_id: int | None) -> dict[str, Any]:
    return {
        sw: {
            "base_entries": s.base_entries,
            "problems": s.problems,
            "jobs": {
                str(j.job_id): {
                    "role": j.role,
                    "entry": j.describe(),
                    "stats": {stat.name.lower(): {"packets": v.packets, "bytes": v.bytes}
                              for stat, v in s.job_stats[j.job_id].items()},
                }
                for j in s.jobs if job_id is None or j.job_id == job_id
            },
            "switch": {stat.name.lower(): {"packets": v.packets, "bytes": v.bytes}
                       for stat, v in s.switch_stats.items()},
            "ports": {str(port): {"received": _counts(s.port_received.get(port, CounterValue())),
                                  "sent": _counts(v),
                                  "marked": _counts(s.port_marks.get(port, CounterValue()))}
                      for port, v in s.port_packets.items()},
        }
        for sw, s in status.items()
    }


async def _status(ctl: Controller, job_id: int | None, as_json: bool) -> int:
    status = await ctl.status()
    entries, groups = await ctl.read_job_state()
    modes = {j: r.mode for j, r in read_jobs(ctl.topology, entries, groups).items()
             if job_id is None or j == job_id}
    down = ctl.topology.failures
    if as_json:
        doc = _status_json(status, job_id)
        doc["_down"] = {"switches": sorted(down.switches),
                        "links": sorted(sorted(pair) for pair in down.links)}
        doc["_jobs"] = {str(j): {"on": mode} for j, mode in modes.items()}
        print(json.dumps(doc, indent=2))
    else:
        if down:
            print(f"down: {down.describe()}")
        for j, mode in sorted(modes.items()):
            if mode == ON_HOSTS:
                print(f"job {j}: on its hosts (no switch can aggregate it: its workers "
                      "reduce among themselves)")
        print(render_status(status, job_id))
    if job_id is not None and job_id not in modes:
        raise UsageError(f"job {job_id} is not deployed")
    return 0


def _check(topology: Topology, path: Path, output: Path | None, as_json: bool) -> int:
    """``check`` (``output`` None) and ``plan``: the job's VAT, as text or JSON, and
    for ``plan`` the explicit job file."""
    if as_json and output == common.STDOUT:
        raise UsageError("-o - and --json would both write to stdout: give -o a file")
    spec = JobSpec.load(path)
    job = resolve(spec, topology)
    text = _bitmap_text(topology)
    cost, naive = stream_cost(job, topology), stream_cost(root_only(job, topology), topology)
    if as_json:
        print(json.dumps(_vat_json(job, topology, spec.aggregators is None, cost, naive),
                         indent=2))
    else:
        # With the job file on stdout, the summary goes to stderr.
        out = sys.stderr if output == common.STDOUT else sys.stdout
        lines = [f"job {job.job_id}: {job.op.name.lower()} over {', '.join(job.workers)}, "
                 f"{job.slots} slots per VAT node"
                 + (" (planned)" if spec.aggregators is None else ""),
                 f"  aggregation phase: {cost} link crossings per packet round"
                 f" (all workers straight to the root: {naive})"]

        def show(sw: str, depth: int) -> None:
            node = job.nodes[sw]
            lines.append(f"{'  ' * depth}{sw} A-BM {text(node.abm)} "
                         f"({', '.join(node.covers)})" + (" root" if node.is_root else ""))
            for child in node.children:
                if child in job.nodes:
                    show(child, depth + 1)
                else:
                    lines.append(f"{'  ' * (depth + 1)}{child} -> steered to "
                                 f"{job.target_of(child, topology)}")

        show(job.root, 1)
        print("\n".join(lines), file=out)
    if output is not None:
        _save(output, job)
        if output != common.STDOUT and not as_json:
            print(f"explicit job written to {output}")
    return 0


def _vat_json(job: Job, topology: Topology, planned: bool, cost: int,
              naive: int) -> dict[str, Any]:
    """``check --json``: the job, its VAT node by node, where each worker's packets go."""
    text = _bitmap_text(topology)
    return {
        "job_id": job.job_id, "op": job.op.name.lower(), "workers": list(job.workers),
        "slots": job.slots, "planned": planned, "root": job.root,
        "link_crossings": cost, "link_crossings_all_to_root": naive,
        "nodes": {sw: {"abm": text(node.abm), "abm_hex": hex(node.abm),
                       "covers": list(node.covers), "parent": node.parent,
                       "children": list(node.children)}
                  for sw, node in sorted(job.nodes.items())},
        "steered_to": {w: {"parent": job.worker_parent[w],
                           "address": job.target_of(w, topology)} for w in job.workers},
        "explicit_job": job.to_spec(),
    }


def _save(path: Path, job: Job, context: str = "") -> None:
    """Write ``job`` as an explicit job file (``-``: on stdout)."""
    try:
        with common.output(path) as f:
            f.write(job.to_yaml())
    except UsageError as exc:
        raise UsageError(f"{context}{exc}") from exc


def _bitmap_text(topology: Topology) -> Callable[[int], str]:
    """A bitmap in the draft's notation (BFR-id 1 leftmost), as wide as the topology's
    hosts need; with hosts in several BIER sets, one such string per set:
    ``SI0:1100 SI1:0010``."""
    width = {si: bits.bit_length()
             for si, bits in split_sets(sum(h.bit for h in topology.hosts.values())).items()}
    if list(width) == [0]:
        return lambda bitmap: format_bitmap(bitmap, width[0])

    def per_set(bitmap: int) -> str:
        mine = split_sets(bitmap)
        return " ".join(f"SI{si}:{format_bitmap(mine.get(si, 0), w)}" for si, w in width.items())

    return per_set


def _bift(topology: Topology, as_json: bool) -> int:
    text = _bitmap_text(topology)
    if as_json:
        print(json.dumps({sw: [{"bfr_id": row.bfr_id, "port": row.port,
                                "neighbor": row.neighbor, "fbm": text(row.fbm),
                                "fbm_hex": hex(row.fbm)} for row in bift(topology, sw)]
                          for sw in sorted(topology.switches)}, indent=2))
        return 0
    for sw in sorted(topology.switches):
        print(f"{sw}:")
        for row in bift(topology, sw):
            print(f"  bfr-id {row.bfr_id:3d} -> port {row.port} ({row.neighbor}) "
                  f"F-BM {text(row.fbm)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
