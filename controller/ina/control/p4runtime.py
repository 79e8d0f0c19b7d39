"""SwitchClient over P4Runtime, with finsy.

``connect`` opens every switch of a topology at once, over TLS with the
controller's certificate unless its ``Access`` is the insecure one. With
``push=True`` it also installs the pipeline (P4Info + BMv2 JSON) when the switch
runs another one; otherwise it only checks that the switch runs the P4Info it was
given.

Writers and election ids. Every connection asks for election id 10 (finsy's
default); the watcher's long-lived ones (ina.control.watch) hold 1, so a one-shot
command is the primary while it runs and the watcher is again once it has gone
(the watcher itself writes only through one-shot connections, like any command).
A second client asking for 10 is refused the id and stays backup: a writer then
waits for the role (``P4RuntimeSwitch.claim``: the other finishes and leaves) up to
its timeout and gives up saying so, never taking a higher id to preempt it. On
one machine, writers also take the access's lock file before they connect and
keep it until they have disconnected: two commands starting at once cannot split
the switches' primary roles between them and wait for each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import finsy as fy
from finsy.grpcutil import GRPCStatusCode

from ina.control import p4names as n
from ina.control.access import Access, TlsFiles
from ina.control.entities import Entity, Lpm, MatchValue, McastGroup, Meter, TableEntry
from ina.control.localstate import FileLock
from ina.control.switch import CounterValue
from ina.errors import SwitchError
from ina.spec.topology import SwitchSpec, Topology

LOG = logging.getLogger(__name__)
#: Errors of a whole write request: none of its updates was applied.
_NOTHING_WRITTEN = {GRPCStatusCode.PERMISSION_DENIED, GRPCStatusCode.UNAUTHENTICATED,
                    GRPCStatusCode.FAILED_PRECONDITION, GRPCStatusCode.INVALID_ARGUMENT}


def _not_noise(record: logging.LogRecord) -> bool:
    # BMv2 has no gNMI server; finsy warns so on every connection. And while a
    # watcher (inactl watch) probes the links, a one-shot client is the primary for a
    # moment and gets the neighbours' probes as packet-ins, which it has no use for.
    # Nothing is wrong in either case.
    msg = record.getMessage()
    return "gNMI is not implemented" not in msg and "packet ignored" not in msg


logging.getLogger("finsy").addFilter(_not_noise)


def tls_credentials(tls: TlsFiles, switch: str) -> fy.GRPCCredentialsTLS:
    """The controller's credentials for ``switch``, whose certificate must name it."""
    return fy.GRPCCredentialsTLS(cacert=tls.ca, cert=tls.cert, private_key=tls.key,
                                 target_name_override=switch)


