"""A kubelet stand-in for the bridge's tests: not a kubelet, but it speaks the kubelet's side of
the device plugin API v1beta1 and the PodResources API v1 over real unix sockets.

It serves ``Registration`` on ``<dir>/kubelet.sock``; for every plugin that registers it dials
the plugin's socket, reads ``ListAndWatch`` into :attr:`Plugin.lists`, and lets a test call
``GetPreferredAllocation`` and ``Allocate`` like the kubelet's device manager. It serves
``PodResourcesLister.List`` on its own socket from :attr:`KubeletStandIn.pods`, and
:meth:`KubeletStandIn.restart` does what a kubelet restart does to the directory: every
socket in it removed, a new ``kubelet.sock``, no plugin registered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import grpc

from accelkit.runtime.kubelet_api import deviceplugin_v1beta1_pb2 as dp
from accelkit.runtime.kubelet_api import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from accelkit.runtime.kubelet_api import podresources_v1_pb2 as pr
from accelkit.runtime.kubelet_api import podresources_v1_pb2_grpc as pr_grpc


class Plugin:
    """One registered device plugin as the stand-in sees it."""

    def __init__(self, request: dp.RegisterRequest, directory: Path) -> None:
        self.request = request
        self.channel = grpc.aio.insecure_channel(f"unix://{directory / request.endpoint}")
        self.stub: Any = dp_grpc.DevicePluginStub(self.channel)
        self.lists: list[list[tuple[str, str, list[int]]]] = []
        self.list_times: list[float] = []
        self.changed = asyncio.Event()
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            async for reply in self.stub.ListAndWatch(dp.Empty()):
                self.lists.append(
                    [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in reply.devices]
                )
                self.list_times.append(time.perf_counter())
                self.changed.set()

    async def next_list(self, after: int, timeout: float = 15.0) -> list[Any]:
        """The first list beyond the ``after`` first ones."""
        deadline = time.monotonic() + timeout
        while len(self.lists) <= after:
            self.changed.clear()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no ListAndWatch update after {after}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 0.2)
        return self.lists[after]

    async def options(self) -> dp.DevicePluginOptions:
        return await self.stub.GetDevicePluginOptions(dp.Empty(), timeout=10)

    async def preferred(self, available: list[str], must: list[str], size: int) -> list[str]:
        request = dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available,
                    must_include_deviceIDs=must,
                    allocation_size=size,
                )
            ]
        )
        reply = await self.stub.GetPreferredAllocation(request, timeout=10)
        return list(reply.container_responses[0].deviceIDs)

    async def allocate(self, *containers: list[str]) -> dp.AllocateResponse:
        request = dp.AllocateRequest(
            container_requests=[dp.ContainerAllocateRequest(devices_ids=c) for c in containers]
        )
        return await self.stub.Allocate(request, timeout=30)

    async def close(self) -> None:
        self.reader.cancel()
        await self.channel.close()


class KubeletStandIn:
    """Registration on ``<directory>/kubelet.sock``, PodResources on ``pod_resources``."""

    def __init__(self, directory: Path, pod_resources: Path) -> None:
        self.directory = directory
        self.pod_resources = pod_resources
        self.plugins: dict[str, Plugin] = {}
        self.registered = asyncio.Event()
        self.registrations: list[dp.RegisterRequest] = []
        #: (pod, resource, device ids) the PodResources API lists
        self.pods: list[tuple[str, str, list[str]]] = []
        self.pod_resources_up = True
        #: how many ``List`` calls the PodResources API answered
        self.list_calls = 0
        self._server: grpc.aio.Server | None = None
        self._pr_server: grpc.aio.Server | None = None

    # -- Registration (the kubelet's side) ---------------------------------------------------

    async def Register(self, request: dp.RegisterRequest, context: Any) -> dp.Empty:
        if request.version != "v1beta1":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unsupported version")
        old = self.plugins.pop(request.resource_name, None)
        if old is not None:
            await old.close()
        self.registrations.append(request)
        self.plugins[request.resource_name] = Plugin(request, self.directory)
        self.registered.set()
        return dp.Empty()

    # -- PodResources -------------------------------------------------------------------------

    async def List(self, request: pr.ListPodResourcesRequest, context: Any) -> Any:
        self.list_calls += 1
        if not self.pod_resources_up:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "pod resources down")
        return pr.ListPodResourcesResponse(
            pod_resources=[
                pr.PodResources(
                    name=pod,
                    namespace="default",
                    containers=[
                        pr.ContainerResources(
                            name="main",
                            devices=[pr.ContainerDevices(resource_name=res, device_ids=ids)],
                        )
                    ],
                )
                for pod, res, ids in self.pods
            ]
        )

    async def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not in the stand-in")

    async def Get(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not in the stand-in")

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        dp_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.directory / 'kubelet.sock'}")
        await server.start()
        self._server = server
        if self._pr_server is None:
            self.pod_resources.parent.mkdir(parents=True, exist_ok=True)
            pr_server = grpc.aio.server()
            pr_grpc.add_PodResourcesListerServicer_to_server(self, pr_server)
            pr_server.add_insecure_port(f"unix://{self.pod_resources}")
            await pr_server.start()
            self._pr_server = pr_server

    async def wait_registered(self, resource: str, count: int = 1, timeout: float = 30.0) -> Plugin:
        deadline = time.monotonic() + timeout
        while sum(r.resource_name == resource for r in self.registrations) < count:
            if time.monotonic() > deadline:
                seen = [r.resource_name for r in self.registrations]
                raise TimeoutError(f"{resource} not registered {count}x (seen {seen})")
            await asyncio.sleep(0.05)
        return self.plugins[resource]

    async def stop(self) -> None:
        for plugin in self.plugins.values():
            await plugin.close()
        self.plugins.clear()
        if self._server is not None:
            await self._server.stop(0)
            self._server = None

    async def restart(self) -> None:
        """What a kubelet restart does: plugins forgotten, every socket removed, a new one."""
        await self.stop()
        for path in self.directory.iterdir():
            if path.is_socket():
                path.unlink()
        await self.start()

    async def close(self) -> None:
        await self.stop()
        if self._pr_server is not None:
            await self._pr_server.stop(0)
            self._pr_server = None
