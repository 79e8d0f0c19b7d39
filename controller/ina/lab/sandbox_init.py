"""PID 1 of a sandbox made by ina.lab.sandbox: start the command, pass stop signals on to
it, reap orphans, and end when the command ends.

    python -I -S sandbox_init.py LIFELINE_FD GRACE -- CMD...

When PID 1 of a PID namespace exits, the kernel kills every process left in the
namespace (and in namespaces nested in it), so the sandbox's lifetime is this
process's. It ends:

- when CMD ends, with CMD's exit code (128 + N if a signal N killed it);
- on SIGTERM, SIGHUP or SIGINT, or when the lifeline pipe reaches end-of-file (the
  process that made the sandbox is gone, even by SIGKILL): it passes SIGTERM or
  SIGHUP on to CMD (SIGTERM for SIGINT and the lifeline) and waits GRACE seconds for
  CMD to end cleanly; then it exits, and the kernel kills what is left.

Only the first stop is passed on (the program that made the sandbox may report one
stop twice: by a signal and by closing the lifeline). A signal the terminal sent
(Ctrl-C, a hangup) went to the whole foreground process group, CMD included, so it
is not passed on again: CMD handles its own Ctrl-C (an interactive Mininet CLI
interrupts the command running on a host), and only a terminal's hangup counts as
a stop. A SIGINT sent to the sandbox (by the program that made it, which passes on
what it is sent) means "stop", hence SIGTERM. Signals are taken with sigtimedwait,
which tells who sent them.

It runs before anything else in the sandbox and imports only the standard library
(run with -I -S, it does not even see the ina package).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

STOP = (signal.SIGTERM, signal.SIGHUP)
WAITED = {*STOP, signal.SIGINT, signal.SIGCHLD}
SI_KERNEL = 0x80  # si_code of a signal the kernel sent (a terminal's, for these)


def _watch_lifeline(fd: int) -> None:
    """Block until the lifeline's writer is gone, then signal this process."""
    try:
        while os.read(fd, 512):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)  # process-directed: sigtimedwait takes it


def _reap(child: int) -> int | None:
    """Collect every ended child (orphans included); CMD's wait status, if it ended."""
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == child:
            status = st


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("usage: sandbox_init.py LIFELINE_FD GRACE -- CMD...", file=sys.stderr)
        return 2
    lifeline, grace, cmd = int(argv[1]), float(argv[2]), argv[4:]
    signal.pthread_sigmask(signal.SIG_BLOCK, WAITED)  # before any thread: all inherit it
    if lifeline >= 0:
        threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()
    try:
        child = os.posix_spawnp(
            cmd[0], cmd, os.environ,
            # CMD starts with default dispositions and nothing blocked.
            setsigmask=(), setsigdef=(*WAITED, signal.SIGPIPE, signal.SIGXFSZ),
        )
    except OSError as exc:
        print(f"ina.lab.sandbox: cannot run {cmd[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    deadline: float | None = None
    status = None
    while status is None:
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            print(f"ina.lab.sandbox: {cmd[0]} did not stop within {grace:g}s; ending the "
                  "sandbox and every process in it", file=sys.stderr, flush=True)
            return 128 + signal.SIGKILL
        info = (signal.sigwaitinfo(WAITED) if timeout is None
                else signal.sigtimedwait(WAITED, timeout))
        if info is not None and info.si_signo != signal.SIGCHLD:
            from_terminal = info.si_code == SI_KERNEL
            typed_ctrl_c = from_terminal and info.si_signo == signal.SIGINT
            if deadline is None and not typed_ctrl_c:  # the first stop; later ones add nothing
                deadline = time.monotonic() + grace
                if not from_terminal:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child, signal.SIGTERM if info.si_signo == signal.SIGINT
                                else info.si_signo)
        status = _reap(child)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
