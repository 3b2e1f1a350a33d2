"""The kubelet-pods runtime: containers that the kubelet runs with devices the bridge booked.

accelkit never starts, signals or stops these containers; it only asks whether they still
hold their devices, through the kubelet's PodResources API (``List`` on
``pod-resources/kubelet.sock``). A handle names the extended resource and the device ids; the
workload is alive while some container of some pod lists them. An unreachable kubelet is
``None`` (cannot tell), so every accelkit process keeps the booking instead of freeing devices
a pod may still use.
"""

from __future__ import annotations

import logging
import time
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any, ClassVar

from accelkit.runtime.base import RuntimeUnavailable, TrackingRuntime, WorkloadHandle
from accelkit.types import WorkloadType

__all__ = ["DEFAULT_POD_RESOURCES_SOCKET", "KubeletPodsRuntime", "devices_in_use", "kubelet_handle"]

log = logging.getLogger(__name__)

DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
#: seconds a PodResources ``List`` may take before the kubelet counts as unreachable
LIST_TIMEOUT = Decimal(5)
#: seconds after a booking during which its devices count as in use even if the kubelet does
#: not list them yet (it records them only once the plugin's ``Allocate`` has answered)
ADMISSION_GRACE = Decimal(30)


def kubelet_handle(
    resource: str,
    device_ids: list[str],
    pod_resources: str,
    grace: Decimal = ADMISSION_GRACE,
) -> WorkloadHandle:
    """The handle of a booking made for the kubelet: resource, devices, where to ask, and for
    how long after the booking the devices count as in use whatever the kubelet lists."""
    ids = ",".join(sorted(device_ids))
    return WorkloadHandle(
        KubeletPodsRuntime.name,
        f"{resource}:{ids}",
        {
            "resource": resource,
            "devices": ids,
            "pod-resources": pod_resources,
            "booked-at": str(Decimal(time.time()).quantize(Decimal("0.001"), ROUND_FLOOR)),
            "grace": str(grace),
        },
    )


async def devices_in_use(
    socket_path: str, timeout: Decimal = LIST_TIMEOUT
) -> dict[str, frozenset[str]]:
    """Per extended resource, the device ids some container of some pod holds.

    Raises ``grpc.aio.AioRpcError`` (and ``OSError``) when the kubelet cannot be asked.
    """
    import grpc

    from accelkit.runtime.kubelet_api import podresources_v1_pb2 as pr
    from accelkit.runtime.kubelet_api import podresources_v1_pb2_grpc as pr_grpc

    found: dict[str, set[str]] = {}
    async with grpc.aio.insecure_channel(f"unix://{socket_path}") as channel:
        stub: Any = pr_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
        reply: pr.ListPodResourcesResponse = await stub.List(
            pr.ListPodResourcesRequest(), timeout=float(timeout)
        )
    for pod in reply.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                found.setdefault(devices.resource_name, set()).update(devices.device_ids)
    return {name: frozenset(ids) for name, ids in found.items()}


def _within_grace(handle: WorkloadHandle) -> bool:
    try:
        booked_at = Decimal(handle.details.get("booked-at", "0"))
        grace = Decimal(handle.details.get("grace", str(ADMISSION_GRACE)))
    except InvalidOperation:
        return False
    return Decimal(time.time()) - booked_at < grace


class KubeletPodsRuntime(TrackingRuntime):
    """Answers for bookings the Kubernetes bridge made; runs nothing itself."""

    name: ClassVar[str] = "kubelet-pods"
    tracks: ClassVar[str] = "pods the kubelet runs"
    workload_type: ClassVar[WorkloadType] = WorkloadType.CONTAINER

    async def stop(self, handle: WorkloadHandle, grace: float) -> None:
        """Nothing to stop from here: a pod is deleted through Kubernetes. Refused while the
        kubelet still lists the devices (``accelkit release --force`` frees them anyway)."""
        if await self.is_alive(handle):
            resource = handle.details.get("resource", "?")
            msg = (
                f"the kubelet still lists {resource} devices {handle.details.get('devices')} "
                "in use; delete the pod through Kubernetes"
            )
            raise RuntimeUnavailable(msg)

    async def is_alive(self, handle: WorkloadHandle) -> bool | None:
        """Whether some pod holds any of the handle's devices; ``None`` without the kubelet."""
        socket_path = handle.details.get("pod-resources", DEFAULT_POD_RESOURCES_SOCKET)
        resource = handle.details.get("resource", "")
        wanted = frozenset(filter(None, handle.details.get("devices", "").split(",")))
        if _within_grace(handle):
            return True  # the kubelet may not list a just-allocated container yet
        try:
            in_use = await devices_in_use(socket_path)
        except Exception as exc:  # grpc errors, a missing socket: cannot tell
            log.info("PodResources at %s cannot be asked: %s", socket_path, exc)
            return None
        return bool(in_use.get(resource, frozenset()) & wanted)

    def describe(self, handle: WorkloadHandle) -> list[str]:
        return [f"kubelet pod holding {handle.ident}"]