class P4RuntimeSwitch:
    """One switch over P4Runtime (TLS unless ``tls`` is None)."""

    def __init__(self, spec: SwitchSpec, p4info: Path, p4blob: Path | None = None,
                 push: bool = False, tls: TlsFiles | None = None):
        self.name = spec.name
        self.spec = spec
        options = fy.SwitchOptions(
            p4info=p4info, p4blob=p4blob if push else None, device_id=spec.device_id,
            channel_credentials=None if tls is None else tls_credentials(tls, spec.name),
        )
        self._switch = fy.Switch(spec.name, spec.grpc, options)
        self._open = False

    async def open(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._switch.__aenter__(), timeout)
        except TimeoutError as exc:
            raise SwitchError(self.name, f"no P4Runtime answer at {self.spec.grpc} "
                                         f"within {timeout:g}s (is the switch running?)") from exc
        except Exception as exc:  # finsy raises several kinds on connect/pipeline errors
            raise SwitchError(self.name, f"cannot open P4Runtime at {self.spec.grpc}: {exc}") \
                from exc
        self._open = True

    async def close(self) -> None:
        if self._open:
            self._open = False
            await self._switch.__aexit__(None, None, None)

    # --- conversion --------------------------------------------------------------------

    def _to_fy(self, e: Entity) -> fy.P4TableEntry | fy.P4MulticastGroupEntry:
        if isinstance(e, McastGroup):
            return fy.P4MulticastGroupEntry(e.group_id, replicas=e.replicas)
        match: dict[str, Any] = {}
        for key, value in e.match:
            match[key] = (value.value, value.prefix_len) if isinstance(value, Lpm) else value
        meter = None
        if e.meter is not None:  # a packet over the rate is red (CIR = PIR)
            meter = fy.P4MeterConfig(cir=e.meter.rate, cburst=e.meter.burst,
                                     pir=e.meter.rate, pburst=e.meter.burst)
        return fy.P4TableEntry(
            e.table, match=fy.Match(match), action=fy.Action(e.action, **dict(e.params)),
            meter_config=meter,
        )

    def _from_fy(self, e: fy.P4TableEntry) -> TableEntry:
        schema = self._switch.p4info
        table = schema.tables[e.table_id]
        spec = n.TABLE_BY_NAME[table.name]
        assert e.match is not None and isinstance(e.action, fy.P4TableAction)
        match: list[tuple[str, MatchValue]] = []
        for key, kind, _ in spec.keys:
            # The program's fields have no @format annotation: finsy decodes an exact
            # value to an int, an LPM value to (int, prefix length).
            raw = e.match[key]
            if kind == "lpm":
                value, prefix_len = raw
                match.append((key, Lpm(int(value), int(prefix_len))))
            else:
                match.append((key, int(raw)))
        action = schema.actions[e.action.name].name
        aspec = n.ACTION_BY_NAME[action]
        params = tuple((p, int(e.action.args[p])) for p in aspec.param_names)
        config = e.meter_config
        meter = Meter(config.cir, config.cburst) if config is not None else None
        return TableEntry(table.name, tuple(match), action, params, meter)

    # --- SwitchClient -------------------------------------------------------------------

    async def claim(self, writer: object, timeout: float) -> None:
        """Wait until this connection is the switch's primary client (another one-shot
        client holding the role leaves when it is done); SwitchError after
        ``timeout`` seconds, naming the primary's election id."""
        sw = self._switch
        if sw.is_primary:
            return
        LOG.info("%s: waiting to become its primary client (the primary has election id "
                 "%d)", self.name, sw.primary_id)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    # finsy readies the channel again after every change of role.
                    ready = sw.ee.event_future(fy.SwitchEvent.CHANNEL_READY)
                    if sw.is_primary:
                        return
                    await ready
        except TimeoutError:
            raise SwitchError(
                self.name, f"another P4Runtime client is its primary (election id "
                f"{sw.primary_id}; ours {sw.election_id}): is another controller writing, "
                "from another machine?") from None

    async def release(self, writer: object) -> None:
        pass  # the role ends with the connection (``close``)

    async def _write(self, what: str, coro: Any) -> None:
        try:
            await coro
        except fy.P4ClientError as exc:
            raise SwitchError(self.name, f"{what} failed: {exc}") from exc

    async def insert(self, entities: Sequence[Entity]) -> None:
        if not entities:
            return
        try:
            await self._switch.insert([self._to_fy(e) for e in entities])
        except fy.P4ClientError as exc:
            # A batch that failed in part lists the updates that failed, in order.
            written: list[Entity] | None = None
            if exc.details:
                written = [e for i, e in enumerate(entities) if i not in exc.details]
            elif exc.code in _NOTHING_WRITTEN:
                written = []
            raise SwitchError(self.name, f"insert failed: {exc}", written) from exc

    async def modify(self, entities: Sequence[Entity]) -> None:
        # P4Runtime MODIFY: the entry keeps its key and gets new action data (a
        # multicast group new replicas) in one step; nothing is missing meanwhile.
        if entities:
            await self._write("modify", self._switch.modify([self._to_fy(e) for e in entities]))

    async def delete(self, entities: Sequence[Entity]) -> None:
        if entities:
            await self._write(
                "delete", self._switch.delete([self._to_fy(e) for e in entities], strict=False)
            )

    # finsy types read() as yielding any P4 entity, not the kind asked for: hence the
    # attr-defined ignores below.

    async def read_table(self, table: str) -> list[TableEntry]:
        # A direct meter's configuration is sent back only if the request has one.
        ask = fy.P4MeterConfig(cir=0, cburst=0, pir=0, pburst=0) \
            if n.TABLE_BY_NAME[table].metered else None
        try:
            entries = self._switch.read(fy.P4TableEntry(table, meter_config=ask))
            return [self._from_fy(e) async for e in entries]  # type: ignore[attr-defined]
        except fy.P4ClientError as exc:
            raise SwitchError(self.name, f"reading {table} failed: {exc}") from exc

    async def read_groups(self) -> list[McastGroup]:
        result = []
        try:
            groups = self._switch.read(fy.P4MulticastGroupEntry())
            async for g in groups:  # type: ignore[attr-defined]
                replicas = tuple(sorted((r, 0) if isinstance(r, int) else (r.port, r.instance)
                                        for r in g.replicas))
                result.append(McastGroup(g.multicast_group_id, replicas))
        except fy.P4ClientError as exc:
            raise SwitchError(self.name, f"reading multicast groups failed: {exc}") from exc
        return result

    async def read_counter(self, counter: str) -> dict[int, CounterValue]:
        result = {}
        try:
            cells = self._switch.read(fy.P4CounterEntry(counter))
            async for c in cells:  # type: ignore[attr-defined]
                if c.index is not None and (c.packet_count or c.byte_count):
                    result[c.index] = CounterValue(c.packet_count, c.byte_count)
        except fy.P4ClientError as exc:
            raise SwitchError(self.name, f"reading counter {counter} failed: {exc}") from exc
        return result

    async def reset_counter(self, counter: str, indices: Sequence[int]) -> None:
        zero = fy.P4CounterData(byte_count=0, packet_count=0)
        await self._write("counter reset", self._switch.write(
            [~fy.P4CounterEntry(counter, index=i, data=zero) for i in indices]
        ))


