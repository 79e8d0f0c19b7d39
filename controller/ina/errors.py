"""Every error this package raises on purpose, in one hierarchy.

Each class says, in ``exit_code``, what a command-line program exits with when it
ends on that error (``ina.cli.common`` prints the message and returns the code):
the one place exit codes are mapped. The built-in bases (ValueError for bad input,
RuntimeError for failures) stay, for callers that catch those.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from ina.spec.job import RouteConflict

#: What each exit code means, for the CLIs' help.
EXIT_MEANINGS = {
    0: "done",
    1: "an unexpected failure",
    2: "invalid input or a refused request (the message says why)",
    3: "a switch, the controller, the lab or the AllReduce failed",
    4: "the compiled P4 program is missing or disagrees with this controller",
}


class InaError(Exception):
    """An error of this package; its message is written for people."""

    exit_code: ClassVar[int] = 1


# --- Bad input: exit 2 -------------------------------------------------------------


class InputError(InaError, ValueError):
    """An invalid topology, job or the like; ``problems`` lists every problem found,
    each once; ``source`` says where the input came from (a file name), if known."""

    exit_code = 2
    #: How the message starts: "invalid job jobs/x.yaml:", then a problem a line.
    summary: ClassVar[str] = "invalid input"

    def __init__(self, problems: list[str], source: str | None = None):
        problems = list(dict.fromkeys(problems))  # each problem once
        where = f" {source}" if source else ""
        super().__init__(f"{self.summary}{where}:\n  - " + "\n  - ".join(problems))
        self.problems = problems
        self.source = source


class TopologyError(InputError):
    """An invalid topology."""

    summary = "invalid topology"


class JobError(InputError):
    """An invalid job. ``conflicts`` are those problems that are routing conflicts
    (also in ``problems``, as text), for programs (the planner) to act on."""

    summary = "invalid job"

    def __init__(self, problems: list[str], source: str | None = None,
                 conflicts: Sequence[RouteConflict] = ()):
        super().__init__(problems, source)
        self.conflicts = tuple(conflicts)


class PlanError(JobError):
    """No valid VAT exists for a job (no path, or no switch with room for it)."""

    summary = "cannot plan the job"


class CapacityError(InputError):
    """Switches have no room for a job (a job index, a run of free slots)."""

    summary = "no room for the job"


class YamlFileError(InaError, ValueError):
    """A file that cannot be read or is not YAML; the message says why, briefly."""

    exit_code = 2


class WireError(InaError, ValueError):
    """Bytes that do not decode as the expected header, or values the wire cannot
    carry (a BFR-id out of range, a packet of too many values)."""

    exit_code = 2


class UsageError(InaError, ValueError):
    """A command cannot do what it was asked: a bad argument, a file it cannot read or
    write, a request refused in the current state (a lab already running, say)."""

    exit_code = 2


class InputTypeError(UsageError, TypeError):
    """An array or tensor of a type the call cannot take."""


class Unreachable(InaError, LookupError):
    """No route joins two elements of a topology, because a switch or link that
    would carry it is down."""

    exit_code = 2


# --- Failures of switches, the controller, the lab, the AllReduce: exit 3 ------------


class SwitchError(InaError, RuntimeError):
    """A switch refused or failed an operation. ``written``: of the entities a
    failed write carried, those the switch did write, when it says (None: unknown)."""

    exit_code = 3

    def __init__(self, switch: str, message: str, written: Sequence[object] | None = None):
        super().__init__(f"{switch}: {message}")
        self.switch = switch
        self.written = None if written is None else tuple(written)


class ControllerError(InaError, RuntimeError):
    """An operation failed on one or more switches."""

    exit_code = 3


class LockTimeout(ControllerError):
    """A lock of the run directory (ina.control.localstate) that another command
    holds was not released in time; the message names the holder."""


class DeployError(ControllerError):
    """A job was not deployed; what had been written was removed, or says where not."""

    def __init__(self, job_id: int, failures: dict[str, BaseException],
                 rollback_failures: dict[str, BaseException]):
        lines = [f"job {job_id} was not deployed: writing failed on "
                 + ", ".join(sorted(failures))]
        lines += [f"  {sw}: {err}" for sw, err in sorted(failures.items())]
        if rollback_failures:
            lines.append("and removing what had been written failed on "
                         + ", ".join(sorted(rollback_failures))
                         + ": run `inactl teardown` for this job once they are reachable")
            lines += [f"  {sw}: {err}" for sw, err in sorted(rollback_failures.items())]
        else:
            lines.append("every entry written for it was removed again")
        super().__init__("\n".join(lines))
        self.failures = failures
        self.rollback_failures = rollback_failures


class ConnectionLost(InaError, ConnectionError):
    """A P4Runtime call cancelled under its caller: its channel was closed (the
    connection ended, or finsy gave up on it), not the caller's task."""


class LabError(InaError, RuntimeError):
    """The emulation could not be started or driven (a switch exited, a command on a
    host failed, a timeout)."""

    exit_code = 3


class AllreduceError(InaError, RuntimeError):
    """The AllReduce could not complete."""

    exit_code = 3


class RingError(InaError, ConnectionError):
    """A peer of the ring on hosts broke its protocol (a message of the wrong size,
    one that fails authentication, a port answering without the ring's key): the
    call ends with this error, never with values from it."""

    exit_code = 3


class AllreduceTimeout(AllreduceError):
    """No progress within the worker's timeout; the message says what was observed."""


class CallMismatch(AllreduceError):
    """The workers of a job did not make the same call."""


class CallRefused(AllreduceError):
    """Another worker of the call refused it: its input does not fit the data plane."""


class PlanChanged(AllreduceError):
    """The job's plan changed during a call: planned anew in generation ``gen``
    (REPLAN), or no switch aggregates it now (``on_hosts``). ina.host.call.Caller
    raises and catches it: the call runs again under the new plan, or on hosts."""

    def __init__(self, gen: int, on_hosts: bool = False):
        super().__init__(f"the job's plan changed (gen {gen}"
                         + (", reduced on hosts)" if on_hosts else ")"))
        self.gen = gen
        self.on_hosts = on_hosts


# --- The compiled program: exit 4 ----------------------------------------------------


class P4InfoError(InaError):
    """The compiled P4 program is missing, or its names disagree with
    ``ina.control.p4names``."""

    exit_code = 4
