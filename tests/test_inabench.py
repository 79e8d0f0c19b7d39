"""inabench's figures without a benchmark run: --from-json reports and draws what an
earlier run wrote (the committed docs/*.json), --json prints the figures as JSON; and
its arguments refused before any lab starts."""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
from pathlib import Path

import pytest

from ina.bench.allreduce import HostRate
from ina.bench.loss import LossFigures, LossRun
from ina.bench.output import stamped
from ina.cli import inabench, inabench_figures
from ina.protocol.constants import INA_VERSION

from inatest import ROOT

DOCS = ROOT / "docs"
PICTURES = ["allreduce", "dataplane", "failover", "train", "congestion", "loss", "accuracy"]
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib not installed: pip install -e '.[bench]'")


@needs_matplotlib
@pytest.mark.parametrize("name", PICTURES)
def test_from_json_draws_the_committed_figures_again(name: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / f"{name}.png"
    assert inabench.main([name, "--from-json", str(DOCS / f"{name}.json"), "--png",
                          str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    assert capsys.readouterr().out.strip()  # the text report of those figures


@pytest.mark.parametrize("name", PICTURES)
def test_json_prints_the_figures_it_read(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    figures = DOCS / f"{name}.json"
    assert inabench.main([name, "--from-json", str(figures), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(figures.read_text())


def test_loss_from_json_reports_the_committed_figures(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert inabench.main(["loss", "--from-json", str(DOCS / "loss.json")]) == 0
    out = capsys.readouterr().out
    assert "INA AllReduce of 262144 values per worker" in out and "5%" in out


def test_the_loss_report_names_the_busiest_link_and_the_marks() -> None:
    lossless = LossRun(0.0, 2.0, 500.0, 1.0, 0, 0, [2.0], 4.0, marked=7, busiest=1_160_000,
                       busiest_at="s2 port 1 received")
    lossy = dataclasses.replace(lossless, loss=0.01, marked=9, busiest_at="s2 port 1 sent")
    out = LossFigures([lossless, lossy]).render()
    assert "1.16 MB" in out and "0%: s2 port 1 received; 1%: s2 port 1 sent" in out


def _loss_runs(rate: float | None, of_lossless: float) -> list[LossRun]:
    lossless = LossRun(0.0, 2.0, 500.0, 1.0, 0, 0, [2.0], rate)
    return [lossless, dataclasses.replace(lossless, loss=0.01, seconds=2.0 / of_lossless,
                                          of_lossless=of_lossless)]


def test_the_loss_goal_is_judged_in_each_regime_on_its_own_lossless_run() -> None:
    out = LossFigures([*_loss_runs(None, 0.96), *_loss_runs(4.0, 0.9)], "BMv2 x").render()
    assert ("[    pass    ] figure1, links unlimited: 1% loss per link: >= 95% of lossless: "
            "96% (2.08 s against 2.00 s)") in out
    assert "[    MISS    ] figure1, links at 4 Mbit/s: 1% loss per link: >= 95% of lossless: " \
        "90% (2.22 s against 2.00 s)" in out
    assert "BMv2: BMv2 x." in out


def test_the_loss_goal_is_not_measured_without_a_run_at_1_percent() -> None:
    lossless, _ = _loss_runs(None, 1.0)
    at_5 = dataclasses.replace(lossless, loss=0.05, of_lossless=0.5)
    out = LossFigures([lossless, at_5], "BMv2 x").render()
    assert "[not measured] figure1, links unlimited: 1% loss per link: >= 95% of lossless: " \
        "1% loss: not run" in out


def test_the_performance_builds_figures_name_that_build(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert inabench.main(["collectives", "--from-json",
                          str(DOCS / "collectives-bmv2-perf.json")]) == 0
    assert "logging macros off, event logger off" in capsys.readouterr().out


def test_figures_of_another_benchmark_are_refused_with_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert inabench.main(["failover", "--from-json", str(DOCS / "loss.json")]) == 2
    assert "does not hold figures of inabench failover" in capsys.readouterr().err


def test_every_benchmark_that_measures_figures_reads_them_back() -> None:
    """The figures a benchmark measures are reported through the reader --from-json
    uses: each has one."""
    assert set(inabench_figures.FIGURES) == set(inabench.MEASURE)


def test_the_host_rate_reports_the_workers_cpu_time_per_packet_when_measured(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = json.loads((DOCS / "allreduce.json").read_text())
    doc["host"] = {"packets_per_s": 50000.0, "values_per_s": 12800000.0,
                   "cpu_us_per_packet": 12.5}
    figures = tmp_path / "allreduce.json"
    figures.write_text(json.dumps(doc))
    assert inabench.main(["allreduce", "--from-json", str(figures)]) == 0
    assert "50,000 packets/s, 12,800,000 values/s, 12.5 us of the worker's CPU per packet" \
        in capsys.readouterr().out
    assert inabench.main(["allreduce", "--from-json", str(figures), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc


def test_the_host_goal_names_the_rate_the_kernel_alone_allows() -> None:
    goal = HostRate(80_000.0, 25_600_000.0, 12.5, 5.0).goal()
    assert not goal.passed
    assert goal.line() == (
        "  [    MISS    ] host side: one worker against a loopback reflector >= 500,000 "
        "packets/s: 80,000 packets/s; the kernel alone spent 5.0 us a packet in the worker's "
        "socket calls: at most 200,000 packets/s on a core, whatever the worker's own code")
    assert HostRate(600_000.0, 1.0).goal().passed


@pytest.mark.parametrize("command", ["allreduce", "loss", "train", "collectives", "congestion"])
@pytest.mark.parametrize("rate,says", [("0", "is not a link rate"),
                                       ("-4", "is not a link rate"),
                                       ("fast", "not a number of Mbit/s")])
def test_a_rate_no_link_can_have_exits_2_before_any_lab_starts(
        command: str, rate: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        inabench.main([command, "--rate", rate])
    assert ended.value.code == 2
    assert says in capsys.readouterr().err


def test_figures_measured_now_carry_their_ina_version_and_date() -> None:
    doc = stamped({"bmv2": "simple_switch_grpc 1.15.5"})
    assert doc["measured"]["ina_version"] == INA_VERSION
    assert doc["measured"]["date"] == datetime.datetime.now(datetime.UTC).date().isoformat()
    earlier = {"measured": {"ina_version": 3, "date": "2026-11-01"}}
    assert stamped(earlier) == earlier  # read back, not measured again


@pytest.mark.parametrize("name", ["allreduce", "loss", "congestion"])
def test_stamped_figures_read_back_say_when_they_were_measured(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((DOCS / f"{name}.json").read_text())
    doc["measured"] = {"ina_version": 6, "date": "2026-11-27"}
    figures = tmp_path / f"{name}.json"
    figures.write_text(json.dumps(doc))
    assert inabench.main([name, "--from-json", str(figures)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"Measured: INA version 6, 2026-11-27, BMv2 {doc['bmv2']}"