@contextlib.asynccontextmanager
async def connect(topology: Topology, p4info: Path, p4blob: Path | None = None, *,
                  access: Access, push: bool = False, timeout: float = 10.0,
                  write: bool = True) -> AsyncIterator[dict[str, P4RuntimeSwitch]]:
    """Open every switch of the topology concurrently, as ``access`` says; close them
    all on exit. A writer (``write``) holds the access's lock file from before it
    connects until every connection is closed (see the module's docstring); a
    reader (``status``) needs no lock: it never waits for a role."""
    lock = None
    if write and access.lock_file is not None:
        lock = FileLock(access.lock_file, f"writing to the switches of {topology.name}")
        await lock.acquire_async(access.lock_timeout)
    try:
        async with _connected(topology, p4info, p4blob, access.tls, push, timeout) as clients:
            yield clients
    finally:
        if lock is not None:
            lock.release()


@contextlib.asynccontextmanager
async def _connected(topology: Topology, p4info: Path, p4blob: Path | None,
                     tls: TlsFiles | None, push: bool, timeout: float,
                     ) -> AsyncIterator[dict[str, P4RuntimeSwitch]]:
    clients = {name: P4RuntimeSwitch(spec, p4info, p4blob, push, tls)
               for name, spec in sorted(topology.switches.items())}
    results = await asyncio.gather(*(c.open(timeout) for c in clients.values()),
                                   return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    try:
        if failures:
            raise SwitchError(
                ",".join(sorted(e.switch for e in failures if isinstance(e, SwitchError))) or "?",
                "cannot connect:\n" + "\n".join(f"  {e}" for e in failures),
            )
        yield clients
    finally:
        await asyncio.gather(*(c.close() for c in clients.values()), return_exceptions=True)
