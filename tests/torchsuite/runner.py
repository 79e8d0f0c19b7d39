"""Runs tests of PyTorch's distributed suite (``suite.py``) in long-lived rank processes.

PyTorch's own harness (``MultiProcessTestCase``) starts fresh rank processes for every
test, and each imports the suite's module: 6 to 9 s a test here, two hours for the
suite at two world sizes and two backends. This runner starts ``WORLD_SIZE`` rank
processes once (``python -m torchsuite.runner rank``) and has them run the tests one
after another, each as PyTorch's harness runs it in a rank (``TestDistBackend._run``:
``init_process_group`` on a file store of the test's own, a barrier, the test, a
barrier, ``destroy_process_group``), with the test's own temporary directory and
``INIT_METHOD``; a test that hangs past its limit gets its ranks killed and started
again. On ``ina`` the ranks share one embedded network (``inanet``), which deploys each
test's process groups as jobs and removes them when they end.

    python -m torchsuite.runner run --backend ina --world 2 [-k PATTERN] [--json-out F]

prints one line per test (passed, skipped, failed: the first rank's error) and the
counts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ina.bench.hostprocess import HostProcess

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: Seconds a test may take before its ranks are killed (the suite's own timeouts are
#: 60 s for most process groups).
TEST_LIMIT = 180.0
OUTCOMES = ("passed", "skipped", "failed")


@dataclass(frozen=True)
class Outcome:
    """One test at every rank: passed, skipped (why) or failed (the first error)."""

    test: str
    outcome: str
    detail: str = ""
    seconds: float = 0.0


def test_names(pattern: str | None = None) -> list[str]:
    """The suite's tests (``TestDistBackendWithSpawn``), those matching ``pattern``."""
    from torchsuite.suite import TestDistBackendWithSpawn

    names = sorted(n for n in dir(TestDistBackendWithSpawn) if n.startswith("test_"))
    return [n for n in names if pattern is None or re.search(pattern, n)]


# --- inside a rank ---------------------------------------------------------------------


def _rank_loop(rank: int) -> None:
    """Run the tests the runner names on stdin, one JSON line each, answering each."""
    import unittest

    import torch.distributed as dist
    from torch.testing._internal import common_distributed, common_utils
    from torch.testing._internal.distributed import distributed_test

    from torchsuite.suite import TestDistBackendWithSpawn

    skips = {s.exit_code: s.message for s in common_distributed.TEST_SKIPS.values()}
    world = int(os.environ["WORLD_SIZE"])
    for line in sys.stdin:
        request = json.loads(line)
        name, temp = request["test"], request["temp"]
        os.environ["TEMP_DIR"] = temp
        init = f"file://{temp}/init_dir/shared_init_file"
        os.environ["INIT_METHOD"] = distributed_test.INIT_METHOD = init
        distributed_test.Barrier.barrier_id = 0
        outcome, detail = "passed", ""
        method = getattr(TestDistBackendWithSpawn, name)
        if getattr(method, "__unittest_skip__", False):  # unittest skips it unrun
            print(json.dumps({"outcome": "skipped",
                              "detail": getattr(method, "__unittest_skip_why__", "")}),
                  flush=True)
            continue
        common_utils.set_rng_seed()  # type: ignore[no-untyped-call]
        try:
            case = TestDistBackendWithSpawn(name)
            case.rank, case.file_name = rank, request["store"]
            timeout = distributed_test.CUSTOM_PG_TIMEOUT.get(
                name, distributed_test.default_pg_timeout)
            from datetime import timedelta

            dist.init_process_group(init_method=f"file://{request['store']}",
                                    backend=distributed_test.BACKEND, world_size=world,
                                    rank=rank, timeout=timedelta(seconds=timeout))
            case._barrier()  # type: ignore[no-untyped-call]
            getattr(case, name)()
            case._barrier()  # type: ignore[no-untyped-call]
        except unittest.SkipTest as exc:
            outcome, detail = "skipped", str(exc)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
            if code in skips:
                outcome, detail = "skipped", skips[code]
            elif code != 0:
                outcome, detail = "failed", f"exit {code}"
        except BaseException:  # noqa: BLE001 (the test's failure, reported)
            outcome, detail = "failed", traceback.format_exc()[-4000:]
        finally:
            with contextlib.suppress(Exception):
                if dist.is_initialized():
                    dist.destroy_process_group()
        print(json.dumps({"outcome": outcome, "detail": detail}), flush=True)


# --- the runner ------------------------------------------------------------------------


