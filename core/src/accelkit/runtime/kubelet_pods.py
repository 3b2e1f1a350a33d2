"""The kubelet-pods runtime: containers that the kubelet runs with devices the bridge booked.

accelkit never starts, signals or stops these containers; it only asks whether they still
hold their devices, through the kubelet's PodResources API (``List`` on
``pod-resources/kubelet.sock``). A handle names the extended resource and the device ids (and,
once the kubelet lists it, the pod and container); the workload is alive while some container
of some pod lists them. An unreachable kubelet is ``None`` (cannot tell), so every accelkit
process keeps the booking instead of freeing devices a pod may still use.

The kubelet rate-limits PodResources (100 calls a second, bursts of 10), so a process asks it
once and shares the answer: :func:`pod_resources` gives the one :class:`PodResourcesReader` of
a socket, whose :meth:`~PodResourcesReader.read` reuses an answer younger than ``max_age`` and
joins a call already under way, whatever the number of bookings.

Right after it (re)starts, the kubelet answers for a moment without pods that still run (the
static ones). A booking therefore counts as gone only when two consecutive answers of the same
kubelet lack its devices, both given at least the settling time (``settle`` in the handle,
``[bridge.k8s] kubelet-settle``) after that kubelet started; the kubelet's start is when it
created its PodResources socket.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any, ClassVar

import attrs

from accelkit.runtime.base import RuntimeUnavailable, TrackingRuntime, WorkloadHandle
from accelkit.types import WorkloadType

__all__ = [
    "DEFAULT_POD_RESOURCES_SOCKET",
    "KubeletPodsRuntime",
    "PodListing",
    "PodResourcesReader",
    "devices_in_use",
    "kubelet_handle",
    "pod_resources",
]

log = logging.getLogger(__name__)

DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
#: seconds a PodResources ``List`` may take before the kubelet counts as unreachable
LIST_TIMEOUT = Decimal(5)
#: seconds after a booking during which its devices count as in use even if the kubelet does
#: not list them yet (it records them only once the plugin's ``Allocate`` has answered)
ADMISSION_GRACE = Decimal(30)
#: seconds after the kubelet's start before a pod it does not list may count as gone
KUBELET_SETTLE = Decimal(10)
#: an answer this young (seconds) is reused instead of asking the kubelet again
MAX_AGE = Decimal(1)


@attrs.frozen
class ContainerDevices:
    """One container's devices of one resource, as PodResources lists them."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: frozenset[str]

    @property
    def name(self) -> str:
        """``namespace/pod/container``."""
        return f"{self.namespace}/{self.pod}/{self.container}"


@attrs.frozen
class PodListing:
    """One answer of the kubelet's ``List``: what every container holds, and when it came.

    ``kubelet`` identifies the kubelet that answered (its socket's inode and creation time in
    nanoseconds; ``None`` when it restarted during the call), ``kubelet_up`` how many seconds
    it had run by then; ``asked`` is when it was asked (seconds since the epoch, so that
    another process can compare it with a booking's ``listed-at``).
    """

    taken: float
    kubelet: tuple[int, int] | None
    kubelet_up: Decimal
    containers: tuple[ContainerDevices, ...]
    asked: Decimal = Decimal(0)

    def in_use(self) -> dict[str, frozenset[str]]:
        """Per extended resource, the device ids some container of some pod holds."""
        found: dict[str, set[str]] = {}
        for c in self.containers:
            found.setdefault(c.resource, set()).update(c.device_ids)
        return {name: frozenset(ids) for name, ids in found.items()}

    def holders(self, resource: str, ids: Iterable[str]) -> list[ContainerDevices]:
        """The containers that hold any of ``ids`` of ``resource``."""
        wanted = frozenset(ids)
        return [c for c in self.containers if c.resource == resource and c.device_ids & wanted]

    def settled(self, settle: Decimal) -> bool:
        """Whether the kubelet had run ``settle`` seconds when it answered."""
        return self.kubelet is not None and self.kubelet_up >= settle


def _identity(path: str) -> tuple[tuple[int, int], float] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns), st.st_ctime


