"""The bridge process: one device plugin server per extended resource, kept registered.

:class:`K8sBridge` serves each of an agent's resources on its own unix socket in the kubelet's
device-plugins directory and registers it on ``kubelet.sock``. Every ``release-interval`` (a
tick) it re-registers when the kubelet restarted (a new ``kubelet.sock``, or its own socket
removed), asks the plugins for health, reads the kubelet's PodResources once (the one answer
every server and the reconciliation of this process share), names the pod and container of
each booking the kubelet now lists, and runs the ledger's full reconciliation, which frees each
booking whose devices the kubelet no longer lists (the ``kubelet-pods`` runtime tells its
liveness). A device that anything else in the ledger holds is advertised ``Unhealthy`` while
held, said once in the log and noted on the holder's workload (``accelkit status``). Each
``ListAndWatch`` stream gets a new list on every such change, health change or rediscovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import grpc

from accelkit.bridge.hand_over import HandOvers
from accelkit.bridge.k8s.device_plugin import OPTIONS, DevicePluginService
from accelkit.bridge.k8s.holders import ForeignHolders, name_pods
from accelkit.bridge.k8s.registration import KubeletWatch, RegistrationFailed, register
from accelkit.bridge.k8s.resources import K8sDevice, K8sResource, k8s_resources
from accelkit.config.model import K8sBridgeConfig
from accelkit.errors import InvalidResourceArgument, UnknownAgent
from accelkit.node import Node
from accelkit.runtime.kubelet_api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accelkit.runtime.kubelet_pods import pod_resources
from accelkit.types import AgentId

__all__ = ["BridgeEvent", "K8sBridge"]

log = logging.getLogger(__name__)

#: what the bridge reports as it runs: ``{"event": ..., ...}`` (printed by the command)
BridgeEvent = Mapping[str, Any]


class K8sBridge:
    """Serves one agent's resources to the kubelet; see the module docstring."""

    def __init__(
        self,
        node: Node,
        agent_id: AgentId,
        config: K8sBridgeConfig,
        echo: Callable[[BridgeEvent], None] = lambda _event: None,
    ) -> None:
        agent = UnknownAgent.look_up(node.agents, agent_id)
        self.node = node
        self.agent = agent
        self.config = config
        self.echo = echo
        self.resources = k8s_resources(agent, config.domain)
        if not self.resources:
            msg = (
                f"agent {agent_id!r} has no device the kubelet can schedule (no accelerator "
                "slot handed out whole)"
            )
            raise InvalidResourceArgument(msg)
        self.watch = KubeletWatch(config.kubelet_dir)
        self.servers: dict[str, grpc.aio.Server] = {}
        self.pod_resources_reachable: bool | None = None
        self._generation = 0
        self._changed = asyncio.Condition()
        self._said: set[str] = set()
        self._listings: dict[str, tuple[int, list[K8sDevice]]] = {}
        self.pods = pod_resources(str(config.pod_resources_socket))
        self.foreign = ForeignHolders(node, agent_id, self.resources)
        #: the bookings every server answered, handed over after the answers
        self.hand_overs = HandOvers(node.bookkeeper)

    # -- what ListAndWatch streams ----------------------------------------------------------------

    def listing(self, resource: K8sResource) -> list[K8sDevice]:
        """The resource's devices with their effective health now (kept until the health
        board publishes a change: the generation moves on)."""
        cached = self._listings.get(resource.name)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        health = self.node.health.snapshot().get(resource.plugin, {})
        found = resource.devices(self.agent, health)
        self._listings[resource.name] = (self._generation, found)
        return found

    async def next_generation(self, seen: int) -> int:
        """Wait until the device lists may have changed since generation ``seen``."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._generation != seen)
            return self._generation

    async def bump(self) -> None:
        """Tell every ``ListAndWatch`` stream to look again."""
        async with self._changed:
            self._generation += 1
            self._changed.notify_all()

    # -- serving and registering ------------------------------------------------------------------

    async def _serve(self, resource: K8sResource) -> None:
        path = self.config.kubelet_dir / resource.socket_name
        if (old := self.servers.pop(resource.name, None)) is not None:
            await old.stop(0)
        if not self.config.kubelet_dir.is_dir():  # (checked first: the unlink needs a directory)
            msg = f"no kubelet device-plugins directory at {self.config.kubelet_dir}"
            if self.config.kubelet_dir.exists():
                msg += " (something else is there, not a directory)"
            raise RegistrationFailed(msg)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = grpc.aio.server()
        service = DevicePluginService(
            self.node,
            self.agent.agent_id,
            resource,
            pod_resources=str(self.config.pod_resources_socket),
            admission_grace=self.config.admission_grace,
            settle=self.config.kubelet_settle,
            listing=self.listing,
            changed=self.next_generation,
            held=lambda: self.foreign.held.get(resource.name, {}),
            hand_overs=self.hand_overs,
        )
        pb_grpc.add_DevicePluginServicer_to_server(service, server)  # type: ignore[no-untyped-call]
        try:
            server.add_insecure_port(f"unix://{path}")
        except RuntimeError as exc:  # grpc could not bind the socket
            msg = f"cannot serve {resource.name} on {path}: {exc}"
            raise RegistrationFailed(msg) from None
        await server.start()
        self.servers[resource.name] = server

    async def ensure_registered(self) -> None:
        """Serve every resource whose socket is gone and (re-)register when the kubelet is new.

        Raises ``RegistrationFailed`` while the kubelet cannot be reached (tried again later).
        """
        lost = [
            r
            for r in self.resources
            if r.name not in self.servers or not (self.config.kubelet_dir / r.socket_name).exists()
        ]
        for resource in lost:
            await self._serve(resource)
        if not lost and not self.watch.needs_registration():
            return
        seen = self.watch.current()
        for resource in self.resources:
            await register(self.config.kubelet_dir, resource.socket_name, resource.name, OPTIONS)
            self.echo(
                {"event": "registered", "resource": resource.name, "endpoint": resource.socket_name}
            )
        self.watch.registered_with = seen

    def _say_once(self, key: str, event: BridgeEvent) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", event.get("message"))
            self.echo(event)

    async def _tick(self) -> None:
        self.hand_overs.write()  # naming pods and the reconciliation read them handed over
        try:
            await self.ensure_registered()
            self._said = {k for k in self._said if not k.startswith("registration:")}
        except RegistrationFailed as exc:
            message = f"{exc}; trying again"
            self._say_once(f"registration:{message}", {"event": "warning", "message": message})
        await self.node.health_keeper.refresh()
        await self._read_pod_resources()
        report = await self.node.bookkeeper.reconcile()
        for torn in report.torn_down:
            self.echo({"event": "released", "workload": torn.workload_id})
        await self._look_at_holders()

    async def _look_at_holders(self) -> None:
        changes = self.foreign.update()
        for event in changes:
            log.warning("%s", event["message"])
            self.echo(event)
        if changes:
            await self.bump()

    async def _read_pod_resources(self) -> None:
        socket = str(self.config.pod_resources_socket)
        try:
            listing = await self.pods.read(max_age=Decimal(0))
        except Exception as exc:  # grpc errors, a missing socket
            self.pod_resources_reachable = False
            detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            message = (
                f"cannot ask the kubelet's PodResources API at {socket} ({detail}); the "
                "bookings made for pods are kept until 'accelkit release'"
            )
            self._say_once("pod-resources", {"event": "warning", "message": message})
            return
        for workload, pod in name_pods(self.node, self.agent.agent_id, self.resources, listing):
            self.echo({"event": "pod", "workload": workload, "pod": pod})
        if self.pod_resources_reachable is not True:
            self._said.discard("pod-resources")
            self.echo({"event": "pod-resources", "socket": socket})
        self.pod_resources_reachable = True

    async def _follow_health(self) -> None:
        async with self.node.health.changes() as changes:
            async for _change in changes:
                await self.bump()

    async def run(self) -> None:
        """Serve until cancelled; the sockets are removed, the bookings stay."""
        follower = asyncio.create_task(self._follow_health())
        try:
            async with self.node.health_keeper.watching():
                await self._look_at_holders()  # before the kubelet first asks for the list
                while True:
                    await self._tick()
                    await asyncio.sleep(float(self.config.release_interval))
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
            self.hand_overs.write()
            await self.close()

    async def close(self) -> None:
        """Stop every server and remove its socket."""
        for name, server in list(self.servers.items()):
            await server.stop(0)
            del self.servers[name]
        for resource in self.resources:
            with contextlib.suppress(OSError):
                (self.config.kubelet_dir / resource.socket_name).unlink()
