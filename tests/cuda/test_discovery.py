"""Discovery of GPUs and MIG instances, device ids, NUMA nodes and failing GPUs."""

from __future__ import annotations

import logging

import pytest

from accelkit.types import SlotType
from accelkit_cuda.discovery import mig_minors
from accelkit_cuda.nvml import sysfs_bus_id

from . import fake_nvml as fk
from .support import run, write_numa_node


@pytest.mark.parametrize("count", [1, 8])
def test_every_gpu_becomes_a_device_in_index_order(start, count):
    plugin = start(fk.gpus(count))
    devices = plugin.devices
    assert [d.device_id for d in devices] == [f"cuda{i}" for i in range(count)]
    assert all(d.device_name == "cuda" for d in devices)
    assert len({d.uuid for d in devices}) == count


def test_discovery_of_zero_gpus_is_empty(start):
    nvml = fk.FakeNVML(fk.gpus(1))
    plugin = start(nvml)
    nvml.gpus.clear()  # the GPU went away after init
    assert run(plugin.list_devices()) == ()
    assert plugin.handles(["cuda0"]) == {}


def test_device_facts_come_from_nvml(start):
    gpu = fk.FakeGpu(
        0,
        uuid="GPU-abc",
        name="NVIDIA H100 80GB HBM3",
        memory_total=85_520_809_984,
        bus_id="00000000:3B:00.0",
        numa_node=1,
        minor=4,
        cores=16896,
        compute_capability=(9, 0),
    )
    (device,) = start([gpu]).devices
    assert device.device_id == "cuda0"
    assert device.uuid == "GPU-abc"
    assert device.model_name == "NVIDIA H100 80GB HBM3"
    assert device.memory_size == 85_520_809_984
    assert device.hw_location == "0000:3b:00.0"
    assert device.numa_node == 1
    # nvmlDeviceGetAttributes answers for MIG handles only: 16896 cores / 128 per SM on sm_90
    assert device.processing_units == 132
    assert device.extra == {
        "index": "0",
        "minor": "4",
        "pci_bus_id": "00000000:3B:00.0",
        "cuda_cores": "16896",
        "serial": "1650921000000",
        "board_part_number": "692-2G506-0210-002",
        "vbios_version": "92.00.9E.00.03",
        "driver_version": "550.54.15",
    }


def test_uuid_device_ids(start):
    plugin = start(fk.gpus(2), {"device-id": "uuid"})
    assert [d.device_id for d in plugin.devices] == [g.uuid for g in fk.gpus(2)]


def test_missing_sm_and_core_counts_are_zero_and_absent(start):
    (device,) = start([fk.FakeGpu(0, sm_count=None, cores=None)]).devices
    assert device.processing_units == 0
    assert "cuda_cores" not in device.extra


@pytest.mark.parametrize(
    ("cores", "capability", "sms"),
    [
        (6912, (8, 0), 108),  # A100: 64 cores per SM
        (10752, (8, 6), 84),  # RTX A6000: 128
        (14592, (9, 0), 114),  # H100 PCIe
        (5120, (7, 0), 80),  # V100
        (3584, (6, 0), 56),  # P100: 64
        (3584, (6, 1), 28),  # GP102: 128
        (18944, (10, 0), 148),  # B200
        (6912, (2, 0), 0),  # an architecture the table does not know: unknown, not a guess
        (6913, (8, 0), 0),  # cores that do not divide into SMs: unknown
        (6912, None, 0),  # no compute capability: unknown
    ],
)
def test_whole_gpu_sms_come_from_cores_and_compute_capability(start, cores, capability, sms):
    gpu = fk.FakeGpu(0, cores=cores, compute_capability=capability, sm_count=999)
    (device,) = start([gpu]).devices
    assert device.processing_units == sms


