"""The failure detector (ina.control.watch) running beside blocking lab code: a
``Watcher`` in a thread of its own, with its event loop, for the tests and the
failover benchmark."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ina.control.watch import Event, OnChange, Watcher, WatchOptions
from ina.errors import LabError
from ina.lab.mininet import Lab
from ina.spec.topology import Failures

T = TypeVar("T")


class WatcherThread:
    """``Watcher`` of the lab's switches, running until ``stop``; ``on_change`` runs
    in its thread (the default only records the verdicts, in ``changes``: one entry
    per call, so a call that failed and was made again is there twice)."""

    def __init__(self, lab: Lab, options: WatchOptions, on_change: OnChange | None = None):
        self.changes: list[tuple[float, Failures]] = []

        async def record(failures: Failures) -> None:
            self.changes.append((time.monotonic(), failures))
            if on_change is not None:
                await on_change(failures)

        self.watcher = Watcher(lab.topology, lab.p4info, lab.p4blob, record, options,
                               access=lab.access)
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._started = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="watcher", daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self.watcher.run())
        self._started.set()
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 (reported by stop())
            self.error = exc
        finally:
            self._loop.close()

    def stop(self) -> None:
        """Stop the watcher; LabError if it failed or does not stop."""
        assert self._task is not None
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(timeout=15)
        if self._thread.is_alive():
            raise LabError("the watcher did not stop")
        if self.error is not None:
            raise LabError(f"the watcher failed: {self.error!r}")

    def call(self, fn: Callable[[], Coroutine[Any, Any, T]], timeout: float) -> T:
        """``fn()`` run in the watcher's event loop, for P4Runtime calls made while
        the watcher runs (grpc's asyncio support does not take two event loops of one
        process at once); its result, or its exception."""
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(timeout)

    @property
    def failures(self) -> Failures:
        return self.watcher.failures

    @property
    def events(self) -> list[Event]:
        return list(self.watcher.events)

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> float:
        """Seconds until ``condition`` held; LabError after ``timeout``."""
        start = time.monotonic()
        while not condition():
            if self.error is not None:
                raise LabError(f"the watcher failed: {self.error!r}")
            if time.monotonic() - start > timeout:
                raise LabError(f"timed out after {timeout:g}s waiting for {what}; "
                               f"verdict: {self.failures.describe()}")
            time.sleep(0.005)  # polling the watcher's state, which another thread sets
        return time.monotonic() - start

    def settled(self, timeout: float = 15.0) -> None:
        """Primary on every switch, probes heard at both ends of every link, nothing
        down."""
        links = self.watcher.detector.links
        ends = [(lk.a, lk.a_port) for lk in links] + [(lk.b, lk.b_port) for lk in links]
        before = dict(self.watcher.heard)
        self.wait_for(lambda: all(self.watcher.primary(sw) for sw in self.watcher.topology.switches)
                      and all(self.watcher.heard.get(e, 0) >= before.get(e, 0) + 3
                              for e in ends)
                      and not self.failures, timeout, "probes on every link")
