"""Private namespaces for emulations.

Mininet and BMv2 must never touch the machine's own network, processes or
/tmp: everything runs under ``unshare --net --pid --mount --fork --mount-proc``
with a fresh tmpfs on /tmp and ``lo`` up.

Nothing started there outlives the program that made the sandbox (``run``): the
sandbox's PID 1 (sandbox_init.py) runs the command and, when it exits, the kernel
kills whatever is left in the namespace. ``run`` passes SIGTERM, SIGINT and SIGHUP
on to it; if ``run``'s process dies without doing so (SIGKILL), ``unshare`` dies
with it (PR_SET_PDEATHSIG) and PID 1 learns it from ``unshare --kill-child`` and
from a pipe whose only writer was that process. The CLIs also call
``die_with_parent``, so that their parent's death stops them the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

LOG = logging.getLogger(__name__)
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


#: Seconds the sandbox's command has to stop cleanly after SIGTERM or SIGHUP.
DEFAULT_GRACE = 30.0
#: The command a sandbox was made for finds here the fd to write its ready line to.
READY_FD_ENV = "INA_SANDBOX_READY_FD"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_SI_KERNEL = 0x80  # si_code of a signal the kernel sent: a terminal's, for these
_INIT = Path(__file__).with_name("sandbox_init.py")
_PR_SET_PDEATHSIG = 1


def command(argv: Sequence[str], keep: Sequence[str | Path] = (), lifeline: int = -1,
            grace: float = DEFAULT_GRACE) -> list[str]:
    """The command line that runs ``argv`` inside a fresh sandbox.

    Its PID 1 is ``sandbox_init.py`` (see there), which runs ``argv`` and ends the
    sandbox with it; ``unshare --kill-child=SIGTERM`` makes unshare's death a
    SIGTERM for it, and ``lifeline`` (a pipe's read end, or -1) its writer's death.

    The sandbox has its own /tmp. A working directory under /tmp (a checkout there,
    say) and the paths in ``keep`` that lie under /tmp (a build directory made by
    the tests, say) stay visible: they are bound back at their paths from the
    machine's /tmp, which the shell holds open on fd 9 while it mounts the new one.
    """
    real = (os.path.realpath(p) for p in [os.getcwd(), *keep])
    paths = _outermost(p for p in real if p.startswith("/tmp/"))
    script = (
        'n=$1; shift; d=$(pwd -P); exec 9</tmp'
        ' && mount -t tmpfs -o mode=1777 ina-tmp /tmp || exit 125\n'
        'while [ "$n" -gt 0 ]; do\n'
        '  p=$1; s=/proc/self/fd/9/${p#/tmp/}; shift; n=$((n - 1))\n'
        '  if [ -d "$s" ]; then mkdir -p "$p"; else mkdir -p "${p%/*}" && : >"$p"; fi'
        ' && mount --no-canonicalize --bind "$s" "$p" || exit 125\n'
        'done\n'
        'exec 9<&- && cd "$d" && ip link set dev lo up && exec "$@"'
    )
    init = [sys.executable, "-I", "-S", str(_INIT), str(lifeline), f"{grace:g}", "--"]
    return ["unshare", "--net", "--pid", "--mount", "--fork", "--kill-child=SIGTERM",
            "--mount-proc", "--propagation", "private", "--", "/bin/sh", "-c", script,
            "ina-sandbox", str(len(paths)), *paths, *init, *argv]


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths that lie inside none of the others."""
    result: list[str] = []
    for p in sorted(set(paths), key=len):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in result):
            result.append(p)
    return result


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env[ENV_MARK] = _netns()
    env.pop(READY_FD_ENV, None)
    return env


