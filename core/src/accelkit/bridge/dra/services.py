"""The driver's gRPC services for the kubelet: registration, DRA ``v1`` and DRA health.

- :class:`RegistrationService` (``pluginregistration.Registration``) on the socket in the
  kubelet's plugin registry: ``GetInfo`` names the driver, its DRA socket and ``v1.DRAPlugin``;
  ``NotifyRegistrationStatus`` is logged.
- :class:`DraPluginService` (``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``): every claim of a
  request is answered, each on its own (an ``error`` for the claims that could not be
  prepared), the claims side by side.
- :class:`HealthService` (``v1alpha1.DRAResourceHealth``): ``NodeWatchResources`` streams every
  device's health now and again after every change on the node's health board.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from accelkit.bridge.dra.api import dra_health_v1alpha1_pb2 as health_pb
from accelkit.bridge.dra.api import dra_v1_pb2 as dra_pb
from accelkit.bridge.dra.api import pluginregistration_v1_pb2 as reg_pb
from accelkit.bridge.dra.claims import ClaimRefused
from accelkit.bridge.dra.devices import DraDevice
from accelkit.bridge.dra.prepare import ClaimPreparer, ClaimRef, Prepared
from accelkit.health import DeviceHealth, HealthState

__all__ = [
    "DRA_PLUGIN_TYPE",
    "SUPPORTED_VERSIONS",
    "DraPluginService",
    "HealthService",
    "RegistrationService",
]

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"
#: the DRA gRPC services served, as the kubelet names them
SUPPORTED_VERSIONS = ("v1.DRAPlugin",)
Context = Any  # grpc.aio.ServicerContext


class RegistrationService:
    """``pluginregistration.Registration`` of one driver."""

    def __init__(self, driver: str, endpoint: str, on_status: Callable[[bool, str], None]) -> None:
        self.info = reg_pb.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=driver,
            endpoint=endpoint,
            supported_versions=list(SUPPORTED_VERSIONS),
        )
        self._on_status = on_status

    async def GetInfo(self, request: reg_pb.InfoRequest, context: Context) -> reg_pb.PluginInfo:
        return self.info

    async def NotifyRegistrationStatus(
        self, request: reg_pb.RegistrationStatus, context: Context
    ) -> reg_pb.RegistrationStatusResponse:
        self._on_status(request.plugin_registered, request.error)
        return reg_pb.RegistrationStatusResponse()


def _answer(prepared: Prepared, pool: str) -> dra_pb.NodePrepareResourceResponse:
    devices = []
    for result in prepared.booking.results:
        device = dra_pb.Device(
            request_names=[result.request],
            pool_name=pool,
            device_name=result.device.name,
            cdi_device_ids=[prepared.cdi_device],
        )
        if result.share_id:
            device.share_id = result.share_id
        devices.append(device)
    return dra_pb.NodePrepareResourceResponse(devices=devices)


class DraPluginService:
    """``dra.v1.DRAPlugin``: NodePrepareResources and NodeUnprepareResources."""

    def __init__(self, preparer: ClaimPreparer, pool: str) -> None:
        self.preparer = preparer
        self.pool = pool

    async def _prepare_one(self, claim: dra_pb.Claim) -> dra_pb.NodePrepareResourceResponse:
        ref = ClaimRef(claim.namespace, claim.name, claim.uid)
        try:
            return _answer(await self.preparer.prepare(ref), self.pool)
        except ClaimRefused as exc:
            log.warning("NodePrepareResources: %s", exc)
            return dra_pb.NodePrepareResourceResponse(error=str(exc))
        except Exception as exc:  # every claim gets an answer; the log keeps the traceback
            log.exception("NodePrepareResources of claim %s failed", ref.label)
            return dra_pb.NodePrepareResourceResponse(error=f"claim {ref.label}: {exc}")

    async def _unprepare_one(self, claim: dra_pb.Claim) -> dra_pb.NodeUnprepareResourceResponse:
        ref = ClaimRef(claim.namespace, claim.name, claim.uid)
        try:
            await self.preparer.unprepare(ref)
        except ClaimRefused as exc:
            log.warning("NodeUnprepareResources: %s", exc)
            return dra_pb.NodeUnprepareResourceResponse(error=str(exc))
        except Exception as exc:
            log.exception("NodeUnprepareResources of claim %s failed", ref.label)
            return dra_pb.NodeUnprepareResourceResponse(error=f"claim {ref.label}: {exc}")
        return dra_pb.NodeUnprepareResourceResponse()

    async def NodePrepareResources(
        self, request: dra_pb.NodePrepareResourcesRequest, context: Context
    ) -> dra_pb.NodePrepareResourcesResponse:
        claims = list(request.claims)
        if len(claims) == 1:  # the usual request: no task of its own
            answers = [await self._prepare_one(claims[0])]
        else:
            answers = await asyncio.gather(*(self._prepare_one(c) for c in claims))
        return dra_pb.NodePrepareResourcesResponse(
            claims={c.uid: a for c, a in zip(claims, answers, strict=True)}
        )

    async def NodeUnprepareResources(
        self, request: dra_pb.NodeUnprepareResourcesRequest, context: Context
    ) -> dra_pb.NodeUnprepareResourcesResponse:
        claims = list(request.claims)
        answers = await asyncio.gather(*(self._unprepare_one(c) for c in claims))
        return dra_pb.NodeUnprepareResourcesResponse(
            claims={c.uid: a for c, a in zip(claims, answers, strict=True)}
        )


_STATUS = {
    HealthState.HEALTHY: health_pb.HEALTHY,
    HealthState.DEGRADED: health_pb.HEALTHY,  # still takes grants
    HealthState.UNHEALTHY: health_pb.UNHEALTHY,
    HealthState.UNKNOWN: health_pb.UNKNOWN,
}


def health_entry(
    device: DraDevice, health: DeviceHealth | None, pool: str
) -> health_pb.DeviceHealth:
    """One device's health as the kubelet reads it (no report yet: healthy)."""
    state = HealthState.HEALTHY if health is None else health.state
    return health_pb.DeviceHealth(
        device=health_pb.DeviceIdentifier(pool_name=pool, device_name=device.name),
        health=_STATUS[state],
        last_updated_time=0 if health is None else int(health.since),
        message="" if health is None else health.reason,
    )


class HealthService:
    """``v1alpha1.DRAResourceHealth``: the devices' health, streamed."""

    def __init__(
        self,
        listing: Callable[[], Sequence[tuple[DraDevice, DeviceHealth | None]]],
        changed: Callable[[int], Awaitable[int]],
        pool: str,
    ) -> None:
        self._listing = listing
        #: ``await changed(seen)`` returns the next generation after ``seen``
        self._changed = changed
        self.pool = pool

    def current(self) -> health_pb.NodeWatchResourcesResponse:
        return health_pb.NodeWatchResourcesResponse(
            devices=[health_entry(d, h, self.pool) for d, h in self._listing()]
        )

    async def NodeWatchResources(
        self, request: health_pb.NodeWatchResourcesRequest, context: Context
    ) -> AsyncIterator[health_pb.NodeWatchResourcesResponse]:
        seen = -1
        last: health_pb.NodeWatchResourcesResponse | None = None
        while True:
            seen = await self._changed(seen)
            now = self.current()
            if now != last:
                last = now
                yield now