@pytest.mark.parametrize(("written", "expected"), [("1", 1), ("-1", None), ("junk", None)])
def test_numa_node_falls_back_to_sysfs(start, sysfs, written, expected):
    gpu = fk.FakeGpu(0, bus_id="00000000:AF:00.0", numa_node=None)
    write_numa_node(sysfs, "0000:af:00.0", written)
    (device,) = start([gpu]).devices
    assert device.numa_node == expected


def test_numa_node_is_none_without_nvml_or_sysfs(start):
    (device,) = start([fk.FakeGpu(0, numa_node=None)]).devices
    assert device.numa_node is None


def test_negative_nvml_numa_node_uses_sysfs(start, sysfs):
    gpu = fk.FakeGpu(0, bus_id="00000000:AF:00.0", numa_node=-1)
    write_numa_node(sysfs, "0000:af:00.0", "0")
    assert start([gpu]).devices[0].numa_node == 0


def test_lost_gpu_is_skipped_and_logged(start, caplog):
    gpus = fk.gpus(3)
    gpus[1].errors["nvmlDeviceGetUUID"] = fk.NVML_ERROR_GPU_IS_LOST
    with caplog.at_level(logging.WARNING, logger="accelkit_cuda"):
        plugin = start(gpus)
    assert [d.device_id for d in plugin.devices] == ["cuda0", "cuda2"]
    assert "skipping GPU 1" in caplog.text
    assert "GPU is lost" in caplog.text


def test_mig_off_on_a_mig_capable_gpu_offers_the_whole_gpu(start):
    gpu = fk.FakeGpu(0, mig_supported=True, mig_enabled=False)
    plugin = start([gpu])
    assert [d.device_id for d in plugin.devices] == ["cuda0"]
    assert plugin.device_slots(plugin.devices)["cuda0"].slot_name == "cuda.device"


def test_mig_instances_replace_their_parent_and_are_named_by_gpu_instance(start):
    gpus = [fk.mig_gpu(0, ["3g.40gb", None, "1g.10gb", "1g.10gb"], numa_node=0), fk.FakeGpu(1)]
    plugin = start(gpus)
    devices = {d.device_id: d for d in plugin.devices}
    # named by GPU-instance id (1, 7, 8) as nvidia-smi and DCGM name them, not by slot (0, 2, 3)
    assert list(devices) == ["cuda0-mig1", "cuda0-mig7", "cuda0-mig8", "cuda1"]
    mig = devices["cuda0-mig7"]
    assert mig.uuid == "MIG-00000002-0000-0000-0000-000000000000"
    assert mig.model_name == "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    assert mig.memory_size == 9856 * fk.MIB
    assert mig.processing_units == 14
    assert mig.numa_node == 0
    assert mig.hw_location == "0000:10:00.0/gi7/ci0"
    assert mig.extra["parent_id"] == "cuda0"
    assert mig.extra["parent_uuid"] == gpus[0].uuid
    assert mig.extra["parent_model"] == "NVIDIA A100-SXM4-80GB"
    assert mig.extra["minor"] == "0"
    assert mig.extra["mig_profile"] == "1g.10gb"
    assert mig.extra["mig_index"] == "2"
    assert mig.extra["gpu_instance_id"] == "7"
    slots = plugin.device_slots(plugin.devices)
    assert slots["cuda0-mig1"].slot_name == "cuda.mig-3g.40gb"
    assert slots["cuda0-mig7"].slot_name == "cuda.mig-1g.10gb"
    assert slots["cuda0-mig7"].slot_type is SlotType.UNIQUE
    assert slots["cuda0-mig7"].amount == 1
    assert slots["cuda1"].slot_name == "cuda.device"


def test_further_compute_instances_of_one_gpu_instance_get_their_ci(start):
    gpu = fk.mig_gpu(0, ["3g.40gb", "3g.40gb"])
    second = gpu.migs[1]
    assert second is not None
    second.gpu_instance_id, second.compute_instance_id = 1, 2
    assert [d.device_id for d in start([gpu]).devices] == ["cuda0-mig1", "cuda0-mig1-ci2"]