def die_with_parent(sig: int = signal.SIGHUP) -> None:
    """Have the kernel send this process ``sig`` when its parent dies (Linux
    PR_SET_PDEATHSIG), so a CLI that runs a sandbox ends it then too. Call it from
    the main thread: the signal comes when the thread that started this process
    ends."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        LOG.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
    elif os.getppid() != parent:  # the parent died just before
        os.kill(os.getpid(), sig)


def _child_setup(prctl: Callable[..., int]) -> Callable[[], None]:
    def setup() -> None:  # in the child, between fork and exec: keep it to two calls
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return setup


def run(argv: Sequence[str], *, keep: Sequence[str | Path] = (),
        on_start: Callable[[int], None] | None = None,
        on_ready: Callable[[str], None] | None = None,
        grace: float = DEFAULT_GRACE) -> int:
    """Run ``argv`` in a fresh sandbox until it ends; its exit code.

    Nothing outlives it. SIGTERM, SIGINT and SIGHUP sent to this process are passed
    on to the sandbox (its PID 1 passes them to ``argv``'s process; see
    sandbox_init.py), and the sandbox ends at the latest ``grace`` seconds later.
    If this process dies without passing a signal on (SIGKILL), ``unshare`` dies
    with it (PR_SET_PDEATHSIG) and the sandbox learns it from a pipe whose writer
    was this process, and ends the same way. A Ctrl-C typed in the terminal reached
    the sandbox's processes directly and is not passed on. When this returns,
    every process of the sandbox has ended.

    ``on_start(pid)`` is called once the sandbox runs, with the PID of its
    ``unshare`` process (see ``init_pid``). With ``on_ready``, ``argv``'s process
    finds in ``$INA_SANDBOX_READY_FD`` a file descriptor to write one line to, and
    ``on_ready`` gets that line. Call this from the main thread.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    lifeline_r, lifeline_w = os.pipe()
    env = environment()
    inherited = [lifeline_r]
    ready_r = ready_w = -1
    if on_ready is not None:
        ready_r, ready_w = os.pipe()
        inherited.append(ready_w)
        env[READY_FD_ENV] = str(ready_w)
    waited = {*STOP_SIGNALS, signal.SIGCHLD}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    try:
        proc = subprocess.Popen(command(argv, keep, lifeline_r, grace), env=env,
                                pass_fds=inherited, preexec_fn=_child_setup(libc.prctl))
        os.close(lifeline_r)
        lifeline_r = -1
        if ready_w >= 0:
            os.close(ready_w)
            ready_w = -1
        if on_start is not None:
            on_start(proc.pid)
        if on_ready is not None:
            reader = threading.Thread(target=_read_ready, args=(ready_r, on_ready))
            reader.start()
        while proc.poll() is None:
            info = signal.sigtimedwait(waited, 1.0)  # SIGCHLD wakes it when proc ends
            if (info is None or info.si_signo not in STOP_SIGNALS
                    or (info.si_code == _SI_KERNEL and info.si_signo == signal.SIGINT)):
                continue  # a Ctrl-C typed in the terminal reached the sandbox directly
            if info.si_code != _SI_KERNEL:
                _pass_on(proc.pid, info.si_signo)
            if lifeline_w >= 0:
                # Also a stop for a PID 1 not yet running (a signal to the shell
                # before it is would be lost): it reads end-of-file when it runs.
                os.close(lifeline_w)
                lifeline_w = -1
        return proc.returncode
    finally:
        if lifeline_w >= 0:
            os.close(lifeline_w)  # the sandbox ends, if it still runs
        if proc is not None and proc.poll() is None:
            proc.wait()
        if reader is not None:
            reader.join()  # the sandbox is gone, so is every writer of the ready pipe
        for fd in (lifeline_r, ready_r, ready_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def _read_ready(fd: int, on_ready: Callable[[str], None]) -> None:
    """The first line written to the ready pipe, if any, to ``on_ready``."""
    data = b""
    with contextlib.suppress(OSError):
        while b"\n" not in data:
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            data += chunk
    if b"\n" in data:
        try:
            on_ready(data.split(b"\n", 1)[0].decode(errors="replace"))
        except Exception:  # a thread: nobody else would see it
            LOG.exception("the sandbox's ready line could not be handled")


def _pass_on(unshare_pid: int, signum: int) -> None:
    """Send ``signum`` to the sandbox's PID 1 (unshare itself ignores SIGTERM and
    SIGINT while it waits)."""
    try:
        os.kill(init_pid(unshare_pid), signum)
    except (OSError, ProcessLookupError):  # not started yet, or already gone
        LOG.info("sandbox %d: no PID 1 to pass signal %d to", unshare_pid, signum)


def stop_on(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> None:
    """End this program cleanly (SystemExit, so every context manager closes: the Lab
    stops Mininet and the switches) on the first of ``signals``; ignore the rest
    while it stops."""

    def stop(signum: int, frame: object) -> None:
        for s in signals:
            signal.signal(s, signal.SIG_IGN)
        LOG.info("signal %d: stopping", signum)
        raise SystemExit(128 + signum)

    for s in signals:
        signal.signal(s, stop)


def reexec(argv: Sequence[str] | None = None, keep: Sequence[str | Path] = ()) -> int:
    """Run this program (a CLI) again inside a sandbox and return its exit code; it
    ends with this process, also when this process's parent dies."""
    die_with_parent()
    return run(list(argv) if argv is not None else [sys.executable, *sys.argv], keep=keep)


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
    """python -m ina.lab.sandbox [--if-available] -- CMD...: run CMD in a fresh sandbox.

    Already inside one (``make test`` run from a sandboxed shell, say), CMD runs
    directly in it. With --if-available, CMD also runs directly when the sandbox
    cannot be made (not root, no unshare); tests that need it then skip and say
    why. (The lab commands do nest: ``inalab run`` always makes a sandbox of its
    own, also inside the one the tests run in.)
    """
    args = list(sys.argv[1:] if argv is None else argv)
    optional = "--if-available" in args
    if optional:
        args.remove("--if-available")
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m ina.lab.sandbox [--if-available] -- CMD...", file=sys.stderr)
        return 2
    reason = why_not_available()
    if reason is None and not inside():
        die_with_parent()
        return run(args)
    if reason is not None and not optional:
        print(f"ina.lab.sandbox: {reason}", file=sys.stderr)
        return 2
    if reason is not None:
        print(f"ina.lab.sandbox: running without private namespaces ({reason}); "
              "emulation tests will skip", file=sys.stderr)
    return subprocess.call(args)


if __name__ == "__main__":
    sys.exit(main())
