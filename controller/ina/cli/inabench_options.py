"""inabench: benchmarks on Mininet + BMv2, each measured side by side in one run.

    inabench allreduce [--case figure1 --case fat-tree] [--rate 4] [--json-out F] [--png F]
    inabench loss [--losses 0 0.01 0.05] [--size 65536] [--regimes cpu,link] [--rate 4]
        [--json-out F] [--png F]
    inabench deploy
    inabench host [--rounds 5] [--json-out F] [--png F]
    inabench dataplane [--json-out F] [--png F]
    inabench failover [--case leaf-spine --case fat-tree] [--json-out F] [--png F]
    inabench failover --from-json docs/failover.json --png docs/failover.png   # redraw only
    inabench train [--case figure1 --case fat-tree --case fat-tree-hsdp] [--steps 200] [--rate R]
        [--json-out F] [--png F]
    inabench soak [--case leaf-spine --case fat-tree] [--minutes 2] [--seed 1] [--json-out F]
    inabench collectives [--case figure1 --case fat-tree] [--rate R] [--size N] [--json-out F]
        [--png F]
    inabench congestion [--rate 4] [--seconds 60] [--alone 20] [--tcp cubic] [--json-out F]
                        [--png F]
    inabench accuracy [--ranks 2 4] [--json-out F] [--png F]

Each command is a module of ina.bench: allreduce, loss, deploy; host: one worker
against a compiled reflector beside a plain C loop, the machine's limit (no BMv2);
dataplane: what one BMv2 switch running the program does per second; failover: a
VAT switch stopped mid-AllReduce, detected and repaired; train: DDP and HSDP training
with the ina backend against gloo; soak: a chaos soak, a training-like loop of AllReduce
calls while switches and links fail and come back, a member misbehaves and an
outsider sends garbage; collectives: every collective through the switches against
gloo's and the ring on hosts, and float16 AllReduce in 16- and 32-bit elements;
congestion: INA and a TCP bulk flow sharing a bottleneck, then INA alone; accuracy:
16-bit float sums through the ina backend against gloo's and the exact sum (on the
embedded network: no BMv2 needed).
--json prints the figures as JSON instead of text, --json-out FILE writes them,
and --from-json FILE reports (and draws) the figures of an earlier run without
measuring anything (no BMv2 needed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ina.bench.onlab import CASES, COLLECTIVE_SIZE_QUANTUM, COLLECTIVE_SIZES, REGIMES
from ina.cli import common
from ina.errors import UsageError
from ina.spec.topology import check_link_rate

PROG = "inabench"


# --- Options -------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, __doc__)
    common.add_build(p)
    sub = common.commands(p, "cmd")
    for add in (_allreduce_options, _loss_options, _deploy_options, _host_options,
                _dataplane_options, _failover_options, _train_options, _soak_options,
                _collectives_options, _congestion_options, _accuracy_options):
        add(sub)
    return p


def _outputs(p: argparse.ArgumentParser, picture: str | None) -> None:
    """The options of a benchmark with figures: --json, --json-out, --from-json and,
    if it draws ``picture``, --png."""
    common.add_json(p, "the figures")
    p.add_argument("--json-out", type=Path, metavar="FILE",
                   help="write the figures here as JSON (default: not written)")
    if picture is not None:
        p.add_argument("--png", type=Path, metavar="FILE",
                       help=f"draw {picture} here (default: not drawn)")
    p.add_argument("--from-json", type=Path, metavar="FILE",
                   help="measure nothing: report"
                        + (" and draw" if picture is not None else "")
                        + " the figures in FILE (written by --json-out; no BMv2 needed)")


def _cases(p: argparse.ArgumentParser, cases: list[str], default: str) -> None:
    p.add_argument("--case", action="append", choices=cases,
                   help=f"a case to run; repeat the option for {default}")


def _regime_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--regimes", default="cpu,link",
                   help="which regimes, comma-separated: cpu (links unlimited), link "
                        "(links limited)")


def _case_rate_option(p: argparse.ArgumentParser) -> None:
    """--rate of a benchmark on Figure 1 and the fat-tree, by default each case's own."""
    p.add_argument("--rate", type=_link_rate, metavar="MBIT",
                   help="Mbit/s of every link in the link-bound regime (default: the "
                        "case's, as inabench allreduce: " + ", ".join(
                            f"{name} {CASES[name].rate_mbit:g}"
                            for name in ("figure1", "fat-tree")) + ")")


