"""One kubelet device plugin service (v1beta1) for one extended resource of an agent.

``Allocate`` books each container's devices in the ledger (workload type container, id
``k8s:<resource>:<ids>``, a ``kubelet-pods`` handle and the intent of the first ``pre_create``
in the booking's one synced write, so no crash leaves a booking whose hook may have run
unrecorded) and runs the plugins' ``pre_create``; the merged config becomes the container's
envs, mounts, device specs and CDI device names. Once every container of the request is
booked, the records are handed over after the answer (:mod:`accelkit.bridge.hand_over`): no
process owns them, and the full reconciliation of any accelkit process finishes their teardown
when the kubelet no longer lists their devices.

The kubelet hands out a device of its resource only when no running container holds it, so a
booking of this resource that holds a device the kubelet hands out again is over (its pod left,
or it is the init container whose devices the pod's next container reuses): it is marked
superseded, finished, and the devices booked anew. A device anything else holds (``accelkit
run``, Slurm, a DRA claim) fails the whole request with ``FAILED_PRECONDITION`` naming the
holder, nothing booked; the bridge advertises such devices ``Unhealthy`` while they are held
and never prefers them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from decimal import Decimal
from typing import Any

import attrs
import grpc

from accelkit.bridge.hand_over import HandOvers
from accelkit.bridge.k8s.holders import pod_booking
from accelkit.bridge.k8s.preferred import preferred_devices
from accelkit.bridge.k8s.resources import HEALTHY, UNHEALTHY, K8sDevice, K8sResource
from accelkit.errors import AccelkitError
from accelkit.node import Node
from accelkit.runtime.kubelet_api import deviceplugin_v1beta1_pb2 as pb
from accelkit.runtime.kubelet_pods import kubelet_handle, superseded
from accelkit.runtime.render.cdi import cdi_device_name
from accelkit.types import AgentId, MountType, Workload, WorkloadConfig
from accelkit.workload.cdi_spec import default_cdi_kind
from accelkit.workload.lifecycle import WorkloadLifecycle
from accelkit.workload.reconcile_report import RecordKey

__all__ = ["DevicePluginService", "container_response"]

log = logging.getLogger(__name__)

#: what the plugin tells the kubelet: no PreStartContainer, GetPreferredAllocation answered
OPTIONS = pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


class AllocateRefused(Exception):
    """An ``Allocate`` that books nothing; ``code`` is the gRPC status the kubelet gets."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def container_response(
    config: WorkloadConfig, cdi_names: list[str], workload_id: str
) -> pb.ContainerAllocateResponse:
    """The kubelet's answer for one container from the hooks' merged config."""
    mounts = [
        pb.Mount(container_path=m.target, host_path=m.source, read_only=m.read_only)
        for m in config.mounts
        if m.type is MountType.BIND
    ]
    devices = [
        pb.DeviceSpec(container_path=m.target, host_path=m.source, permissions="rw")
        for m in config.mounts
        if m.type is MountType.DEVICE
    ]
    names = list(dict.fromkeys([*config.cdi_devices, *cdi_names]))
    return pb.ContainerAllocateResponse(
        envs=dict(config.env_vars),
        mounts=mounts,
        devices=devices,
        annotations={"io.accelkit.workload": workload_id},
        cdi_devices=[pb.CDIDevice(name=n) for n in names],
    )


