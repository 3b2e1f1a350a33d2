"""How a ``cuda.shares`` grant is held: enforced through CUDA MPS, or advisory.

A grant of a share of one GPU, on a node with MPS (:mod:`accelkit_cuda.mps`), is *enforced*:
the workload joins the GPU's MPS daemon and gets

- ``CUDA_MPS_PIPE_DIRECTORY``: the daemon's pipe directory (mounted into a container);
- ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``: ``0=<MiB>M``, its share of the GPU's memory (device
  ordinal 0: the workload sees only that GPU);
- ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: its share of the SMs, in whole percent (at least 1).

Any other grant is *advisory* (the GPU is shared by agreement): no MPS executable, MPS turned
off, or shares on several GPUs (an MPS client talks to one daemon, through one pipe directory).
``[plugins.config.cuda] shares = "enforced"`` refuses those. Either way the workload's
environment says which: ``ACCELKIT_CUDA_SHARE_ENFORCEMENT`` is ``enforced:mps`` or ``advisory``
(and the resource data's ``CUDA_SHARE_ENFORCEMENT`` likewise).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path

import attrs

from accelkit import (
    Aggregate,
    ConfigError,
    Measurement,
    MetricType,
    NodeMetric,
    WorkloadCreationDenied,
)
from accelkit.config import default_state_dir
from accelkit.types import ComputeDevice, DeviceAllocation, DeviceId, Mount, Workload
from accelkit_cuda.config import CUDAConfig, ShareEnforcement
from accelkit_cuda.mps import MPS, MPSError, find_control
from accelkit_cuda.slots import SHARES_SLOT

log = logging.getLogger(__name__)

ENFORCEMENT_ENV = "ACCELKIT_CUDA_SHARE_ENFORCEMENT"
ENFORCED_MPS = "enforced:mps"
ADVISORY = "advisory"
MIB = 1024**2


@attrs.frozen
class ShareHold:
    """What a share grant adds to its workload's config, and the GPU whose daemon it joined."""

    enforcement: str
    env: Mapping[str, str] = attrs.field(factory=dict)
    mounts: tuple[Mount, ...] = ()
    mps_gpu: str | None = None


def shares_of(device_alloc: DeviceAllocation) -> dict[DeviceId, Decimal]:
    return {d: a for d, a in device_alloc.get(SHARES_SLOT, {}).items() if a > 0}


def _why_not(mps: MPS | None, shares: Mapping[DeviceId, Decimal]) -> str | None:
    if mps is None:
        return "CUDA MPS is not available (no nvidia-cuda-mps-control, or mps = false)"
    if len(shares) > 1:
        return f"the shares are on {len(shares)} GPUs and an MPS client reaches one"
    return None


async def hold_shares(
    workload: Workload,
    device_alloc: DeviceAllocation,
    devices: Mapping[DeviceId, ComputeDevice],
    *,
    mps: MPS | None,
    mode: ShareEnforcement,
    shares_per_device: Decimal,
) -> ShareHold | None:
    """Enforce the workload's shares where it can; ``None`` for a grant without shares.

    Raises :class:`WorkloadCreationDenied` when ``mode`` is enforced and they cannot be.
    """
    shares = shares_of(device_alloc)
    if not shares:
        return None
    why = _why_not(mps, shares)
    if why is None and mps is not None:
        ((device_id, share),) = shares.items()
        device = devices.get(device_id)
        if device is None or not device.uuid:
            why = f"GPU {device_id!r} has no UUID"
        else:
            try:
                await asyncio.to_thread(mps.join, device.uuid, workload.id)
            except MPSError as exc:
                why = str(exc)
            else:
                return _enforced(mps, device, share, shares_per_device)
    if mode is ShareEnforcement.ENFORCED:
        msg = f"cuda: shares = 'enforced' and {workload.id!r}'s share cannot be: {why}"
        raise WorkloadCreationDenied(msg)
    return ShareHold(ADVISORY, {ENFORCEMENT_ENV: ADVISORY})


def _enforced(
    mps: MPS, device: ComputeDevice, share: Decimal, shares_per_device: Decimal
) -> ShareHold:
    assert device.uuid is not None
    pipe = str(mps.pipe_dir(device.uuid))
    memory = int(device.memory_size * share / shares_per_device) // MIB
    percent = max(1, int(share * 100 / shares_per_device))
    env = {
        ENFORCEMENT_ENV: ENFORCED_MPS,
        "CUDA_MPS_PIPE_DIRECTORY": pipe,
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={memory}M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percent),
    }
    return ShareHold(ENFORCED_MPS, env, (Mount(pipe, pipe),), device.uuid)


async def release_shares(
    workload: Workload,
    device_alloc: DeviceAllocation,
    devices: Mapping[DeviceId, ComputeDevice],
    *,
    mps: MPS | None,
) -> None:
    """Leave the GPU's MPS daemon (stopped when no share workload is left); idempotent."""
    shares = shares_of(device_alloc)
    if mps is None or len(shares) != 1:
        return
    (device_id,) = shares
    device = devices.get(device_id)
    if device is None or not device.uuid:
        return
    try:
        await asyncio.to_thread(mps.leave, device.uuid, workload.id)
    except MPSError as exc:  # the daemon stays; the next share workload of the GPU adopts it
        log.warning(
            "cuda: %s left the MPS daemon of %s, which did not answer: %s",
            workload.id,
            device.uuid,
            exc,
        )


def mps_of(settings: CUDAConfig) -> MPS | None:
    """The node's MPS daemons where the settings allow MPS and its control executable exists;
    ``None`` otherwise (shares are then advisory). The directory defaults to ``cuda-mps`` in
    the default state directory."""
    if not settings.mps:
        return None
    control = find_control(settings.mps_control)
    if control is None:
        log.info("cuda: no %s: GPU shares are advisory", settings.mps_control)
        return None
    if settings.mps_directory:
        return MPS(control, Path(settings.mps_directory))
    try:
        root = default_state_dir() / "cuda-mps"
    except ConfigError as exc:
        log.warning("cuda: no directory for the MPS daemons (%s): GPU shares are advisory", exc)
        return None
    return MPS(control, root)


def mps_metrics(mps: MPS, devices: Sequence[ComputeDevice]) -> list[NodeMetric]:
    """``mps_workloads``: per GPU, the share workloads its MPS daemon enforces."""
    per_device = {
        str(d.device_id): Measurement(Decimal(len(mps.users(d.uuid))))
        for d in devices
        if d.uuid and "parent_id" not in d.extra
    }
    if not per_device:
        return []
    total = sum((m.value for m in per_device.values()), Decimal(0))
    return [
        NodeMetric(
            "mps_workloads",
            MetricType.GAUGE,
            "",
            Measurement(total),
            per_device,
            aggregate=Aggregate.SUM,
        )
    ]


def with_enforcement(
    device: ComputeDevice, mps: MPS | None, mode: ShareEnforcement
) -> ComputeDevice:
    """``device`` with ``extra["share_enforcement"]``: how a share of one GPU is held there
    (``enforced:mps``, or ``advisory``; ``refused`` where shares are enforced and MPS is
    missing), for ``accelkit devices --json``. MIG instances are not shared."""
    if "parent_id" in device.extra:
        return device
    held = ENFORCED_MPS if mps is not None else ADVISORY
    if held == ADVISORY and mode is ShareEnforcement.ENFORCED:
        held = "refused"
    return attrs.evolve(device, extra={**device.extra, "share_enforcement": held})
