# PYTHON_ARGCOMPLETE_OK
"""inalab: run a topology on Mininet + BMv2 in private namespaces, and the demo.

    inalab -t topologies/figure1.yaml run            # Mininet CLI, switches ready
    inalab -t topologies/figure1.yaml exec -- inactl -t topologies/figure1.yaml status
    inalab -t topologies/figure1.yaml host w1 -- ping -c1 10.0.0.8
    inalab -t topologies/figure1.yaml ranks --job jobs/figure1-sum.yaml -- \
        .venv/bin/python examples/train.py           # a rank per worker, on its host
    inalab -t topologies/figure1.yaml demo --job jobs/figure1-sum.yaml
    inalab -t topologies/leaf-spine-2x4.yaml fail switch spine1      # or: fail link leaf1 spine1
    inalab -t topologies/leaf-spine-2x4.yaml recover switch spine1

-t can be left out with INA_TOPOLOGY=FILE in the environment (``exec`` and ``host``
pass the environment on: the commands they run see it too).

``run`` records the sandbox it made in .run/<topology>.pid and, once the lab is
up, its hosts in .run/<topology>.json, so that ``exec`` (the lab's network, where
the switches' gRPC ports are) and ``host`` (one host's network) can reach them
from another terminal; a second ``run`` of the same topology is refused while
the first runs. ``run`` and ``demo`` end every process they started on
SIGTERM, SIGINT or SIGHUP, and when their parent dies (in the Mininet CLI, Ctrl-C
interrupts the command on a host, as in Mininet: leave with ``exit``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from ina.cli import common
from ina.control.vat_planner import resolve
from ina.errors import JobError, UsageError
from ina.lab import ranks, sandbox
from ina.lab.labstate import LabRecord, SandboxProcess
from ina.spec.job import JobSpec, check_names
from ina.spec.topology import Topology

LOG = logging.getLogger(__name__)
PROG = "inalab"

def _tell_ready(line: str) -> None:
    """Hand the line to the `inalab` that made this sandbox (see sandbox.run)."""
    fd = os.environ.pop(sandbox.READY_FD_ENV, None)
    if fd is None:
        return
    try:
        os.write(int(fd), (line + "\n").encode())
        os.close(int(fd))
    except (OSError, ValueError) as exc:
        LOG.warning("cannot report that the lab is up: %s", exc)


def _run(args: argparse.Namespace, topology: Topology) -> int:
    """Inside the sandbox: the lab, until a signal (or the CLI's exit) stops it."""
    from ina.lab.mininet import Lab, LabOptions

    # The CLI keeps Mininet's Ctrl-C (interrupt the command running on a host).
    sandbox.stop_on((signal.SIGTERM, signal.SIGHUP) if not args.no_cli
             else (signal.SIGTERM, signal.SIGHUP, signal.SIGINT))
    options = LabOptions(build_dir=args.build, log_dir=args.logs, pcap_dir=args.pcap,
                         run_dir=LabRecord(topology.name).directory, insecure=args.insecure)
    with Lab(topology, options) as lab:
        lab.init_switches_sync()
        # PIDs as the sandbox sees them; `inalab exec/host` map them to the machine's.
        _tell_ready(json.dumps({h: lab.host(h).pid for h in topology.hosts}))
        print(f"{topology.name}: {len(topology.switches)} BMv2 switches and "
              f"{len(topology.hosts)} hosts up; pipeline and routes installed.", flush=True)
        print(f"From another terminal: inalab -t {args.topology} exec -- inactl "
              f"-t {args.topology} deploy --job <job.yaml>", flush=True)
        if lab.jobs_socket is not None:
            print(f"Process groups of programs on the hosts get their jobs from "
                  f"{lab.jobs_socket} (inalab -t {args.topology} ranks --hosts ...)", flush=True)
        if args.no_cli:
            while True:
                signal.pause()
        else:
            from mininet.cli import CLI

            CLI(lab.net)
    return 0


def _start(args: argparse.Namespace, topology: Topology, argv: list[str]) -> int:
    """Outside: start the lab's sandbox, record it, and remove the record when it ends."""
    record = LabRecord(topology.name)
    owned: list[SandboxProcess] = []
    lock = record.lock()  # held until the new sandbox is recorded: no two runs race
    try:
        running = record.running()
        if running is not None:
            raise UsageError(
                f"a lab of {topology.name} is already running (inalab run PID "
                f"{running.owner}, sandbox PID {running.pid}; recorded in "
                f"{record.pid_file}): stop it first (Ctrl-C in its terminal, or "
                f"kill {running.owner})")
        _need_lab_tools(args.build)

        def started(pid: int) -> None:
            try:
                owned.append(SandboxProcess.of(pid, os.getpid()))
                record.claim(owned[0])
            except ProcessLookupError:  # it ended at once; sandbox.run reports how
                pass
            finally:
                lock.release()  # recorded: another run now sees this one

        def ready(line: str) -> None:
            record.publish({str(h): int(p) for h, p in json.loads(line).items()})

        return _in_sandbox(args, argv, on_start=started, on_ready=ready)
    finally:
        lock.release()
        if owned:
            record.release(owned[0])


def _in_sandbox(args: argparse.Namespace, argv: list[str],
                on_start: Callable[[int], None] | None = None,
                on_ready: Callable[[str], None] | None = None) -> int:
    """This command again, in a fresh sandbox (see sandbox.run), until it ends."""
    # What the sandbox runs ends when this process ends, even by its parent's death.
    sandbox.die_with_parent()
    return sandbox.run([sys.executable, "-m", "ina.cli.inalab", "--sandboxed", *argv],
                       keep=_paths(args), on_start=on_start, on_ready=on_ready)


def _paths(args: argparse.Namespace) -> list[Path]:
    """What the command reads or writes: it must stay visible in the sandbox, even
    under /tmp (which the sandbox replaces)."""
    paths = [args.topology, args.build]
    if args.cmd == "run":  # its credentials, for the commands beside it
        record = LabRecord(Topology.load(args.topology).name)
        record.directory.mkdir(parents=True, exist_ok=True)
        paths.append(record.directory)
    for directory in (args.logs, getattr(args, "pcap", None)):  # pcap: only `run` has it
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            paths.append(directory)
    if args.cmd == "demo":
        paths.append(args.job)
    return paths


def _need_lab_tools(build: Path) -> None:
    from ina.lab.mininet import missing_tools

    problems = missing_tools(build)
    if problems:
        raise UsageError("Mininet + BMv2 cannot run here: " + "; ".join(problems))


def _running_lab(topology: Topology) -> tuple[int, dict[str, int]]:
    """The running lab's sandbox PID 1 and its hosts' PIDs (as the sandbox sees them)."""
    record = LabRecord(topology.name)
    with record.lock():
        running = record.running()
    hosts = record.hosts()
    if running is None:
        raise UsageError(f"no lab of {topology.name} is running (start one with inalab run)")
    if not running.comparable():
        raise UsageError(f"the lab of {topology.name} was started in another PID namespace "
                       f"({record.pid_file}): run this command there")
    if hosts is None:
        raise UsageError(f"the lab of {topology.name} is still starting: try again once "
                       "inalab run says it is up")
    return sandbox.init_pid(running.pid), hosts


def _enter(args: argparse.Namespace, topology: Topology, host: str | None) -> int:
    init, hosts = _running_lab(topology)
    if host is not None and host not in hosts:
        raise UsageError(f"{host} is not a host of {topology.name}")
    if not args.command:
        raise UsageError("give a command after --")
    target = init if host is None else sandbox.outer_pid(init, hosts[host])
    os.execvp("nsenter", ["nsenter", "--target", str(target), "--net", "--", *args.command])


def _fault(args: argparse.Namespace, topology: Topology) -> int:
    """``fail`` or ``recover`` a switch or link of the running lab."""
    from ina.lab import faults

    fail = args.cmd == "fail"
    element = common.element_of(args)
    common.check_element(topology, element)
    if element[0] == "switch":
        name = element[1]
        init, _ = _running_lab(topology)
        if fail:
            pid = faults.fail_switch(init, topology, name)
            print(f"{name} stopped (process {pid}); tell the controller: inactl down switch "
                  f"{name} (inactl watch finds out by itself)")
        else:
            tls_dir = LabRecord(topology.name).tls_dir
            faults.recover_switch(init, topology, name, tls_dir if tls_dir.is_dir() else None)
            print(f"{name} started again, empty; tell the controller: inactl up switch {name}")
        return 0
    a, b = element[1:]
    init, hosts = _running_lab(topology)
    faults.set_link(init, hosts, topology, a, b, up=not fail)
    verb = "down" if fail else "up"
    print(f"link {a}-{b} {verb}; tell the controller: inactl {verb} link {a} {b}")
    return 0


def _demo(args: argparse.Namespace, topology: Topology, argv: list[str]) -> int:
    from ina.lab.demo import run_on_bmv2, run_on_model
    from ina.lab.mininet import missing_tools

    job = resolve(JobSpec.load(args.job), topology)
    reason = "--model was given" if args.model else "; ".join(missing_tools(args.build))
    if args.fail:
        try:
            common.check_element(topology, common.parse_element(args.fail))
        except UsageError as exc:
            raise UsageError(f"--fail takes 'switch NAME' or 'link A B' of {topology.name}, "
                             f"not {' '.join(args.fail)!r}: {exc}") from exc
    if args.fail and reason:
        raise UsageError(f"--fail needs Mininet + BMv2: {reason}")
    if reason:
        print(f"Running on the reference model (pure Python), not BMv2: {reason}.")
        result = run_on_model(topology, job, args.size, args.seed)
    elif not args.sandboxed:
        return _in_sandbox(args, argv)
    else:
        sandbox.stop_on((signal.SIGTERM, signal.SIGHUP, signal.SIGINT))
        print("Running on Mininet + BMv2 (simple_switch_grpc), in private namespaces.")
        result = run_on_bmv2(args.topology, args.job, args.size, args.seed, args.build,
                             args.logs, args.fail or ())
    print(result.render())
    print("\nAllReduce " + ("correct at every worker." if result.ok else "FAILED."))
    return 0 if result.ok else 1


def parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, __doc__)
    common.add_topology(p)
    common.add_build(p)
    p.add_argument("--logs", type=Path, metavar="DIR",
                   help="write BMv2 logs here, one file per switch (slows the switches) "
                        "(default: no logs)")
    sub = common.commands(p, "cmd")
    r = common.command(sub, "run", "start the lab and open the Mininet CLI")
    r.add_argument("--pcap", type=Path, metavar="DIR",
                   help="write every switch port's frames here, DIR/<switch>-eth<port>_in.pcap "
                        "and _out.pcap (see docs/inspect.md) (default: none written)")
    r.add_argument("--no-cli", action="store_true", help="no CLI; run until killed")
    r.add_argument("--insecure", action="store_true",
                   help="P4Runtime without TLS (and BMv2's Thrift port open): anyone who "
                        "reaches a switch may write to it; commands then need --insecure")
    e = common.command(sub, "exec", "run a command in the running lab's network (where the "
                                    "switches' gRPC ports are)")
    e.add_argument("command", nargs=argparse.REMAINDER,
                   help="the command and its arguments, after --")
    h = common.command(sub, "host", "run a command on a host of the running lab")
    h.add_argument("host", help="the host's name in the topology")
    h.add_argument("command", nargs=argparse.REMAINDER,
                   help="the command and its arguments, after --")
    k = common.command(sub, "ranks", "run a command once per worker of a job (or per host "
                                     "named), rank r on the r-th one's host, with torchrun's "
                                     "environment (torch.distributed, the ina backend)")
    which = k.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", type=Path, metavar="FILE",
                       help="the job file whose workers are the ranks (INA_JOB: the default "
                            "group's job, deployed already)")
    which.add_argument("--hosts", metavar="H1,H2,...",
                       help="the ranks' hosts, in rank order; the lab deploys the default "
                            "group's job as every other group's")
    k.add_argument("--port", type=int, default=ranks.DEFAULT_PORT,
                   help="MASTER_PORT, the store's port on rank 0's host")
    k.add_argument("command", nargs=argparse.REMAINDER,
                   help="the command and its arguments, after --")
    d = common.command(sub, "demo", "deploy a job, run its workers, check the results")
    common.add_job(d)
    d.add_argument("--size", type=int, default=1000, help="values per worker")
    d.add_argument("--seed", type=int, default=1, help="seed of the workers' random arrays")
    d.add_argument("--model", action="store_true", help="use the reference model even with BMv2")
    d.add_argument("--fail", nargs="+", metavar="WHAT",
                   help="BMv2 only: 'switch NAME' or 'link A B', failed once the AllReduce "
                        "is under way and declared to the controller, which repairs the job "
                        "(default: nothing fails)")
    for verb, what in (("fail", "stop a switch's BMv2 process, or take a link down"),
                       ("recover", "start a failed switch again (empty), or bring a link up")):
        common.add_element(common.command(sub, verb, f"in the running lab: {what}"))
    p.add_argument("--sandboxed", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = common.parse(parser(), argv)
    common.setup_logging(args.verbose)
    if getattr(args, "command", None) and args.command[0] == "--":
        args.command = args.command[1:]
    return common.run(PROG, lambda: _main(args, argv))


def _main(args: argparse.Namespace, argv: list[str]) -> int:
    topology = Topology.load(args.topology)
    if args.cmd == "run":
        return _run(args, topology) if args.sandboxed else _start(args, topology, argv)
    if args.cmd == "demo":
        return _demo(args, topology, argv)
    if args.cmd in ("fail", "recover"):
        return _fault(args, topology)
    if args.cmd == "ranks":
        return _ranks(args, topology)
    return _enter(args, topology, args.host if args.cmd == "host" else None)


def _ranks(args: argparse.Namespace, topology: Topology) -> int:
    if args.job is not None:
        spec = JobSpec.load(args.job)
        problems = [p for p in check_names(spec, topology) if not p.startswith("root")]
        if problems:
            raise JobError(problems, str(args.job))
        workers = list(spec.workers)
    else:
        workers = [h for h in args.hosts.split(",") if h]
        unknown = [h for h in workers if h not in topology.hosts]
        if unknown or not workers or len(set(workers)) != len(workers):
            raise UsageError(f"--hosts takes distinct hosts of {topology.name} "
                             f"({', '.join(sorted(topology.hosts))}), not {args.hosts!r}")
    if not args.command:
        raise UsageError("give a command after --")
    init, hosts = _running_lab(topology)
    pids = {w: sandbox.outer_pid(init, hosts[w]) for w in workers}
    service = LabRecord(topology.name).jobs_socket
    return ranks.run_ranks(topology, args.topology, args.job, workers, pids, args.command,
                           args.port, job_service=service if service.exists() else None)


if __name__ == "__main__":
    sys.exit(main())
