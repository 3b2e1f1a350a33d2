"""The docker runtime: a container per workload, through the Docker Engine API (DESIGN §14).

It drives dockerd and podman's Docker-compatible service alike, through ``aiodocker``. The
container is created with the rendered body (fitted to the engine, see
:mod:`accelkit.runtime.docker_body`) and the labels ``io.accelkit.agent``,
``io.accelkit.workload``, ``io.accelkit.ledger-key`` and ``io.accelkit.ledger`` (the booking
ledger's identity), so that any later process finds it by id (:meth:`DockerRuntime.is_alive`)
or by label (:meth:`DockerRuntime.containers`), also when no record names it any more
(:mod:`accelkit.workload.orphans`).

The engine client (aiohttp) takes a tenth of a second to import, paid by every ``accelkit``
command that builds the runtimes; it is imported on the first call that needs the engine.
A run hides that and the engine's first answers behind the opening of its node and its
booking (:func:`engine_ahead`): the client is imported on a thread of its own (much of the
import loads TLS certificates, with the interpreter's lock released) and the engine is asked
for its version and features in the background; the runtime's first create takes the
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from accelkit.runtime.base import LaunchSpec, Runtime, WorkloadHandle
from accelkit.runtime.docker_names import container_name, docker_host
from accelkit.runtime.docker_values import TERMINAL, ContainerExit, ContainerRecord, OutputTarget
from accelkit.types import AgentId, Workload, WorkloadType

if TYPE_CHECKING:
    from accelkit.runtime.docker_engine import DockerEngine
    from accelkit.runtime.docker_ops import ContainerOps

__all__ = [
    "TERMINAL",
    "ContainerExit",
    "ContainerRecord",
    "DockerRuntime",
    "OutputTarget",
    "engine_ahead",
]

_OPS_MODULE = "accelkit.runtime.docker_ops"
_importing: list[threading.Thread] = []
#: engines connected to ahead of their runtime (:func:`engine_ahead`), by address
_AHEAD: dict[str, asyncio.Future[DockerEngine]] = {}


def _import_ops() -> None:
    """Import the container machinery; a failure is left to the import that needs it."""
    with contextlib.suppress(Exception):  # raised again, with its traceback, where it is used
        importlib.import_module(_OPS_MODULE)


def _ops_class() -> type[ContainerOps]:
    """``ContainerOps``, imported now (or once the thread of :func:`engine_ahead` has)."""
    return importlib.import_module(_OPS_MODULE).ContainerOps  # type: ignore[no-any-return]


async def _connect_ahead(url: str, state_dir: Path | None) -> DockerEngine:
    await asyncio.to_thread(_ops_class)
    from accelkit.runtime.docker_engine import DockerEngine, KnownVersions

    engine = DockerEngine(url, None if state_dir is None else KnownVersions(state_dir))
    try:
        await engine.facts()
    except BaseException:
        await engine.close()
        raise
    return engine


def _retrieved(future: asyncio.Future[DockerEngine]) -> None:
    """An engine nobody took (the run was refused first) logs no "never retrieved" error."""
    if not future.cancelled():
        future.exception()


@contextlib.asynccontextmanager
async def engine_ahead(
    url: str | None = None, *, state_dir: Path | None = None
) -> AsyncIterator[None]:
    """Connect to the engine at ``url`` (else ``DOCKER_HOST``, else the default socket) and
    ask it what a create needs while the block does other work; the first
    :class:`DockerRuntime` of that engine to create a container in the block takes the
    connection (and its failure, as its own). What nobody took is closed at the end.

    The client is imported on a thread of its own, begun at once. With the ledger's
    ``state_dir`` the engine is asked at the API version it last spoke there, in one round
    trip (:class:`~accelkit.runtime.docker_engine.KnownVersions`).
    """
    if not _importing:
        thread = threading.Thread(target=_import_ops, name="docker client import", daemon=True)
        _importing.append(thread)
        thread.start()
    url = docker_host(url)
    future = asyncio.ensure_future(_connect_ahead(url, state_dir))
    future.add_done_callback(_retrieved)
    _AHEAD[url] = future
    try:
        yield
    finally:
        if _AHEAD.get(url) is future:
            del _AHEAD[url]
            if not future.done():
                future.cancel()
                await asyncio.wait((future,))
            elif not future.cancelled() and future.exception() is None:
                await future.result().close()


class DockerRuntime(Runtime):
    """Workloads as containers of a Docker Engine API (dockerd or podman).

    ``url`` is the engine's address (``unix:///path``, ``tcp://host:port``); without it
    ``DOCKER_HOST``, else ``/var/run/docker.sock``. The containers' output is copied to
    ``output`` while they run (our own stdout and stderr by default; ``None`` copies nothing).
    A handle names the engine its container was made on; calls with it go to that engine, so
    a later ``DOCKER_HOST`` never makes a live container look gone.
    Engine failures are :class:`~accelkit.runtime.base.RuntimeUnavailable` (no engine, no such
    image) or :class:`~accelkit.errors.WorkloadError` (the engine refused), never aiohttp's.
    """

    name = "docker"
    workload_type = WorkloadType.CONTAINER

    def __init__(self, url: str | None = None, *, output: OutputTarget | None = TERMINAL) -> None:
        self.url = docker_host(url)
        self._output = output
        self._ops: dict[str, ContainerOps] = {}

    def _engine(self, handle: WorkloadHandle | None = None) -> ContainerOps:
        """The engine of ``handle`` (where its container was made), else this runtime's."""
        return self._engine_at(handle.details.get("engine") if handle is not None else None)

    def _engine_at(self, url: str | None) -> ContainerOps:
        """The engine at ``url``, else this runtime's."""
        url = url or self.url
        if (ops := self._ops.get(url)) is None:
            ops = self._ops[url] = _ops_class()(url, self._output)  # imported on first use
        return ops

    async def _take_ahead(self) -> None:
        """Take the engine :func:`engine_ahead` connects to, where it is this runtime's; where
        this runtime spoke to it already (the opening reconciliation asked about containers),
        only what it was told."""
        future = _AHEAD.get(self.url)
        if future is None or future.get_loop() is not asyncio.get_running_loop():
            return
        del _AHEAD[self.url]
        engine = await future  # its failure is this create's
        if (ops := self._ops.get(self.url)) is None:
            self._ops[self.url] = _ops_class()(self.url, self._output, engine)
        else:
            ops.learn(engine)
            await engine.close()

    async def new_workload(self, agent_id: AgentId) -> Workload:
        """A workload named like the container it becomes: ``accelkit-<agent>-<hex>``."""
        return Workload.container(container_name(agent_id))

    async def create(self, spec: LaunchSpec) -> WorkloadHandle:
        """Create the container, not started; ``RuntimeUnavailable`` for a missing image.

        The handle's ident is the container id; its details name the container, the engine
        and the image.
        """
        await self._take_ahead()
        return await self._engine().create(spec)

    async def start(self, handle: WorkloadHandle) -> None:
        """Start the container, its output copied from its first byte."""
        await self._engine(handle).start(handle)

    async def wait(self, handle: WorkloadHandle) -> int:
        """The container's exit status; an OOM kill is 137 (see :meth:`exit_notes`)."""
        return (await self.wait_exit(handle)).status

    async def wait_exit(self, handle: WorkloadHandle) -> ContainerExit:
        """Wait for the container to exit: its status and whether it was OOM-killed."""
        return await self._engine(handle).wait_exit(handle)

    async def exit_notes(self, handle: WorkloadHandle) -> list[str]:
        """An OOM kill or the engine's error, after :meth:`wait` and before :meth:`stop`."""
        return await self._engine(handle).exit_notes(handle)

    async def signal(self, handle: WorkloadHandle, signum: int) -> None:
        """Send ``signum`` to the container's main process; nothing if it no longer runs."""
        await self._engine(handle).signal(handle, signum)

    async def stop(self, handle: WorkloadHandle, grace: float) -> None:
        """The engine's stop (SIGTERM, SIGKILL after ``grace`` seconds), then removal."""
        await self._engine(handle).stop(handle, grace)

    async def discard(self, workload: Workload, handle: WorkloadHandle | None) -> None:
        """Remove the container (by its name when its creation was not recorded)."""
        await self._engine(handle).discard(workload, handle)

    async def is_alive(self, handle: WorkloadHandle) -> bool | None:
        """Inspect the container by id: a missing one is gone, a silent engine ``None``."""
        return await self._engine(handle).is_alive(handle)

    async def adopt(self, handle: WorkloadHandle) -> bool:
        """Whether the container still runs; ``RuntimeUnavailable`` when the engine cannot
        say (a live container must not be taken for a dead one)."""
        return await self._engine(handle).adopt(handle)

    async def containers(
        self,
        agent_id: AgentId | None = None,
        *,
        ledger_id: str | None = None,
        engine: str | None = None,
    ) -> list[ContainerRecord]:
        """The containers accelkit made on this engine, or on the one at ``engine`` (of one
        agent, or all; labelled with one ledger's identity, or any), in any state."""
        return await self._engine_at(engine).containers(agent_id, ledger_id=ledger_id)

    async def engine_clock(self, engine: str | None = None) -> float:
        """The engine's time now, in epoch seconds (``ContainerRecord.created`` is on it)."""
        return await self._engine_at(engine).clock()

    async def remove_container(self, container: ContainerRecord, grace: float) -> bool:
        """Stop (SIGTERM, SIGKILL after ``grace`` seconds) and remove a listed container;
        ``False`` when it was gone already."""
        handle = container.handle()
        return await self._engine(handle).stop(handle, grace)

    def describe(self, handle: WorkloadHandle) -> list[str]:
        """The container, its image and the engine."""
        name = handle.details.get("name")
        image = handle.details.get("image")
        line = f"docker container {name or handle.ident[:12]} ({handle.ident[:12]})"
        return [
            line + (f" of {image}" if image else ""),
            f"engine {handle.details.get('engine', self.url)}",
        ]

    async def close(self) -> None:
        """Stop copying output and close the engine connection."""
        for ops in self._ops.values():
            await ops.close()
        self._ops.clear()
