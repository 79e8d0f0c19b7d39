"""inactl: deploy INA jobs on the switches of a topology over P4Runtime.

    inactl -t topologies/figure1.yaml init
    inactl -t topologies/figure1.yaml deploy --job jobs/figure1-sum.yaml
    inactl -t topologies/figure1.yaml status [--job-id 1]
    inactl -t topologies/figure1.yaml teardown --job-id 1
    inactl -t topologies/figure1.yaml check --job JOB      # contacts no switch
    inactl -t topologies/figure1.yaml plan --job JOB -o FILE
    inactl -t topologies/figure1.yaml bift

An invalid topology or job is refused before anything is written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ina.cli import common
from ina.control import p4names
from ina.control.controller import Controller, SwitchStatus
from ina.control.report import render_status
from ina.control.vat_planner import resolve, root_only, stream_cost
from ina.errors import P4InfoError, UsageError
from ina.protocol.bitmaps import format_bitmap, split_sets
from ina.spec.bier import bift
from ina.spec.job import Job, JobSpec
from ina.spec.topology import Topology

PROG = "inactl"


def parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, __doc__)
    common.add_topology(p)
    common.add_build(p)
    p.add_argument("--p4info", type=Path,
                   help="P4Info of the compiled program (default: BUILD/ina.p4info.txtpb)")
    p.add_argument("--p4blob", type=Path,
                   help="BMv2 JSON of the compiled program, for init (default: BUILD/ina.json)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to reach each switch")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="install the pipeline if needed and the base state (routes, BIER)")
    d = sub.add_parser("deploy", help="validate (or plan) a job and install it on every "
                                     "switch it needs")
    common.add_job(d)
    d.add_argument("--save-plan", type=Path, metavar="FILE",
                   help="write the deployed job, with its VAT, as an explicit job file "
                        "(workers need it when the job was planned)")
    t = sub.add_parser("teardown", help="remove every entry of a job")
    t.add_argument("--job-id", type=int, required=True)
    s = sub.add_parser("status", help="per switch: job entries, counters, drops by reason")
    s.add_argument("--job-id", type=int, help="only this job")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    c = sub.add_parser("check", help="validate (or plan) a job and print its VAT "
                                    "(contacts no switch)")
    common.add_job(c)
    pl = sub.add_parser("plan", help="plan a job and write it as an explicit job file")
    common.add_job(pl)
    pl.add_argument("-o", "--output", type=Path, required=True, metavar="FILE")
    sub.add_parser("bift", help="print every switch's BIER forwarding table (contacts no switch)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    common.setup_logging(args.verbose)
    args.p4info = args.p4info or args.build / "ina.p4info.txtpb"
    args.p4blob = args.p4blob or args.build / "ina.json"
    return common.run(PROG, lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    topology = Topology.load(args.topology)
    if args.command in ("check", "plan"):
        return _check(topology, args.job, getattr(args, "output", None))
    if args.command == "bift":
        return _bift(topology)
    # A job is checked before anything else, so an invalid one never reaches a switch.
    # (A job without aggregators is planned here as a dry run, and again at deploy
    # time with the switches' free capacity.)
    spec = JobSpec.load(args.job) if args.command == "deploy" else None
    if spec is not None:
        resolve(spec, topology)
    problems = p4names.check_p4info(args.p4info) if args.p4info.exists() else [
        f"{args.p4info} not found: compile the P4 program first (make build)"]
    if problems:
        raise P4InfoError("the P4Info does not match this controller:\n  "
                          + "\n  ".join(problems))
    if args.command == "init" and not args.p4blob.exists():
        raise P4InfoError(f"{args.p4blob} not found: compile the P4 program first (make build)")
    return asyncio.run(_run(args, topology, spec))


async def _run(args: argparse.Namespace, topology: Topology, spec: JobSpec | None) -> int:
    from ina.control.p4runtime import connect

    async with connect(topology, args.p4info, args.p4blob, push=args.command == "init",
                       timeout=args.timeout) as clients:
        ctl = Controller(topology, clients)
        handlers: dict[str, Callable[[], Awaitable[int]]] = {
            "init": lambda: _init(ctl),
            "deploy": lambda: _deploy(ctl, spec, args.save_plan),
            "teardown": lambda: _teardown(ctl, args.job_id),
            "status": lambda: _status(ctl, args.job_id, args.json),
        }
        return await handlers[args.command]()


async def _init(ctl: Controller) -> int:
    for sw, changes in sorted((await ctl.init()).items()):
        if changes.written:
            print(f"{sw}: base state: {changes.describe()}")
        else:
            print(f"{sw}: base state unchanged ({changes.unchanged} entries and groups "
                  "already right)")
    return 0


async def _deploy(ctl: Controller, spec: JobSpec | None, save_plan: Path | None) -> int:
    assert spec is not None
    d = await ctl.deploy(spec)
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
        print(f"  worker {w} sends to {d.job.target_of(w, ctl.topology)} "
              f"({d.job.worker_parent[w]})")
    if save_plan is not None:
        print(f"  the job with its VAT is in {save_plan}: give it to the workers")
    return 0


async def _teardown(ctl: Controller, job_id: int) -> int:
    switches = await ctl.teardown(job_id)
    print(f"job {job_id} removed from {', '.join(switches)}")
    return 0


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
        }
        for sw, s in status.items()
    }


async def _status(ctl: Controller, job_id: int | None, as_json: bool) -> int:
    status = await ctl.status()
    if as_json:
        print(json.dumps(_status_json(status, job_id), indent=2))
    else:
        print(render_status(status, job_id))
    if job_id is not None and not any(j.job_id == job_id for s in status.values() for j in s.jobs):
        raise UsageError(f"job {job_id} is not deployed")
    return 0


def _check(topology: Topology, path: Path, output: Path | None = None) -> int:
    spec = JobSpec.load(path)
    job = resolve(spec, topology)
    print(f"job {job.job_id}: {job.op.name.lower()} over {', '.join(job.workers)}, "
          f"{job.slots} slots per VAT node"
          + (" (planned)" if spec.aggregators is None else ""))
    print(f"  aggregation phase: {stream_cost(job, topology)} link crossings per packet round"
          f" (all workers straight to the root: {stream_cost(root_only(job, topology), topology)})")

    text = _bitmap_text(topology)

    def show(sw: str, depth: int) -> None:
        node = job.nodes[sw]
        print(f"{'  ' * depth}{sw} A-BM {text(node.abm)} "
              f"({', '.join(node.covers)})" + (" root" if node.is_root else ""))
        for child in node.children:
            if child in job.nodes:
                show(child, depth + 1)
            else:
                print(f"{'  ' * (depth + 1)}{child} -> sends to {job.target_of(child, topology)}")

    show(job.root, 1)
    if output is not None:
        _save(output, job)
        print(f"explicit job written to {output}")
    return 0


def _save(path: Path, job: Job, context: str = "") -> None:
    """Write ``job`` as an explicit job file."""
    try:
        job.save(path)
    except OSError as exc:
        raise UsageError(f"{context}cannot write {path}: {exc.strerror or exc}") from exc


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


def _bift(topology: Topology) -> int:
    text = _bitmap_text(topology)
    for sw in sorted(topology.switches):
        print(f"{sw}:")
        for row in bift(topology, sw):
            print(f"  bfr-id {row.bfr_id:3d} -> port {row.port} ({row.neighbor}) "
                  f"F-BM {text(row.fbm)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
