"""How the benchmarks name the BMv2 build they ran on (ina.lab.mininet.bmv2_build):
the switch binary first on PATH, and the build options of the config.h installed
with it, not another build's."""

from __future__ import annotations

from pathlib import Path

import pytest

from ina.lab.mininet import SWITCH_BINARY, bmv2_build


def _install(prefix: Path, config_h: str) -> None:
    (prefix / "bin").mkdir(parents=True)
    binary = prefix / "bin" / SWITCH_BINARY
    binary.write_text("#!/bin/sh\necho 1.15.5-test\n")
    binary.chmod(0o755)
    (prefix / "include" / "bm").mkdir(parents=True)
    (prefix / "include" / "bm" / "config.h").write_text(config_h)


def test_a_performance_build_first_on_path_is_named_with_its_own_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(tmp_path / "perf", "/* configured with --disable-logging-macros */\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'perf' / 'bin'}:/usr/bin:/bin")
    named = bmv2_build()
    assert named.startswith(f"{SWITCH_BINARY} 1.15.5-test ({tmp_path / 'perf' / 'bin'}")
    assert named.endswith("logging macros off, event logger off")


def test_a_default_build_is_named_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    _install(tmp_path / "default", "#define BM_LOG_DEBUG_ON 1\n#define BM_ELOG_ON 1\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'default' / 'bin'}:/usr/bin:/bin")
    assert bmv2_build().endswith("default build: logging macros and event logger compiled in")
