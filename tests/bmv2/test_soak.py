"""The chaos soak (ina.bench.soak) on the leaf-spine fabric, short: a link and a spine
fail and come back once each while a dozen calls run, the watcher repairing; the
misbehaving member sends every kind of bad packet and the outsider every kind of
garbage. Every result is exact, no call hangs, and nothing is left behind. Run
with `make test` (``-s`` shows the soak's report).
"""

from __future__ import annotations

from ina.bench.chaos import ChaosEvent, faults
from ina.bench.chaos_frames import MEMBER_KINDS, OUTSIDER_KINDS
from ina.bench.soak import CASES, SoakSettings, soak_on_lab
from ina.bench.soak_figures import render
from ina.spec.job import JobSpec

from bmv2.bmv2lab import Labs

CASE = CASES["leaf-spine"]
#: Seconds of calls (the script's span), and at least a dozen calls.
SECONDS = 11.0
CALLS = 12


def script(link: tuple[str, ...], spine: tuple[str, ...]) -> tuple[ChaosEvent, ...]:
    """A link down from 1 s to 4 s, a spine from 5.5 s to 9 s; a misbehaviour of each
    kind by the member and each kind of garbage from the outsider in between."""
    events = [ChaosEvent(1.0, "fail", "link", link), ChaosEvent(4.0, "recover", "link", link),
              ChaosEvent(5.5, "fail", "spine", spine), ChaosEvent(9.0, "recover", "spine", spine)]
    events += [ChaosEvent(1.5 + 1.5 * i, "member", kind, seed=i)
               for i, kind in enumerate(MEMBER_KINDS)]
    events += [ChaosEvent(0.5 + 3.0 * i, "outsider", kind, seed=10 + i)
               for i, kind in enumerate(OUTSIDER_KINDS)]
    return tuple(sorted(events, key=lambda e: e.at))


def test_a_short_soak_is_exact_hangs_nothing_and_leaves_nothing(labs: Labs) -> None:
    lab = labs.get(CASE.topology)
    elements = faults(lab.topology, JobSpec.load(CASE.job).workers)
    link = next(f.target for f in elements if f.kind == "link")
    spine = next(f.target for f in elements if f.kind == "spine")
    settings = SoakSettings(minutes=SECONDS / 60, max_calls=100, min_calls=CALLS, seed=7,
                            worker_timeout=3.0, hung_after=20.0, max_attempts=3,
                            compute=(0.5, 0.8), events=script(link, spine))
    run = soak_on_lab(lab.lab, CASE, settings)
    print(render([run], "BMv2", {"interval": settings.watch.interval,
                                 "detect_after": settings.watch.detect_after}))
    assert run.calls >= CALLS
    assert run.wrong == []
    assert run.hung == []
    assert run.left.nothing(), run.left.describe()
    assert run.failures == {"link": 1, "spine": 1} and run.recoveries == 2
    assert run.undetected == []
    assert set(run.member_sent) == set(MEMBER_KINDS)
    assert set(run.outsider_sent) == set(OUTSIDER_KINDS)
    assert run.final_call == "exact"
    assert not lab.lab.failures  # the lab as it was
