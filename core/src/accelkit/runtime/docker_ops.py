"""What the docker runtime does to containers, through ``aiodocker`` (dockerd or podman).

:class:`~accelkit.runtime.docker.DockerRuntime` hands every call to one :class:`ContainerOps`,
made on first use; every engine failure leaves here as an accelkit error.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import math
import re
import signal as signals
import time
from typing import Any

import aiodocker

from accelkit.errors import WorkloadError
from accelkit.runtime.base import (
    LaunchSpec,
    RuntimeUnavailable,
    WorkloadHandle,
    WorkloadUnreachable,
)
from accelkit.runtime.docker_body import (
    LABEL_AGENT,
    LABEL_LEDGER,
    LABEL_LEDGER_KEY,
    LABEL_WORKLOAD,
    plan_create,
)
from accelkit.runtime.docker_engine import DockerEngine
from accelkit.runtime.docker_output import OutputPump
from accelkit.runtime.docker_values import (
    ALIVE_STATES,
    ContainerExit,
    ContainerRecord,
    OutputTarget,
)
from accelkit.types import AgentId, Workload

__all__ = ["ContainerOps", "container_label"]

log = logging.getLogger(__name__)

#: how long the rest of the output may take to arrive after the container exited
_DRAIN_S = 5.0
#: how long a removal that the engine already started may take
_REMOVAL_S = 30.0
_NOT_FOUND, _CONFLICT = 404, 409
#: the engine's ``SystemTime``: RFC 3339, up to nanoseconds
_SYSTEM_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def container_label(handle: WorkloadHandle) -> str:
    """``name (id prefix)`` for messages."""
    name = handle.details.get("name")
    return f"{name} ({handle.ident[:12]})" if name else handle.ident[:12]


def _oom_note(label: str, status: object = 137) -> str:
    """What the OOM killer did, and only that: the engine says ``OOMKilled`` when it killed any
    process of the container, so a command that exited otherwise was not its victim."""
    if status in (137, "137"):
        return (
            f"container {label} was killed by the kernel's OOM killer: it reached its memory limit"
        )
    return (
        f"the kernel's OOM killer killed a process of container {label} at its memory limit, "
        f"not its command, which exited with status {status}"
    )


def _epoch(system_time: object) -> float | None:
    """The engine's ``SystemTime`` in epoch seconds; ``None`` when it is not one."""
    found = _SYSTEM_TIME.match(str(system_time))
    if found is None:
        return None
    whole, fraction, zone = found.groups()
    try:
        stamp = dt.datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    except ValueError:  # a 13th month, say
        return None
    return stamp.timestamp() + float(fraction or 0)


def _signal_name(signum: int) -> str:
    try:
        return signals.Signals(signum).name
    except ValueError:
        return str(signum)


