"""The DRA driver process: slices published, the kubelet's plugin served, bookings reconciled.

:class:`DraDriver` publishes the agent's devices as the node's ResourceSlice pool (again on every
health change, at once), serves the registration socket in the kubelet's plugin registry and
the DRA socket (``dra/v1`` and the ``v1alpha1`` health service) in its plugins directory
(claims are read from a watch, :mod:`~accelkit.bridge.dra.claim_cache`), and every
``interval`` serves again what went missing, asks the plugins for health, publishes what other
workloads of the ledger hold now (``accelkit run``, Slurm, the device-plugin bridge: taken out
of the slices) and runs the ledger's full reconciliation, which frees the bookings of claims
that are gone (the ``k8s-claims`` runtime tells). An API server that cannot be reached at start
is tried again with a growing wait, each try said; a missing kubelet directory is said once and
looked for again at every tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import grpc

from accelkit.bridge.dra.api import dra_health_v1alpha1_pb2_grpc as health_grpc
from accelkit.bridge.dra.api import dra_v1_pb2_grpc as dra_grpc
from accelkit.bridge.dra.api import pluginregistration_v1_pb2_grpc as reg_grpc
from accelkit.bridge.dra.claim_cache import ClaimCache
from accelkit.bridge.dra.claim_cdi import DEFAULT_CDI_DIR, ClaimSpecs
from accelkit.bridge.dra.claims import CLAIM_PREFIX
from accelkit.bridge.dra.devices import DraDevice, Held, dra_devices
from accelkit.bridge.dra.prepare import ClaimPreparer
from accelkit.bridge.dra.publisher import PublishFailed, SlicePublisher, api_problem
from accelkit.bridge.dra.services import DraPluginService, HealthService, RegistrationService
from accelkit.errors import UnknownAgent
from accelkit.health import DeviceHealth
from accelkit.node import Node
from accelkit.runtime.k8s_claims import REQUEST_TIMEOUT, api_client
from accelkit.types import AgentId, DeviceId, DeviceName

__all__ = ["DraDriver", "DraSettings", "DriverEvent"]

log = logging.getLogger(__name__)

#: what the driver reports as it runs: ``{"event": ..., ...}`` (printed by the command)
DriverEvent = Mapping[str, Any]
#: the longest wait between two tries to reach the API server at start, in seconds
MAX_BACKOFF = Decimal(30)


@attrs.frozen
class DraSettings:
    """Where the driver serves and publishes."""

    node_name: str
    kubeconfig: str
    driver: str = "accelkit.io"
    registry_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    plugins_dir: Path = Path("/var/lib/kubelet/plugins")
    cdi_dir: Path = DEFAULT_CDI_DIR
    interval: Decimal = Decimal(5)
    first_backoff: Decimal = Decimal("0.5")

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.plugins_dir / self.driver / "dra.sock"


class DraDriver:
    """One agent's devices as a DRA driver; see the module docstring."""

    def __init__(
        self,
        node: Node,
        agent_id: AgentId,
        settings: DraSettings,
        echo: Callable[[DriverEvent], None] = lambda _event: None,
        api: Any = None,
    ) -> None:
        agent = UnknownAgent.look_up(node.agents, agent_id)
        self.node = node
        self.agent = agent
        self.settings = settings
        self.echo = echo
        self.api = api if api is not None else api_client(settings.kubeconfig)
        from kubernetes import client

        self.resource_api = client.ResourceV1Api(self.api)
        self.publisher = SlicePublisher(
            self.resource_api, driver=settings.driver, node=settings.node_name, agent=agent_id
        )
        self.specs = ClaimSpecs(settings.cdi_dir, settings.driver)
        self.claims = ClaimCache(self.resource_api, settings.driver, self._read_claim)
        self.preparer = ClaimPreparer(
            node,
            agent_id,
            driver=settings.driver,
            pool=settings.node_name,
            node_name=settings.node_name,
            kubeconfig=settings.kubeconfig,
            specs=self.specs,
            read_claim=self.claims.get,
            devices=self.devices,
        )
        self.registration: grpc.aio.Server | None = None
        self.dra: grpc.aio.Server | None = None
        self.registered: bool | None = None
        self._generation = 0
        self._changed = asyncio.Condition()
        self._said: set[str] = set()
        self._listed: tuple[int, list[DraDevice]] = (-1, [])
        self._held: Held = {}
        self._held_seq = -1

    # -- devices and their changes ------------------------------------------------------------

    def devices(self) -> list[DraDevice]:
        """The agent's devices with their health, made again after every change on the health
        board (which also says devices added and removed)."""
        if self._listed[0] != self._generation:
            self._listed = (self._generation, dra_devices(self.agent, self.node.health.snapshot()))
        return self._listed[1]

    def held(self) -> Held:
        """What workloads other than this agent's claims hold, from the ledger (read again
        only when it changed)."""
        ledger = self.node.bookkeeper.ledger
        if (seq := ledger.seq) == self._held_seq:
            return self._held
        found: dict[tuple[DeviceName, DeviceId], tuple[Decimal, tuple[str, ...]]] = {}
        for (agent, workload), record in ledger.scan().records.items():
            if agent == self.agent.agent_id and workload.startswith(CLAIM_PREFIX):
                continue  # the scheduler counts these itself
            for plugin, slots in record.allocation.items():
                for devices in slots.values():
                    for device, amount in devices.items():
                        total, holders = found.get((plugin, device), (Decimal(0), ()))
                        found[(plugin, device)] = (total + amount, (*holders, workload))
        self._held, self._held_seq = found, seq
        return found

    def published_devices(self) -> list[DraDevice]:
        """The devices as the slices say them: with their health and what others hold."""
        return dra_devices(self.agent, self.node.health.snapshot(), self.held())

    def health_listing(self) -> list[tuple[DraDevice, DeviceHealth | None]]:
        snapshot = self.node.health.snapshot()
        return [(d, snapshot.get(d.plugin, {}).get(d.device_id)) for d in self.devices()]

    async def next_generation(self, seen: int) -> int:
        async with self._changed:
            await self._changed.wait_for(lambda: self._generation != seen)
            return self._generation

    async def _bump(self) -> None:
        async with self._changed:
            self._generation += 1
            self._changed.notify_all()

    async def _read_claim(self, namespace: str, name: str) -> Any:
        return await asyncio.to_thread(
            self.resource_api.read_namespaced_resource_claim,
            name,
            namespace,
            _request_timeout=REQUEST_TIMEOUT,
        )

    # -- saying things ----------------------------------------------------------------------------

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", message)
            self.echo({"event": "warning", "message": message})

    def _on_registration(self, registered: bool, error: str) -> None:
        self.registered = registered
        if registered:
            self.echo({"event": "registered", "driver": self.settings.driver})
        else:
            self.echo({"event": "warning", "message": f"the kubelet refused the driver: {error}"})

    # -- the API server -------------------------------------------------------------------------

    async def connect(self) -> None:
        """Read the pool's earlier slices, trying again with a growing wait until the API
        server answers (each failed try said)."""
        wait = self.settings.first_backoff
        while True:
            try:
                await self.publisher.start()
                self.echo({"event": "api-server", "host": self.api.configuration.host})
                return
            except Exception as exc:  # urllib3 connection errors, the client's ApiException
                message = (
                    f"cannot reach the API server at {self.api.configuration.host} "
                    f"({api_problem(exc)}); trying again in {wait} s"
                )
                log.warning("%s", message)
                self.echo({"event": "warning", "message": message})
                await asyncio.sleep(float(wait))
                wait = min(wait * 2, MAX_BACKOFF)

    async def publish(self, *, force: bool = False) -> None:
        """Publish the devices if they changed; a failure is said once until it clears."""
        try:
            if await self.publisher.publish(self.published_devices(), force=force):
                self.echo({"event": "published", "generation": self.publisher.generation})
            self._said = {k for k in self._said if not k.startswith("publish:")}
        except PublishFailed as exc:
            self._say_once(f"publish:{exc}", f"{exc}; trying again")

    # -- the kubelet's sockets ------------------------------------------------------------------

    async def _start_server(self, path: Path, add: Callable[[grpc.aio.Server], None]) -> Any:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = grpc.aio.server()
        add(server)
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        return server

    def _registration_service(self) -> RegistrationService:
        return RegistrationService(
            self.settings.driver, str(self.settings.dra_socket), self._on_registration
        )

    async def ensure_serving(self) -> None:
        """Serve the DRA socket and the registration socket where either is missing."""
        registry, plugins = self.settings.registry_dir, self.settings.plugins_dir
        for what, folder in (("plugin registry", registry), ("plugins", plugins)):
            if not folder.is_dir():
                self._say_once(
                    f"dir:{folder}",
                    f"no kubelet {what} directory at {folder} (is the kubelet running, with "
                    "DRA?); looking again every tick",
                )
                return
        self._said = {k for k in self._said if not k.startswith("dir:")}
        if self.dra is None or not self.settings.dra_socket.exists():
            if self.dra is not None:
                await self.dra.stop(0)
            self.settings.dra_socket.parent.mkdir(parents=True, exist_ok=True)
            service = DraPluginService(self.preparer, self.settings.node_name)
            health = HealthService(self.health_listing, self.next_generation, service.pool)

            info = self._registration_service()

            def add_dra(server: grpc.aio.Server) -> None:
                dra_grpc.add_DRAPluginServicer_to_server(service, server)  # type: ignore[no-untyped-call]
                health_grpc.add_DRAResourceHealthServicer_to_server(health, server)  # type: ignore[no-untyped-call]
                # GetInfo here too: a probe of the DRA socket that does no work
                reg_grpc.add_RegistrationServicer_to_server(info, server)  # type: ignore[no-untyped-call]

            self.dra = await self._start_server(self.settings.dra_socket, add_dra)
        if self.registration is None or not self.settings.registration_socket.exists():
            if self.registration is not None:
                await self.registration.stop(0)
            registration = self._registration_service()

            def add_reg(server: grpc.aio.Server) -> None:
                reg_grpc.add_RegistrationServicer_to_server(registration, server)  # type: ignore[no-untyped-call]

            self.registration = await self._start_server(self.settings.registration_socket, add_reg)
            self.echo({"event": "serving", "socket": str(self.settings.registration_socket)})

    # -- running --------------------------------------------------------------------------------

    async def tick(self) -> None:
        """Serve what is missing, refresh health, publish, free the bookings of gone claims."""
        self.preparer.hand_overs.write()  # the reconciliation judges them by their handle
        await self.ensure_serving()
        await self.node.health_keeper.refresh()
        await self.publish()
        report = await self.node.bookkeeper.reconcile()
        for torn in report.torn_down:
            if torn.workload_id.startswith("k8s-claim:"):
                self.specs.remove(torn.workload_id.rsplit(":", 1)[-1])
            self.echo({"event": "released", "workload": torn.workload_id})

    def remove_stale_specs(self) -> list[str]:
        """Remove the CDI specs of claims the ledger no longer books (freed while no driver
        ran); the uids removed."""
        booked = {
            workload.rsplit(":", 1)[-1]
            for (_agent, workload) in self.node.bookkeeper.ledger.scan().records
            if workload.startswith(CLAIM_PREFIX)
        }
        stale = [uid for uid in self.specs.uids() if uid not in booked]
        for uid in stale:
            self.specs.remove(uid)
        return stale

    async def _follow_health(self) -> None:
        async with self.node.health.changes() as changes:
            async for _change in changes:
                await self._bump()
                await self.publish()

    async def run(self) -> None:
        """Serve until cancelled; the sockets are removed, the slices and bookings stay."""
        await self.connect()
        self.remove_stale_specs()
        self.claims.start()
        follower = asyncio.create_task(self._follow_health())
        try:
            async with self.node.health_keeper.watching():
                while True:
                    await self.tick()
                    await asyncio.sleep(float(self.settings.interval))
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
            self.claims.stop()
            self.preparer.hand_overs.write()
            await self.close()

    async def close(self) -> None:
        """Stop both servers and remove their sockets."""
        for server in (self.registration, self.dra):
            if server is not None:
                await server.stop(0)
        self.registration = self.dra = None
        for path in (self.settings.registration_socket, self.settings.dra_socket):
            with contextlib.suppress(OSError):
                path.unlink()
