"""A ResourceClaim's allocation as a ledger booking.

The scheduler writes what it allocated into ``status.allocation.devices.results``: per request,
a driver, a pool, a device and (for a device several claims share) the capacity consumed and a
share id. :func:`claim_booking` keeps the results of this driver and pool and turns them into
the devices' allocation: a whole device's full capacity, a divisible one's consumed capacity
(the quantum's multiple asked for; the whole device when the claim asked for nothing). A
claim naming a device this node does not have, or with no result of this driver, is refused
with the reason and nothing is booked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import attrs

from accelkit.bridge.dra.devices import DraDevice
from accelkit.bridge.dra.slices import capacity_name
from accelkit.types import DeviceAllocation, DeviceId, DeviceName, SlotName

__all__ = [
    "CLAIM_PREFIX",
    "ClaimBooking",
    "ClaimRefused",
    "ClaimResult",
    "claim_booking",
    "claim_workload_id",
]


class ClaimRefused(Exception):
    """A claim this driver cannot prepare; the message says why (the kubelet shows it)."""


@attrs.frozen
class ClaimResult:
    """One allocated device of a claim, as the kubelet wants it back."""

    request: str
    device: DraDevice
    amount: Decimal
    share_id: str | None = None


@attrs.frozen
class ClaimBooking:
    """What a claim books: its results and their ledger allocation."""

    results: tuple[ClaimResult, ...]

    def allocation(self) -> dict[DeviceName, DeviceAllocation]:
        """The ledger allocation: per plugin and slot, each device's amount (added up where
        one claim takes two shares of one device)."""
        found: dict[DeviceName, dict[SlotName, dict[DeviceId, Decimal]]] = {}
        for result in self.results:
            device = result.device
            slot = found.setdefault(device.plugin, {}).setdefault(device.slot, {})
            slot[device.device_id] = slot.get(device.device_id, Decimal(0)) + result.amount
        return dict(found)


#: what the ledger's workload id of every claim starts with
CLAIM_PREFIX = "k8s-claim:"


def claim_workload_id(namespace: str, name: str, uid: str) -> str:
    """The ledger's workload id of a claim: ``k8s-claim:<namespace>/<name>:<uid>``."""
    return f"{CLAIM_PREFIX}{namespace}/{name}:{uid}"


def _consumed(result: Any, device: DraDevice) -> Decimal:
    if not device.divisible:
        return device.amount
    from kubernetes.utils import parse_quantity

    consumed: Mapping[str, Any] = getattr(result, "consumed_capacity", None) or {}
    asked = consumed.get(capacity_name(device.slot))
    if asked is None:
        return device.amount
    try:
        amount = Decimal(parse_quantity(asked))  # type: ignore[no-untyped-call]
    except ValueError:
        msg = f"device {device.name!r}: consumed capacity {asked!r} is not a quantity"
        raise ClaimRefused(msg) from None
    quantum = device.quantum or Decimal(1)
    if amount <= 0 or amount > device.amount or amount % quantum:
        msg = (
            f"device {device.name!r}: consumed capacity {asked} is not a multiple of "
            f"{quantum} within {device.amount}"
        )
        raise ClaimRefused(msg)
    return amount


def claim_booking(
    claim: Any, *, driver: str, pool: str, devices: Sequence[DraDevice]
) -> ClaimBooking:
    """The booking of ``claim`` (a ``ResourceClaim`` as the client reads it); raises
    :class:`ClaimRefused` naming what is wrong."""
    meta = claim.metadata
    label = f"claim {meta.namespace}/{meta.name}"
    allocation = getattr(claim.status, "allocation", None) if claim.status else None
    if allocation is None or allocation.devices is None:
        msg = f"{label} is not allocated"
        raise ClaimRefused(msg)
    all_results = list(allocation.devices.results or [])
    ours = [r for r in all_results if r.driver == driver]
    if not ours:
        drivers = ", ".join(sorted({r.driver for r in all_results})) or "none"
        msg = f"{label} has no device of driver {driver!r} (its drivers: {drivers})"
        raise ClaimRefused(msg)
    by_name = {d.name: d for d in devices}
    results: list[ClaimResult] = []
    for result in ours:
        device = by_name.get(result.device) if result.pool == pool else None
        if device is None:
            have = ", ".join(sorted(by_name)) or "none"
            msg = (
                f"{label} names device {result.device!r} of pool {result.pool!r}, which this "
                f"node (pool {pool!r}) does not have (it has: {have})"
            )
            raise ClaimRefused(msg)
        share = getattr(result, "share_id", None)
        results.append(ClaimResult(result.request, device, _consumed(result, device), share))
    return ClaimBooking(tuple(results))