class ContainerOps:
    """The docker runtime's calls, on one engine; ``output`` as in ``DockerRuntime``."""

    name = "docker"

    def __init__(
        self, url: str, output: OutputTarget | None, engine: DockerEngine | None = None
    ) -> None:
        self._engine = DockerEngine(url) if engine is None else engine
        self._output = output
        self._pumps: dict[str, OutputPump] = {}
        #: the state of each container seen to exit (``wait_exit``): its notes need no second
        #: inspection, and it needs no stop before its removal
        self._ended: dict[str, dict[str, Any]] = {}

    @property
    def url(self) -> str:
        """The engine's address."""
        return self._engine.url

    def learn(self, engine: DockerEngine) -> None:
        """What ``engine`` (of the same address) was told, where this one was told nothing."""
        self._engine.learn(engine)

    async def _container(self, ident: str) -> aiodocker.containers.DockerContainer:
        client = await self._engine.client()
        return client.containers.container(ident)

    async def create(self, spec: LaunchSpec) -> WorkloadHandle:
        """Create the container (not started); ``RuntimeUnavailable`` for a missing image."""
        facts = await self._engine.facts()
        plan = plan_create(spec, facts)
        client = await self._engine.client()
        name = spec.workload.id
        with self._engine.errors(f"creating container {name}"):
            try:
                container = await client.containers.create(plan.body, name=name)
            except aiodocker.DockerError as exc:
                if exc.status == _NOT_FOUND and "image" in exc.message.lower():
                    msg = f"image {spec.image!r} not found; load it with docker load/import"
                    raise RuntimeUnavailable(msg) from None
                raise
        handle = WorkloadHandle(
            self.name,
            container.id,
            {"name": name, "engine": self.url, "image": spec.image or ""},
        )
        try:
            with self._engine.errors(f"connecting container {name} to its networks"):
                for network in plan.later_networks:
                    await (await client.networks.get(network)).connect({"Container": container.id})
        except BaseException:
            await self.discard(spec.workload, handle)
            raise
        return handle

    async def start(self, handle: WorkloadHandle) -> None:
        """Start the container, its output copied to ours from its first byte."""
        container = await self._container(handle.ident)
        with self._engine.errors(f"starting container {self._label(handle)}"):
            try:
                if self._output is not None:
                    self._pumps[handle.ident] = OutputPump(container, self._output)
                    await self._pumps[handle.ident].attached()
                await container.start()
            except BaseException:
                if pump := self._pumps.pop(handle.ident, None):
                    await pump.cancel()
                raise

    async def wait(self, handle: WorkloadHandle) -> int:
        """The container's exit status (137 when the kernel killed it for memory)."""
        return (await self.wait_exit(handle)).status

    async def wait_exit(self, handle: WorkloadHandle) -> ContainerExit:
        """Wait for the container to exit; its status and whether it was OOM-killed."""
        container = await self._container(handle.ident)
        label = self._label(handle)
        with self._engine.errors(f"waiting for container {label}"):
            try:
                result: dict[str, Any] = await container.wait()
            except aiodocker.DockerError as exc:
                if exc.status == _NOT_FOUND:
                    msg = f"container {label} is gone: it was removed while accelkit waited for it"
                    raise WorkloadError(msg) from None
                raise
        if pump := self._pumps.pop(handle.ident, None):
            await pump.drain(_DRAIN_S)
        with self._engine.errors(f"inspecting container {label}"):
            state = await self._state(handle.ident) or {}
        self._ended[handle.ident] = state
        error = (result.get("Error") or {}).get("Message", "") or str(state.get("Error", ""))
        ended = ContainerExit(int(result.get("StatusCode", 0)), bool(state.get("OOMKilled")), error)
        if ended.oom_killed:
            log.info("%s", _oom_note(label, ended.status))
        return ended

    async def exit_notes(self, handle: WorkloadHandle) -> list[str]:
        """Why the container ended, where the engine knows more than its status."""
        label = self._label(handle)
        state = self._ended.get(handle.ident)
        if state is None:
            with self._engine.errors(f"inspecting container {label}"):
                state = await self._state(handle.ident) or {}
        notes = [_oom_note(label, state.get("ExitCode", 137))] if state.get("OOMKilled") else []
        if error := state.get("Error"):
            notes.append(f"container {label}: {error}")
        return notes

    async def signal(self, handle: WorkloadHandle, signum: int) -> None:
        """Send ``signum`` to the container's main process; nothing if it no longer runs."""
        container = await self._container(handle.ident)
        with self._engine.errors(f"signalling container {self._label(handle)}"):
            try:
                await container.kill(signal=_signal_name(signum))
            except aiodocker.DockerError as exc:
                if exc.status not in (_NOT_FOUND, _CONFLICT):  # gone, or not running
                    raise

    async def stop(self, handle: WorkloadHandle, grace: float) -> bool:
        """The engine's stop (SIGTERM, SIGKILL after ``grace`` seconds), then removal;
        ``False`` when there was no such container. One seen to exit is only removed."""
        found = True
        if self._ended.pop(handle.ident, None) is None:
            found = await self._stop(handle, grace)
        if pump := self._pumps.pop(handle.ident, None):
            await pump.cancel()
        await self._remove(handle.ident, self._label(handle))
        return found

    async def _stop(self, handle: WorkloadHandle, grace: float) -> bool:
        container = await self._container(handle.ident)
        with self._engine.errors(f"stopping container {self._label(handle)}"):
            try:
                await container.stop(t=max(0, math.ceil(grace)))
            except aiodocker.DockerError as exc:
                if exc.status != _NOT_FOUND:
                    raise
                return False
        return True

    async def discard(self, workload: Workload, handle: WorkloadHandle | None) -> None:
        """Remove the container (by its name when creation was not recorded)."""
        ident = handle.ident if handle is not None else workload.id
        self._ended.pop(ident, None)
        if pump := self._pumps.pop(ident, None):
            await pump.cancel()
        await self._remove(ident, workload.id)

    async def _remove(self, ident: str, label: str) -> None:
        container = await self._container(ident)
        deadline = time.monotonic() + _REMOVAL_S
        with self._engine.errors(f"removing container {label}"):
            while True:
                try:
                    await container.delete(force=True, v=True)
                except aiodocker.DockerError as exc:
                    if exc.status == _NOT_FOUND:
                        return
                    # 409: the engine is already removing it; wait until it is gone
                    if exc.status != _CONFLICT or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
                else:
                    return

    async def _state(self, ident: str) -> dict[str, Any] | None:
        """The container's ``State``; ``None`` when there is no such container."""
        container = await self._container(ident)
        try:
            shown = await container.show()
        except aiodocker.DockerError as exc:
            if exc.status == _NOT_FOUND:
                return None
            raise
        state: dict[str, Any] = shown.get("State") or {}
        return state

    async def is_alive(self, handle: WorkloadHandle) -> bool | None:
        """Ask the engine; a missing container is gone, an engine that does not answer is
        ``None``."""
        try:
            with self._engine.errors(f"inspecting container {self._label(handle)}"):
                state = await self._state(handle.ident)
        except WorkloadError as exc:
            log.info("cannot tell whether %s is alive: %s", self._label(handle), exc)
            return None
        if state is None:
            return False
        return str(state.get("Status", "")).lower() in ALIVE_STATES or bool(state.get("Running"))

    async def adopt(self, handle: WorkloadHandle) -> bool:
        """``True`` when the container still runs; ``WorkloadUnreachable`` when the engine
        cannot say (a live container must not be taken for a dead one)."""
        alive = await self.is_alive(handle)
        if alive is None:
            msg = f"cannot reach the Docker engine at {self.url} to adopt {self._label(handle)}"
            raise WorkloadUnreachable(msg)
        return alive

    async def containers(
        self, agent_id: AgentId | None = None, *, ledger_id: str | None = None
    ) -> list[ContainerRecord]:
        """The containers accelkit made on this engine (of one agent, or all; of one ledger,
        or any), in any state."""
        labels = [LABEL_AGENT if agent_id is None else f"{LABEL_AGENT}={agent_id}"]
        if ledger_id is not None:
            labels.append(f"{LABEL_LEDGER}={ledger_id}")  # the engine wants every label given
        client = await self._engine.client()
        with self._engine.errors("listing accelkit's containers"):
            listed = await client.containers.list(all=True, filters=json.dumps({"label": labels}))
        records = []
        for item in listed:
            labels_of: dict[str, str] = item["Labels"] or {}
            names: list[str] = item["Names"] or [item.id]
            created = item["Created"] if "Created" in item else None  # noqa: SIM401 - no get()
            records.append(
                ContainerRecord(
                    id=item.id,
                    name=names[0].lstrip("/"),
                    agent_id=labels_of.get(LABEL_AGENT, ""),
                    workload_id=labels_of.get(LABEL_WORKLOAD, ""),
                    ledger_key=labels_of.get(LABEL_LEDGER_KEY, ""),
                    state=str(item["State"]).lower(),
                    engine=self.url,
                    ledger_id=labels_of.get(LABEL_LEDGER, ""),
                    created=float(created or 0),
                )
            )
        return records

    async def clock(self) -> float:
        """The engine's time now (epoch seconds): containers' ages are measured with it, so
        that a remote engine's clock being off never makes a new container look old. Our own
        clock when the engine does not say."""
        client = await self._engine.client()
        with self._engine.errors("asking its time"):
            info = await client.system.info()
        engine_time = _epoch(info.get("SystemTime"))
        return time.time() if engine_time is None else engine_time

    def _label(self, handle: WorkloadHandle) -> str:
        return container_label(handle)

    async def close(self) -> None:
        """Stop copying output and close the engine connection."""
        for pump in self._pumps.values():
            await pump.cancel()
        self._pumps.clear()
        self._ended.clear()
        await self._engine.close()
