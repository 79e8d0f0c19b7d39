"""Private namespaces for emulations.

Mininet and BMv2 must never touch the machine's own network, processes or
/tmp: everything runs under ``unshare --net --pid --mount --fork --mount-proc``
with a fresh tmpfs on /tmp and ``lo`` up. The process that starts there is PID 1
of its namespace, so whatever it starts dies with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ENV_MARK = "INA_SANDBOX_HOST_NETNS"


def _netns() -> str:
    return os.readlink("/proc/self/ns/net")


def inside() -> bool:
    """True in a sandbox made by ``command``: the network namespace is not the one
    the sandbox was made from, and PID 1 of this PID namespace is the sandbox's own."""
    outer = os.environ.get(ENV_MARK)
    if outer is None or outer == _netns():
        return False
    try:
        init_env = Path("/proc/1/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return (ENV_MARK + "=" + outer).encode() in init_env


def why_not_available() -> str | None:
    """None if this machine can make the sandbox, else the reason."""
    if os.geteuid() != 0:
        return "private network namespaces need root (run as root, e.g. in the CI container)"
    for tool in ("unshare", "mount", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} not found (Debian: apt-get install util-linux iproute2)"
    return None


def command(argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` inside a fresh sandbox."""
    script = 'mount -t tmpfs -o mode=1777 ina-tmp /tmp && ip link set lo up && exec "$@"'
    return ["unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc",
            "--propagation", "private", "--", "/bin/sh", "-c", script, "ina-sandbox", *argv]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env[ENV_MARK] = _netns()
    return env


def reexec(argv: Sequence[str] | None = None) -> int:
    """Run this program again inside a sandbox and return its exit code."""
    args = list(argv) if argv is not None else [sys.executable, *sys.argv]
    return subprocess.call(command(args), env=environment())


def main(argv: Sequence[str] | None = None) -> int:
    """python -m ina.sandbox [--if-available] -- CMD...: run CMD in a fresh sandbox.

    With --if-available, run CMD directly when the sandbox cannot be made (not
    root, no unshare); tests that need it then skip and say why.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    optional = "--if-available" in args
    if optional:
        args.remove("--if-available")
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m ina.sandbox [--if-available] -- CMD...", file=sys.stderr)
        return 2
    reason = why_not_available()
    if reason is None and not inside():
        return reexec(args)
    if reason is not None and not optional:
        print(f"ina.sandbox: {reason}", file=sys.stderr)
        return 2
    if reason is not None:
        print(f"ina.sandbox: running without private namespaces ({reason}); "
              "emulation tests will skip", file=sys.stderr)
    return subprocess.call(args)


if __name__ == "__main__":
    sys.exit(main())