def test_mig_caps_minors_come_from_proc(start, proc):
    fk.write_mig_minors(
        proc,
        {
            "config": 1,
            "monitor": 2,
            "gpu3/gi7/access": 66,
            "gpu3/gi7/ci0/access": 67,
            "gpu3/gi8/access": 75,
            "gpu3/gi8/ci0/access": 76,
        },
    )
    plugin = start([fk.mig_gpu(0, ["1g.10gb", "1g.10gb"], minor=3)])
    caps = {d.device_id: d.extra["mig_caps"] for d in plugin.devices}
    assert caps == {"cuda0-mig7": "66,67", "cuda0-mig8": "75,76"}


def test_without_mig_minors_the_caps_are_empty(start, proc):
    (proc / "driver").mkdir()
    plugin = start([fk.mig_gpu(0, ["1g.10gb"])])
    assert plugin.devices[0].extra["mig_caps"] == ""


def test_malformed_mig_minors_lines_are_skipped(proc):
    path = fk.write_mig_minors(proc, {"gpu0/gi1/access": 5})
    path.write_text(path.read_text() + "garbage\ngpu0/gi2/access x\n\n")
    assert mig_minors(proc) == {"gpu0/gi1/access": 5}


def test_mig_uuid_device_ids(start):
    plugin = start([fk.mig_gpu(0, ["2g.20gb"])], {"device-id": "uuid"})
    assert [d.device_id for d in plugin.devices] == ["MIG-00000000-0000-0000-0000-000000000000"]
    assert plugin.devices[0].extra["parent_id"] == fk.mig_gpu(0, []).uuid


def test_mig_profile_from_attributes_when_the_name_has_none(start):
    gpu = fk.mig_gpu(0, ["1g.10gb"], memory_total=81920 * fk.MIB)
    gpu.migs[0].name = "MIG instance"  # type: ignore[union-attr]
    (device,) = start([gpu]).devices
    assert device.extra["mig_profile"] == "1g.10gb"


def test_mig_mode_on_without_instances_offers_nothing(start, caplog):
    with caplog.at_level(logging.INFO, logger="accelkit_cuda"):
        plugin = start([fk.mig_gpu(0, []), fk.FakeGpu(1)])
    assert [d.device_id for d in plugin.devices] == ["cuda1"]
    assert "MIG mode on but no MIG instances" in caplog.text


def test_a_failing_mig_lookup_skips_that_gpu(start):
    gpu = fk.mig_gpu(0, ["1g.10gb"])
    gpu.errors["nvmlDeviceGetMigDeviceHandleByIndex"] = fk.NVML_ERROR_GPU_IS_LOST
    plugin = start([gpu, fk.FakeGpu(1)])
    assert [d.device_id for d in plugin.devices] == ["cuda1"]


def test_configurable_slots_list_the_mode_and_discovered_mig_profiles(start):
    plugin = start([fk.mig_gpu(0, ["3g.40gb", "1g.10gb", "1g.10gb"]), fk.FakeGpu(1)])
    specs = plugin.configurable_slots()
    assert [(s.name, s.type) for s in specs] == [
        ("cuda.device", SlotType.COUNT),
        ("cuda.mig-1g.10gb", SlotType.UNIQUE),
        ("cuda.mig-3g.40gb", SlotType.UNIQUE),
    ]
    assert all(s.name.startswith("cuda.") for s in specs)


@pytest.mark.parametrize(
    ("nvml_id", "sysfs_id"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("00000001:AF:00.1", "0001:af:00.1"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("3B", "3b"),
        ("ZZZZ:3B:00.0", "zzzz:3b:00.0"),
    ],
)
def test_sysfs_bus_id(nvml_id, sysfs_id):
    assert sysfs_bus_id(nvml_id) == sysfs_id