def _allreduce_options(sub: common.SubParsers) -> None:
    a = common.command(sub, "allreduce", "INA vs parameter server (PS) vs ring, with links "
                                         "unlimited (CPU-bound) and limited (link-bound)")
    _cases(a, sorted(CASES), "several (default: every case)")
    a.add_argument("--size", type=int, help="values per worker (default: the case's)")
    a.add_argument("--rate", type=_link_rate, metavar="MBIT",
                   help="Mbit/s of every link in the link-bound regime (default: the "
                        "case's, " + ", ".join(f"{c.name} {c.rate_mbit:g}"
                                               for c in CASES.values()) + ")")
    _regime_option(a)
    _outputs(a, "values per second and bytes per value")


def _loss_options(sub: common.SubParsers) -> None:
    lo = common.command(sub, "loss", "INA under loss on every link, against no loss")
    lo.add_argument("--losses", type=float, nargs="+", default=[0.0, 0.01, 0.05],
                    metavar="P", help="loss rates per link and direction, 0 to 1")
    lo.add_argument("--size", type=int, default=262144, help="values per worker")
    lo.add_argument("--rounds", type=int, default=3, help="AllReduces per loss rate")
    lo.add_argument("--rate", type=_link_rate, default=CASES["figure1"].rate_mbit,
                    metavar="MBIT", help="Mbit/s of every link in the link-bound regime "
                                         "(default: %(default)g)")
    _regime_option(lo)
    _outputs(lo, "the rate under each loss against the lossless one, and the busiest link")


def _deploy_options(sub: common.SubParsers) -> None:
    d = common.command(sub, "deploy", "deploy time, all switches at once vs one by one")
    d.add_argument("--repeat", type=int, default=5, metavar="N",
                   help="deploys of each kind (the median is reported)")


def _host_options(sub: common.SubParsers) -> None:
    h = common.command(sub, "host", "one worker against a loopback reflector beside a plain "
                                    "C loop, the machine's limit (no switch, no BMv2)")
    h.add_argument("--rounds", type=_count, default=5, metavar="N",
                   help="rounds of every measurement, alternating (default: 5)")
    _outputs(h, "the rates and the CPU per packet")


def _dataplane_options(sub: common.SubParsers) -> None:
    dp = common.command(sub, "dataplane", "one switch: aggregation vs plain forwarding")
    dp.add_argument("--rounds", type=int, default=3,
                    help="rounds over every path (the median is reported)")
    dp.add_argument("--seconds", type=float, default=4.0, help="per path and round")
    dp.add_argument("--window", type=int, default=16, help="packets in flight")
    _outputs(dp, "packets per second per path")


def _failover_options(sub: common.SubParsers) -> None:
    f = common.command(sub, "failover", "a VAT switch stopped mid-AllReduce: detection, "
                                        "repair, first new result, slowdown")
    _cases(f, ["leaf-spine", "fat-tree"], "both (default: both)")
    _outputs(f, "the results received over time")


def _train_options(sub: common.SubParsers) -> None:
    t = common.command(sub, "train", "DDP and HSDP training through the switches against "
                                     "gloo, links unlimited and limited (needs the train "
                                     "extra)")
    _cases(t, ["figure1", "fat-tree", "fat-tree-hsdp"],
           "several (default: all three; fat-tree-hsdp: fully_shard on 2 replicas of 4 shards)")
    t.add_argument("--steps", type=int, default=200, help="training steps per run")
    t.add_argument("--hidden", type=int, default=128,
                   help="width of the MLP's two hidden layers")
    t.add_argument("--pairs", type=_count, default=1, metavar="N",
                   help="runs of each backend per regime, alternating (ina gloo, gloo ina, "
                        "...): each pair's ratio is printed, the goals take the median "
                        "pair's")
    _case_rate_option(t)
    _regime_option(t)
    t.add_argument("--bucket-mib", type=int, default=25,
                   help="on Figure 1, also one float32 bucket of this many MiB (DDP's "
                        "default bucket size), links unlimited; 0: none")
    _outputs(t, "the training losses against steps and seconds")