class DevicePluginService:
    """The ``v1beta1.DevicePlugin`` service of one resource (registered with
    ``add_DevicePluginServicer_to_server``)."""

    def __init__(
        self,
        node: Node,
        agent_id: AgentId,
        resource: K8sResource,
        *,
        pod_resources: str,
        admission_grace: Decimal,
        settle: Decimal,
        listing: Callable[[K8sResource], list[K8sDevice]],
        changed: Callable[[int], Any],
        held: Callable[[], Mapping[str, str]] = dict,
        hand_overs: HandOvers | None = None,
    ) -> None:
        self.node = node
        self.agent_id = agent_id
        self.resource = resource
        self.pod_resources = pod_resources
        self.admission_grace = admission_grace
        self.settle = settle
        self._listing = listing
        #: the devices of this resource that something else in the ledger holds, and who
        self._held = held
        #: ``await changed(seen)`` returns the next generation after ``seen``
        self._changed = changed
        #: the bookings answered, handed over after the answer (shared by the process's servers)
        self.hand_overs = hand_overs if hand_overs is not None else HandOvers(node.bookkeeper)

    def _list(self) -> pb.ListAndWatchResponse:
        held = self._held()
        return pb.ListAndWatchResponse(
            devices=[
                pb.Device(
                    ID=d.device_id,
                    health=UNHEALTHY if d.device_id in held else d.health,
                    topology=None
                    if d.numa_node is None
                    else pb.TopologyInfo(nodes=[pb.NUMANode(ID=d.numa_node)]),
                )
                for d in self._listing(self.resource)
            ]
        )

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DevicePluginOptions:
        return OPTIONS

    async def ListAndWatch(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        """The device list now, and again after every health change or rediscovery."""
        seen = -1
        last: pb.ListAndWatchResponse | None = None
        while True:
            seen = await self._changed(seen)
            current = self._list()
            if current != last:
                last = current
                yield current

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PreferredAllocationResponse:
        numa: dict[str, int | None] = {
            d.device_id: d.numa_node for d in self._listing(self.resource)
        }
        held = self._held()
        return pb.PreferredAllocationResponse(
            container_responses=[
                pb.ContainerPreferredAllocationResponse(
                    deviceIDs=preferred_devices(
                        [d for d in r.available_deviceIDs if d not in held],
                        list(r.must_include_deviceIDs),
                        r.allocation_size,
                        numa,
                    )
                )
                for r in request.container_requests
            ]
        )

    async def Allocate(
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AllocateResponse:
        """Book and prepare every container's devices; all or nothing."""
        done: list[_Booked] = []
        try:
            for container in request.container_requests:
                done.append(await self._allocate_one(list(container.devices_ids)))
        except AllocateRefused as exc:
            for booked in reversed(done):
                await booked.lifecycle.terminate()  # post_terminate, then freed
            log.warning("Allocate of %s refused: %s", self.resource.name, exc)
            await context.abort(exc.code, str(exc))
        for booked in done:
            self.hand_overs.add(booked.key)
        return pb.AllocateResponse(container_responses=[b.response for b in done])

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()  # not required (see OPTIONS)

    async def _allocate_one(self, ids: list[str]) -> _Booked:
        known: dict[str, K8sDevice] = {d.device_id: d for d in self._listing(self.resource)}
        if not ids:
            raise AllocateRefused(grpc.StatusCode.INVALID_ARGUMENT, "no device ids requested")
        unknown = sorted({i for i in ids if i not in known})
        if unknown:
            msg = (
                f"{self.resource.name}: unknown device ids {', '.join(unknown)} "
                f"(this node has {', '.join(known) or 'none'})"
            )
            raise AllocateRefused(grpc.StatusCode.INVALID_ARGUMENT, msg)
        if len(set(ids)) != len(ids):
            msg = f"{self.resource.name}: a device id is requested twice: {', '.join(ids)}"
            raise AllocateRefused(grpc.StatusCode.INVALID_ARGUMENT, msg)
        unhealthy = self.node.health.unallocatable(self.resource.plugin)  # now, not as listed
        sick = sorted(i for i in ids if i in unhealthy or known[i].health != HEALTHY)
        if sick:
            msg = f"{self.resource.name}: devices {', '.join(sick)} are unhealthy"
            raise AllocateRefused(grpc.StatusCode.FAILED_PRECONDITION, msg)
        devices = [known[i] for i in ids]
        workload_id = self.resource.workload_id(ids)
        handed = self._supersede(ids, workload_id)
        handle = kubelet_handle(
            self.resource.name, ids, self.pod_resources, self.admission_grace, self.settle
        )
        try:
            record = await self.node.bookkeeper.book_devices(
                self.agent_id,
                Workload.container(workload_id),
                self.resource.allocation(devices),
                handle=handle,
                started=True,  # pre_create's intent in the same write, synced
            )
        except AccelkitError as exc:
            holders = self._holders(ids)
            msg = f"{self.resource.name}: cannot book {', '.join(ids)}: " + (
                "; ".join(holders) if holders else str(exc)
            )
            raise AllocateRefused(grpc.StatusCode.FAILED_PRECONDITION, msg) from None
        for old in handed:
            log.info("%s: %s handed over to %s", self.resource.name, old, workload_id)
        lifecycle = self.node.lifecycle(record)
        try:
            config = await lifecycle.prepare()  # a failure tears down and frees
        except AccelkitError as exc:
            msg = f"{self.resource.name}: pre_create refused {', '.join(ids)}: {exc}"
            raise AllocateRefused(grpc.StatusCode.FAILED_PRECONDITION, msg) from None
        kind = default_cdi_kind(self.agent_id)
        cdi = [f"{kind}={cdi_device_name(self.resource.plugin, i)}" for i in ids]
        return _Booked(record.key, lifecycle, container_response(config, cdi, workload_id))

    def _supersede(self, ids: list[str], workload_id: str) -> list[str]:
        """Mark the pod bookings of this resource that hold any of ``ids`` as superseded
        (the kubelet handed their devices out again); their ids. The booking that follows
        finishes and frees them (see the module docstring)."""
        ledger = self.node.bookkeeper.ledger
        found: list[str] = []
        if not ledger.holders(self.resource.plugin, ids):  # the usual case: no write lock
            return found
        self.hand_overs.write()  # a booking of this process answered just now is one too
        with ledger.transaction():
            keys = {(h.agent_id, h.workload_id) for h in ledger.holders(self.resource.plugin, ids)}
            for key in sorted(keys):
                record = ledger.read(*key)
                if record is None or record.handle is None:
                    continue
                if not pod_booking(record, self.agent_id, self.resource.name):
                    continue
                if "superseded-by" not in record.handle.details:
                    ledger.write(record.with_handle(superseded(record.handle, workload_id)))
                found.append(key[1])
        return found

    def _holders(self, ids: list[str]) -> list[str]:
        """Who holds which of ``ids`` in the ledger, for a refusal."""
        ledger = self.node.bookkeeper.ledger
        said: dict[str, list[str]] = {}
        for h in ledger.holders(self.resource.plugin, ids):
            said.setdefault(f"workload {h.workload_id!r} of agent {h.agent_id!r}", []).append(
                h.device_id
            )
        return [f"{', '.join(devices)} held by {who}" for who, devices in said.items()]


@attrs.frozen
class _Booked:
    key: RecordKey
    lifecycle: WorkloadLifecycle
    response: pb.ContainerAllocateResponse