def _in_tests(argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """A rank started in tests/, where ``torchsuite`` is importable."""
    return subprocess.Popen(argv, cwd=ROOT / "tests", **popen)


class Ranks:
    """``world`` rank processes (HostProcess), started once, restarted after a test
    that hangs or kills one."""

    def __init__(self, world: int, env: dict[str, str]):
        self.world, self.env = world, env
        self.procs: list[HostProcess] = []
        self.start()

    def start(self) -> None:
        self.procs = [HostProcess(f"rank {r}", [sys.executable, "-m", "torchsuite.runner",
                                                "rank", str(r)],
                                  env={**self.env, "RANK": str(r)}, spawn=_in_tests)
                      for r in range(self.world)]

    def stop(self) -> None:
        for p in self.procs:
            p.kill()

    def run(self, name: str, limit: float) -> Outcome:
        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="ina-suite-test-") as temp:
            for sub in ("barrier", "test_dir", "init_dir"):
                os.mkdir(os.path.join(temp, sub))
            request = {"test": name, "temp": temp, "store": os.path.join(temp, "store")}
            for p in self.procs:
                p.send(request)
            answers = self._answers(began + limit)
        seconds = time.monotonic() - began
        if answers is None:
            self.stop()
            self.start()
            return Outcome(name, "failed", f"hung: no answer within {limit:g}s", seconds)
        failed = [a["detail"] for a in answers if a["outcome"] == "failed"]
        if failed:
            return Outcome(name, "failed", failed[0], seconds)
        if all(a["outcome"] == "skipped" for a in answers):
            return Outcome(name, "skipped", answers[0]["detail"], seconds)
        return Outcome(name, "passed", "", seconds)

    def _answers(self, deadline: float) -> list[dict[str, Any]] | None:
        """Every rank's answer by ``deadline`` (None: one did not answer); a rank that
        died answers "failed", and the ranks are started again."""
        answers = []
        for r, p in enumerate(self.procs):
            line = p.next_line(deadline - time.monotonic())
            if line is None:
                return None
            answers.append(json.loads(line) if line else
                           {"outcome": "failed", "detail": f"rank {r} exited"})
        if any(a["detail"].startswith("rank ") and a["detail"].endswith("exited")
               for a in answers):
            self.stop()
            self.start()
        return answers


@contextlib.contextmanager
def network(backend: str) -> Iterator[dict[str, str]]:
    """The environment of the ranks: on ``ina``, an embedded network of Figure 1 that
    every test's groups share."""
    with tempfile.TemporaryDirectory(prefix="ina-suite-") as tmp:
        env = {**os.environ, "INA_SUITE_BACKEND": backend,
               "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"),
                                              os.environ.get("PYTHONPATH", "")]),
               "INIT_METHOD": "file:///dev/null",
               "TEMP_DIR": tmp}  # until each test's own; removed with the network
        if backend != "ina":
            yield env
            return
        from ina.model.embedded import spawn

        topology = ROOT / "topologies" / "figure1.yaml"
        with spawn(topology, []) as net:
            endpoints = Path(tmp) / "endpoints.json"
            endpoints.write_text(net.endpoints.to_json())
            yield {**env, "INA_TOPOLOGY": str(topology), "INA_NETWORK": str(endpoints)}


def run(backend: str, world: int, names: Sequence[str], limit: float = TEST_LIMIT
        ) -> list[Outcome]:
    """Every test of ``names`` on ``backend`` at ``world`` ranks, one after another."""
    outcomes = []
    with network(backend) as env:
        ranks = Ranks(world, {**env, "WORLD_SIZE": str(world)})
        try:
            for name in names:
                outcome = ranks.run(name, limit)
                outcomes.append(outcome)
                print(f"{outcome.outcome:8} {outcome.seconds:6.1f}s {name}", flush=True)
        finally:
            ranks.stop()
    return outcomes


def counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return {o: sum(x.outcome == o for x in outcomes) for o in OUTCOMES}


def main(argv: list[str]) -> int:
    if argv[:1] == ["rank"]:
        _rank_loop(int(argv[1]))
        return 0
    p = argparse.ArgumentParser(prog="python -m torchsuite.runner")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--backend", choices=["ina", "gloo"], required=True)
    r.add_argument("--world", type=int, default=2)
    r.add_argument("-k", dest="pattern", help="only the tests whose name matches (regex)")
    r.add_argument("--tests", type=Path, help="a file of test names, one a line")
    r.add_argument("--limit", type=float, default=TEST_LIMIT)
    r.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)
    names = (args.tests.read_text().split() if args.tests else test_names(args.pattern))
    outcomes = run(args.backend, args.world, names, args.limit)
    print(json.dumps(counts(outcomes)))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
