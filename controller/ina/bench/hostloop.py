"""hostloop.c, beside this module, built and run: the host benchmark's reflector and
its plain C loop (ina.bench.host; the reflector is also what ina.bench.allreduce's
host rate runs against).

The C file is built once per source, flags and compiler into the user's cache
(``$XDG_CACHE_HOME/ina``, default ``~/.cache/ina``) with ``$CC`` (default cc); the
INA flags it sets come from ina.protocol.constants, their one source.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ina.bench.hostprocess import HostProcess
from ina.errors import LabError, UsageError
from ina.protocol.constants import INA_UDP_PORT, Flag

SOURCE = Path(__file__).with_name("hostloop.c")
FLAG_DEFINES = (f"-DFLAG_SYNC={int(Flag.SYNC)}", f"-DFLAG_REPLY={int(Flag.REPLY)}",
                f"-DFLAG_RESULT={int(Flag.RESULT)}")
CFLAGS = ("-O2", "-Wall", "-Wextra", "-Werror")
#: Where the reflector answers unless told otherwise (a loopback address of its own).
REFLECTOR = "127.0.0.2"


def compiler() -> str:
    """The C compiler (``$CC``, default cc), or UsageError saying how to get one."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        raise UsageError("the host benchmark's reflector and C loop (hostloop.c) need a C "
                         "compiler, and there is none ($CC or cc): apt-get install gcc "
                         "(make setup does)")
    return cc


def compiler_version() -> str:
    cc = compiler()
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout.splitlines() or [cc])[0].strip()


def binary() -> Path:
    """hostloop.c built, once per source, flags and compiler."""
    cc = compiler()
    flags = (*CFLAGS, *FLAG_DEFINES)
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join((cc, *flags)).encode()).hexdigest()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ina"
    built_at = base / f"hostloop-{key[:12]}"
    if built_at.exists():
        return built_at
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=base, prefix=".hostloop-", delete=False) as tmp:
        part = Path(tmp.name)
    built = subprocess.run([cc, *flags, "-o", str(part), str(SOURCE)], capture_output=True,
                           text=True, check=False)
    if built.returncode != 0:
        part.unlink(missing_ok=True)
        raise UsageError(f"building hostloop.c failed: {built.stderr.strip()}")
    part.replace(built_at)  # whole or not at all, whoever builds beside us
    return built_at


@contextlib.contextmanager
def reflector(gap: float = 0.0, address: str = REFLECTOR) -> Iterator[str]:
    """A reflector on ``address`` while the block runs: it answers every INA packet as a
    root would (REPLY to a SYNC, RESULT to a contribution), in batches, or one packet a
    ``gap`` (seconds) if given, as a CPU-bound switch answers. Its address."""
    proc = HostProcess("the reflector", [str(binary()), "reflect", address, str(INA_UDP_PORT),
                                         str(round(gap * 1e6))])
    try:
        proc.ready(b"ready")
        yield address
    finally:
        proc.kill()


def loop(packets: int, size: int, inflight: int, gap: float = 0.0) -> dict[str, Any]:
    """The plain C loop against a reflector (answering one a ``gap`` if given):
    ``packets`` results of ``size``-byte packets, ``inflight`` in flight. Its report:
    packets, seconds, cpu_us_per_packet and kernel_us_per_packet."""
    with reflector(gap) as address:
        out = subprocess.run([str(binary()), "worker", address, str(INA_UDP_PORT),
                              str(packets), str(size), str(inflight)],
                             capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise LabError(f"the C loop failed ({out.returncode}): {out.stderr.strip()}")
    report: dict[str, Any] = json.loads(out.stdout)
    return report
