"""Finding the node's GPUs and MIG instances through NVML.

A GPU with MIG mode on is not offered whole: each of its MIG instances becomes a device of
its own, in the UNIQUE slot ``cuda.mig-<profile>``, named by its GPU-instance id as nvidia-smi,
DCGM and ``/proc/driver/nvidia/capabilities/gpu<N>/mig/gi<M>`` name it: ``cuda0-mig<gi>``
(``cuda0-mig<gi>-ci<ci>`` for a further compute instance of the same GPU instance). A GPU whose
NVML calls fail is skipped and logged, so one broken GPU never hides the others.

``processing_units`` is the SM count: from ``nvmlDeviceGetAttributes`` for MIG instances (it
answers for MIG handles only) and from the CUDA cores and compute capability for whole GPUs;
``0`` means NVML could not tell. A MIG instance's ``extra`` holds the minors of its
``/dev/nvidia-caps`` nodes (``mig_caps``), read from ``/proc/driver/nvidia-caps/mig-minors``.

Every device's ``extra`` carries its identity where NVML tells it (:data:`IDENTITY_KEYS`):
``pci_bus_id`` (NVML's form), ``serial``, ``board_part_number``, ``vbios_version`` and
``driver_version``; the UUID is the device's ``uuid``. A field the board does not offer
(``NOT_SUPPORTED``, ``NO_PERMISSION``, a driver without the function) is left out, and never
hides the GPU.
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs

from accelkit.types import ComputeDevice, DeviceId, DeviceName
from accelkit_cuda.config import DeviceIdMode
from accelkit_cuda.mig import profile_from_attributes, profile_from_name
from accelkit_cuda.nvml import Handle, sysfs_bus_id
from accelkit_cuda.nvml.library import NVMLLibrary

log = logging.getLogger(__name__)

DEVICE_NAME = DeviceName("cuda")


@attrs.frozen
class FoundDevice:
    """A discovered device and the NVML handle its metrics are read from."""

    device: ComputeDevice
    handle: Handle = attrs.field(eq=False, repr=False)
    #: the whole GPU of a MIG instance, whose power and temperature the instance cannot read
    parent_handle: Handle = attrs.field(default=None, eq=False, repr=False)


def mig_minors(proc_root: Path) -> dict[str, int]:
    """``/proc/driver/nvidia-caps/mig-minors``: ``gpu0/gi1/access`` → its caps minor.

    A missing or unreadable file (no MIG support in the driver) gives an empty mapping.
    """
    path = proc_root / "driver" / "nvidia-caps" / "mig-minors"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    minors = {}
    for line in lines:
        name, _, minor = line.strip().rpartition(" ")
        if name and minor.isdecimal():
            minors[name] = int(minor)
    return minors


def sysfs_numa_node(sysfs_root: Path, bus_id: str) -> int | None:
    """``/sys/bus/pci/devices/<bus id>/numa_node``; ``-1`` or an unreadable file is ``None``."""
    path = sysfs_root / "bus" / "pci" / "devices" / bus_id / "numa_node"
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


#: identity fields a device's ``extra`` may carry, each where NVML tells it
IDENTITY_KEYS = ("serial", "board_part_number", "vbios_version", "driver_version")


def identity(lib: NVMLLibrary, handle: Handle) -> dict[str, str]:
    """Serial, board part number, VBIOS and driver versions of a whole GPU, each left out
    where the board or driver does not tell it (GeForce boards have no serial, say)."""
    devices, system = lib.devices, lib.system
    found = {
        "serial": devices.serial(handle),
        "board_part_number": devices.board_part_number(handle),
        "vbios_version": devices.vbios_version(handle),
        "driver_version": system.identity(system.driver_version),
    }
    return {key: value for key, value in found.items() if value is not None}


def discover_devices(
    lib: NVMLLibrary, id_mode: DeviceIdMode, sysfs_root: Path, proc_root: Path = Path("/proc")
) -> list[FoundDevice]:
    """Every usable GPU, or its MIG instances when MIG mode is on, in NVML index order."""
    found: list[FoundDevice] = []
    caps = mig_minors(proc_root)
    for index in range(lib.devices.count()):
        try:
            found.extend(_discover_gpu(lib, index, id_mode, sysfs_root, caps))
        except lib.devices.error_type as exc:
            log.warning("cuda: skipping GPU %d: NVML error: %s", index, exc)
    return found


def _discover_gpu(
    lib: NVMLLibrary, index: int, id_mode: DeviceIdMode, sysfs_root: Path, caps: dict[str, int]
) -> list[FoundDevice]:
    devices = lib.devices
    handle = devices.handle_by_index(index)
    uuid = devices.uuid(handle)
    nvml_bus_id = devices.pci_bus_id(handle)
    bus_id = sysfs_bus_id(nvml_bus_id)
    numa_node = devices.numa_node(handle)
    if numa_node is None:
        numa_node = sysfs_numa_node(sysfs_root, bus_id)
    memory_size = devices.memory_size(handle)
    device_id = DeviceId(uuid if id_mode is DeviceIdMode.UUID else f"cuda{index}")
    minor = str(devices.minor_number(handle))
    extra = {"index": str(index), "minor": minor, "pci_bus_id": nvml_bus_id}
    if (cores := devices.core_count(handle)) is not None:
        extra["cuda_cores"] = str(cores)
    extra.update(identity(lib, handle))
    gpu = ComputeDevice(
        device_name=DEVICE_NAME,
        device_id=device_id,
        hw_location=bus_id,
        numa_node=numa_node,
        memory_size=memory_size,
        processing_units=devices.gpu_sm_count(handle) or 0,
        model_name=devices.name(handle),
        uuid=uuid,
        extra=extra,
    )
    if not lib.mig.enabled(handle):
        return [FoundDevice(gpu, handle)]
    instances = [
        attrs.evolve(
            _mig_instance(lib, gpu, slot, mig_handle, id_mode=id_mode, caps=caps),
            parent_handle=handle,
        )
        for slot, mig_handle in lib.mig.instances(handle)
    ]
    if not instances:
        log.info("cuda: GPU %s has MIG mode on but no MIG instances", device_id)
    return instances


def _mig_instance(
    lib: NVMLLibrary,
    parent: ComputeDevice,
    slot: int,
    handle: Handle,
    *,
    id_mode: DeviceIdMode,
    caps: dict[str, int],
) -> FoundDevice:
    uuid = lib.devices.uuid(handle)
    name = lib.devices.name(handle)
    attributes = lib.mig.attributes(handle)
    profile = profile_from_name(name) or profile_from_attributes(
        int(attributes.gpuInstanceSliceCount),
        int(attributes.computeInstanceSliceCount),
        int(attributes.memorySizeMB),
        parent.memory_size,
    )
    gpu_instance, compute_instance = lib.mig.instance_ids(handle)
    by_instance = f"{parent.device_id}-mig{gpu_instance}"
    if compute_instance:
        by_instance = f"{by_instance}-ci{compute_instance}"
    device_id = DeviceId(uuid if id_mode is DeviceIdMode.UUID else by_instance)
    gi_path = f"gpu{parent.extra['minor']}/gi{gpu_instance}"
    cap_minors = [caps.get(f"{gi_path}/access"), caps.get(f"{gi_path}/ci{compute_instance}/access")]
    extra = {
        "index": parent.extra["index"],
        "minor": parent.extra["minor"],
        "pci_bus_id": parent.extra["pci_bus_id"],
        "parent_id": parent.device_id,
        "parent_uuid": parent.uuid or "",
        "parent_model": parent.model_name,
        "mig_profile": profile,
        "mig_index": str(slot),
        "gpu_instance_id": str(gpu_instance),
        "compute_instance_id": str(compute_instance),
        "mig_caps": ",".join(str(m) for m in cap_minors if m is not None),
        # a MIG instance is on its GPU's board: the board's identity is its own
        **{key: parent.extra[key] for key in IDENTITY_KEYS if key in parent.extra},
    }
    device = ComputeDevice(
        device_name=DEVICE_NAME,
        device_id=device_id,
        hw_location=f"{parent.hw_location}/gi{gpu_instance}/ci{compute_instance}",
        numa_node=parent.numa_node,
        memory_size=lib.devices.memory_size(handle),
        processing_units=int(attributes.multiprocessorCount),
        model_name=name,
        uuid=uuid,
        extra=extra,
    )
    return FoundDevice(device, handle)


def mig_profile(device: ComputeDevice) -> str | None:
    """The MIG profile of a MIG instance, ``None`` for a whole GPU."""
    return device.extra.get("mig_profile") or None