class PodResourcesReader:
    """The PodResources answers of one socket in this process (see the module docstring)."""

    def __init__(self, socket_path: str, timeout: Decimal = LIST_TIMEOUT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        #: how many ``List`` calls this process made on the socket
        self.calls = 0
        self.latest: PodListing | None = None
        #: the answer before :attr:`latest`
        self.previous: PodListing | None = None
        self._pending: asyncio.Future[PodListing] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def read(self, max_age: Decimal = MAX_AGE) -> PodListing:
        """An answer at most ``max_age`` seconds old (``0``: a new one), asking at most once
        at a time. Raises ``grpc.aio.AioRpcError`` or ``OSError`` when the kubelet cannot be
        asked."""
        latest = self.latest
        if latest is not None and time.monotonic() - latest.taken <= float(max_age):
            return latest
        return await self._ask()

    async def read_after(self, listing: PodListing) -> PodListing:
        """The first answer given after ``listing`` (a new one unless one came meanwhile)."""
        latest = self.latest
        if latest is not None and latest.taken > listing.taken:
            return latest
        return await self._ask()

    def before(self, listing: PodListing) -> PodListing | None:
        """The answer that came just before ``listing``, if this process kept it."""
        if listing is self.latest:
            return self.previous
        return None

    async def _ask(self) -> PodListing:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (a test's): calls of the old are void
            self._loop, self._pending = loop, None
        if self._pending is not None:
            return await asyncio.shield(self._pending)
        pending: asyncio.Future[PodListing] = loop.create_future()
        self._pending = pending
        try:
            listing = await self._list()
        except BaseException as exc:
            pending.set_exception(exc)
            pending.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            self._pending = None
        pending.set_result(listing)
        if self.latest is None or listing.taken >= self.latest.taken:
            self.previous, self.latest = self.latest, listing
        return listing

    async def _list(self) -> PodListing:
        import grpc

        from accelkit.runtime.kubelet_api import podresources_v1_pb2 as pr
        from accelkit.runtime.kubelet_api import podresources_v1_pb2_grpc as pr_grpc

        before = _identity(self.socket_path)
        asked = _now()
        self.calls += 1
        async with grpc.aio.insecure_channel(f"unix://{self.socket_path}") as channel:
            stub: Any = pr_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
            reply: pr.ListPodResourcesResponse = await stub.List(
                pr.ListPodResourcesRequest(), timeout=float(self.timeout)
            )
        after = _identity(self.socket_path)
        taken = time.monotonic()
        kubelet = after[0] if after is not None and before == after else None
        up = Decimal(time.time() - after[1]) if after is not None else Decimal(0)
        containers = tuple(
            ContainerDevices(
                pod.namespace,
                pod.name,
                container.name,
                devices.resource_name,
                frozenset(devices.device_ids),
            )
            for pod in reply.pod_resources
            for container in pod.containers
            for devices in container.devices
        )
        return PodListing(taken, kubelet, up, containers, asked)


_READERS: dict[str, PodResourcesReader] = {}


def pod_resources(socket_path: str) -> PodResourcesReader:
    """The one reader of ``socket_path`` in this process."""
    reader = _READERS.get(socket_path)
    if reader is None:
        reader = _READERS[socket_path] = PodResourcesReader(socket_path)
    return reader


async def devices_in_use(socket_path: str, max_age: Decimal = MAX_AGE) -> dict[str, frozenset[str]]:
    """Per extended resource, the device ids some container of some pod holds.

    Raises ``grpc.aio.AioRpcError`` (and ``OSError``) when the kubelet cannot be asked.
    """
    return (await pod_resources(socket_path).read(max_age)).in_use()


def kubelet_handle(
    resource: str,
    device_ids: list[str],
    pod_resources: str,
    grace: Decimal = ADMISSION_GRACE,
    settle: Decimal = KUBELET_SETTLE,
) -> WorkloadHandle:
    """The handle of a booking made for the kubelet: resource, devices, where to ask, for how
    long after the booking the devices count as in use whatever the kubelet lists, and for how
    long after the kubelet's start a pod it does not list does not count as gone."""
    ids = ",".join(sorted(device_ids))
    return WorkloadHandle(
        KubeletPodsRuntime.name,
        f"{resource}:{ids}",
        {
            "resource": resource,
            "devices": ids,
            "pod-resources": pod_resources,
            "booked-at": str(_now()),
            "grace": str(grace),
            "settle": str(settle),
        },
    )


def _now() -> Decimal:
    """The wall clock, to the millisecond, rounded down."""
    return Decimal(time.time()).quantize(Decimal("0.001"), ROUND_FLOOR)


def with_holder(
    handle: WorkloadHandle, holder: ContainerDevices, listed_at: Decimal
) -> WorkloadHandle:
    """``handle`` naming the pod and container the kubelet lists with its devices, in the
    answer asked at ``listed_at`` (:attr:`PodListing.asked`)."""
    details = {
        **handle.details,
        "namespace": holder.namespace,
        "pod": holder.pod,
        "container": holder.container,
        "listed-at": str(listed_at),
    }
    return WorkloadHandle(handle.runtime, holder.name, details)


def superseded(handle: WorkloadHandle, by: str) -> WorkloadHandle:
    """``handle`` marked as given up: the kubelet handed its devices out again (to ``by``)."""
    return WorkloadHandle(handle.runtime, handle.ident, {**handle.details, "superseded-by": by})


def _within_grace(handle: WorkloadHandle) -> bool:
    try:
        booked_at = Decimal(handle.details.get("booked-at", "0"))
        grace = Decimal(handle.details.get("grace", str(ADMISSION_GRACE)))
    except InvalidOperation:
        return False
    return Decimal(time.time()) - booked_at < grace


def _answers_since(handle: WorkloadHandle) -> Decimal | None:
    """From when on the kubelet's answers tell whether the booking's pod is gone: any answer
    after the admission grace; within it, those asked since the answer that first listed the
    pod (``listed-at``), and none (``None``) before one has."""
    if not _within_grace(handle):
        return Decimal(0)
    try:
        return Decimal(handle.details["listed-at"])
    except (KeyError, InvalidOperation):
        return None


def _settle(handle: WorkloadHandle) -> Decimal:
    try:
        return Decimal(handle.details.get("settle", str(KUBELET_SETTLE)))
    except InvalidOperation:
        return KUBELET_SETTLE


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
        """Whether some pod holds any of the handle's devices; ``None`` without the kubelet.

        Gone only on two consecutive answers of a settled kubelet (module docstring); a
        booking whose devices the kubelet handed out again is gone at once. Within the
        admission grace, only a booking whose pod the kubelet listed can be gone, and only on
        answers asked after that listing: a pod deleted at once frees its devices at once.
        """
        if "superseded-by" in handle.details:
            return False
        since = _answers_since(handle)
        if since is None:
            return True  # the kubelet may not list a just-allocated container yet
        reader = pod_resources(handle.details.get("pod-resources", DEFAULT_POD_RESOURCES_SOCKET))
        resource = handle.details.get("resource", "")
        wanted = frozenset(filter(None, handle.details.get("devices", "").split(",")))
        settle = _settle(handle)
        try:
            now = await reader.read()
            if now.holders(resource, wanted) or not now.settled(settle):
                return True
            before = reader.before(now)
            if before is None or before.kubelet != now.kubelet or not before.settled(settle):
                # no earlier answer of this settled kubelet here (a new process): ask again
                before, now = now, await reader.read_after(now)
                if now.holders(resource, wanted) or before.kubelet != now.kubelet:
                    return True
        except Exception as exc:  # grpc errors, a missing socket: cannot tell
            log.info("PodResources at %s cannot be asked: %s", reader.socket_path, exc)
            return None
        # the earlier answer listed them: the pod went just now; the next answer confirms (an
        # answer older than the one that listed the pod says nothing)
        return bool(before.holders(resource, wanted)) or before.asked < since

    def describe(self, handle: WorkloadHandle) -> list[str]:
        if "pod" in handle.details:
            return [f"kubelet pod container {handle.ident} holding {handle.details['devices']}"]
        return [f"kubelet pod holding {handle.ident}"]