def _congestion_options(sub: common.SubParsers) -> None:
    from ina.bench.congestion import Settings

    c = common.command(sub, "congestion", "INA and a TCP bulk flow (iperf3) on one bottleneck, "
                                          "then INA alone")
    c.add_argument("--rate", type=_link_rate, default=Settings.rate_mbit, metavar="MBIT",
                   help="Mbit/s of every link")
    c.add_argument("--seconds", type=float, default=Settings.shared,
                   help="seconds both flows run")
    c.add_argument("--alone", type=float, default=Settings.alone,
                   help="seconds INA runs alone after")
    c.add_argument("--tcp", default=Settings.tcp_algorithm, metavar="ALGORITHM",
                   help="the TCP flow's congestion control (iperf3 -C; see "
                        "/proc/sys/net/ipv4/tcp_available_congestion_control)")
    _outputs(c, "each flow's rate, INA's window and the queue over time")


def _soak_options(sub: common.SubParsers) -> None:
    so = common.command(sub, "soak", "a chaos soak: AllReduce calls while switches and links "
                                     "fail and come back, with a misbehaving member and an "
                                     "outsider; wrong, hung and retried calls, what is left")
    _cases(so, ["leaf-spine", "fat-tree"], "both (default: both)")
    so.add_argument("--minutes", type=float, default=2.0,
                    help="minutes of calls per case (default %(default)s)")
    so.add_argument("--calls", type=int, default=1000,
                    help="calls per case at most (default %(default)s)")
    so.add_argument("--seed", type=int, default=1,
                    help="seed of the calls' arrays and of what fails when (default "
                         "%(default)s): the same seed, the same soak")
    _outputs(so, None)


def _collectives_options(sub: common.SubParsers) -> None:
    co = common.command(sub, "collectives", "every collective through the switches against "
                                            "gloo and the ring on hosts, links unlimited and "
                                            "limited; float16 AllReduce in 16 and 32 bits "
                                            "(needs the train extra)")
    _cases(co, ["figure1", "fat-tree"], "both (default: both)")
    co.add_argument("--size", type=_positive, metavar="N",
                    help=f"values S per collective, a multiple of {COLLECTIVE_SIZE_QUANTUM} "
                         "(default: " + ", ".join(f"{name} {size}" for name, size
                                                  in COLLECTIVE_SIZES.items()) + ")")
    _case_rate_option(co)
    _regime_option(co)
    _outputs(co, "values per second and bytes per value of every collective")


def _accuracy_options(sub: common.SubParsers) -> None:
    ac = common.command(sub, "accuracy", "16-bit float sums through the ina backend (32- and "
                                         "16-bit elements) against gloo's and the exact sum, "
                                         "on the embedded network (needs the torch extra)")
    ac.add_argument("--ranks", type=_count, nargs="+", default=[2, 4], metavar="N",
                    help="world sizes (default: 2 4; the embedded network's Figure 1 has "
                         "8 hosts)")
    _outputs(ac, "the relative errors")


def _link_rate(text: str) -> float:
    """A ``--rate``: Mbit/s every link can be given (the topology files' bounds),
    checked before any lab starts."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of Mbit/s: {text!r}") from None
    try:
        return check_link_rate(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    """A size of the collectives benchmark: a positive multiple of
    COLLECTIVE_SIZE_QUANTUM (every case's worker count divides it, and each part is
    whole packets)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0 or value % COLLECTIVE_SIZE_QUANTUM:
        raise argparse.ArgumentTypeError(
            f"{value} is not a positive multiple of {COLLECTIVE_SIZE_QUANTUM}")
    return value


def _count(text: str) -> int:
    """A whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def parse_regimes(text: str) -> tuple[str, ...]:
    """A ``--regimes``: the regimes it names (UsageError for another)."""
    regimes = tuple(x.strip() for x in text.split(","))
    unknown = [r for r in regimes if r not in REGIMES]
    if unknown or not regimes:
        raise UsageError(f"--regimes takes cpu, link or both, not {text!r}")
    return regimes
