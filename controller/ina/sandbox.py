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
    """The command line that runs ``argv`` inside a fresh sandbox.

    A working directory under /tmp (a checkout there, say) would vanish under the
    new tmpfs; it is bound back at its path from the shell's own cwd, which still
    refers to the original directory.
    """
    script = (
        'd=$(pwd -P); mount -t tmpfs -o mode=1777 ina-tmp /tmp'
        ' && case "$d" in /tmp/*) mkdir -p "$d"'
        ' && mount --no-canonicalize --bind /proc/self/cwd "$d" && cd "$d";; esac'
        ' && ip link set dev lo up && exec "$@"'
    )
    return ["unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc",
            "--propagation", "private", "--", "/bin/sh", "-c", script, "ina-sandbox", *argv]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env[ENV_MARK] = _netns()
    return env


def reexec(argv: Sequence[str] | None = None, pidfile: Path | None = None) -> int:
    """Run this program again inside a sandbox and return its exit code.

    With ``pidfile``, the PID (as this machine sees it) of the sandbox's first
    process is written there while it runs: ``enter_command`` needs it.
    """
    args = list(argv) if argv is not None else [sys.executable, *sys.argv]
    proc = subprocess.Popen(command(args), env=environment())
    try:
        if pidfile is not None:
            pidfile.parent.mkdir(parents=True, exist_ok=True)
            pidfile.write_text(str(proc.pid))
        return proc.wait()
    except KeyboardInterrupt:
        return proc.wait()
    finally:
        if pidfile is not None:
            pidfile.unlink(missing_ok=True)


def init_pid(unshare_pid: int) -> int:
    """PID 1 of the sandbox that ``unshare`` process made, as this machine sees it."""
    children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    if not children:
        raise ProcessLookupError(f"sandbox {unshare_pid} has no process")
    return int(children[0])


def outer_pid(sandbox_init: int, inner: int) -> int:
    """The PID this machine sees for PID ``inner`` of the sandbox."""
    pid_ns = os.readlink(f"/proc/{sandbox_init}/ns/pid")
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = next(line.split()[1:] for line in status.read_text().splitlines()
                          if line.startswith("NSpid:"))
            if (len(fields) >= 2 and int(fields[-1]) == inner
                    and os.readlink(status.parent / "ns" / "pid") == pid_ns):
                return int(fields[0])
        except (OSError, StopIteration):
            continue
    raise ProcessLookupError(f"no process {inner} in sandbox {sandbox_init}")


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
