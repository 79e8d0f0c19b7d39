"""inalab: run a topology on Mininet + BMv2 in private namespaces, and the demo.

    inalab run -t topologies/figure1.yaml            # Mininet CLI, switches ready
    inalab exec -t topologies/figure1.yaml -- inactl -t topologies/figure1.yaml status
    inalab host -t topologies/figure1.yaml w1 -- ping -c1 10.0.0.8
    inalab demo -t topologies/figure1.yaml --job jobs/figure1-sum.yaml

``run`` records the namespaces it made in .run/<topology>.json so that ``exec``
(the lab's network, where the switches' gRPC ports are) and ``host`` (one
host's network) can reach them from another terminal.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from ina import sandbox
from ina.job import JobError, JobSpec, validate_job
from ina.topology import Topology, TopologyError

LOG = logging.getLogger(__name__)
RUN_DIR = Path(os.environ.get("INA_RUN_DIR", ".run"))


def _state_file(topology: Topology) -> Path:
    return RUN_DIR / f"{topology.name}.json"


def _pid_file(topology: Topology) -> Path:
    return RUN_DIR / f"{topology.name}.pid"


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _run(args: argparse.Namespace, topology: Topology) -> int:
    from ina.lab import Lab, LabOptions

    signal.signal(signal.SIGTERM, _terminate)  # PID 1 ignores it unless handled
    options = LabOptions(build_dir=args.build, log_dir=args.logs, pcap_dir=args.pcap)
    state = _state_file(topology)
    with Lab(topology, options) as lab:
        lab.init_switches_sync()
        RUN_DIR.mkdir(exist_ok=True)
        # PIDs as the sandbox sees them; `inalab exec/host` map them to the machine's.
        state.write_text(json.dumps({h: lab.host(h).pid for h in topology.hosts}))
        try:
            print(f"{topology.name}: {len(topology.switches)} BMv2 switches and "
                  f"{len(topology.hosts)} hosts up; pipeline and routes installed.")
            print(f"From another terminal: inalab exec -t {args.topology} -- inactl "
                  f"-t {args.topology} deploy <job.yaml>")
            if args.no_cli:
                signal.pause()
            else:
                from mininet.cli import CLI

                CLI(lab.net)
        finally:
            state.unlink(missing_ok=True)
    return 0


def _enter(args: argparse.Namespace, topology: Topology, host: str | None) -> int:
    state, pidfile = _state_file(topology), _pid_file(topology)
    if not state.exists() or not pidfile.exists():
        print(f"inalab: no lab of {topology.name} is running (start one with inalab run)",
              file=sys.stderr)
        return 2
    hosts = json.loads(state.read_text())
    if host is not None and host not in hosts:
        print(f"inalab: {host} is not a host of {topology.name}", file=sys.stderr)
        return 2
    if not args.command:
        print("inalab: give a command after --", file=sys.stderr)
        return 2
    init = sandbox.init_pid(int(pidfile.read_text()))
    target = init if host is None else sandbox.outer_pid(init, hosts[host])
    os.execvp("nsenter", ["nsenter", "--target", str(target), "--net", "--", *args.command])


def _demo(args: argparse.Namespace, topology: Topology) -> int:
    from ina.demo import run_on_bmv2, run_on_model
    from ina.lab import missing_tools

    job = validate_job(JobSpec.load(args.job), topology)
    if args.model:
        reason = "--model was given"
    else:
        problems = missing_tools()
        build = [str(p) for p in (args.build / "ina.json", args.build / "ina.p4info.txtpb")
                 if not p.exists()]
        if build:
            problems.append(f"{', '.join(build)} missing (make build needs p4c-bm2-ss"
                            + ("" if shutil.which("p4c-bm2-ss") else ", which is not installed")
                            + ")")
        reason = "; ".join(problems)
    if reason:
        print(f"Running on the reference model (pure Python), not BMv2: {reason}.")
        ok = run_on_model(topology, job, args.size, args.seed)
    elif not sandbox.inside():
        return sandbox.reexec()
    else:
        print("Running on Mininet + BMv2 (simple_switch_grpc), in private namespaces.")
        ok = run_on_bmv2(args.topology, args.job, args.size, args.seed, args.build, args.logs)
    print("\nAllReduce " + ("correct at every worker." if ok else "FAILED."))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="inalab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-t", "--topology", required=True, type=Path)
    p.add_argument("--build", type=Path, default=Path(os.environ.get("INA_BUILD_DIR", "build")),
                   help="directory with ina.json and ina.p4info.txtpb (default: %(default)s)")
    p.add_argument("--logs", type=Path, help="write BMv2 logs here (slows the switches)")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="start the lab and open the Mininet CLI")
    r.add_argument("--pcap", type=Path, help="write per-port pcaps here")
    r.add_argument("--no-cli", action="store_true", help="no CLI; run until killed")
    e = sub.add_parser("exec", help="run a command in the running lab's network")
    e.add_argument("command", nargs=argparse.REMAINDER)
    h = sub.add_parser("host", help="run a command on a host of the running lab")
    h.add_argument("host")
    h.add_argument("command", nargs=argparse.REMAINDER)
    d = sub.add_parser("demo", help="deploy a job, run its workers, check the results")
    d.add_argument("--job", required=True, type=Path)
    d.add_argument("--size", type=int, default=1000, help="values per worker")
    d.add_argument("--seed", type=int, default=1)
    d.add_argument("--model", action="store_true", help="use the reference model even with BMv2")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    for attr in ("command",):
        if getattr(args, attr, None) and args.command[0] == "--":
            args.command = args.command[1:]
    try:
        topology = Topology.load(args.topology)
        if args.cmd == "run":
            if not sandbox.inside():
                reason = sandbox.why_not_available()
                if reason:
                    print(f"inalab: {reason}", file=sys.stderr)
                    return 2
                return sandbox.reexec(pidfile=_pid_file(topology))
            return _run(args, topology)
        if args.cmd == "demo":
            return _demo(args, topology)
        return _enter(args, topology, args.host if args.cmd == "host" else None)
    except (TopologyError, JobError) as exc:
        print(f"inalab: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
