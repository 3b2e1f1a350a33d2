"""The lifecycle hook's config for process trees and containers; it is stateless."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accelkit.errors import WorkloadCreationDenied
from accelkit.partition import DevicePartition
from accelkit.types import ComputeDevice, Mount, Workload, WorkloadConfig
from accelkit_cuda.hook import CUDALifecycleHook, share_memory_limits

from . import fake_nvml as fk
from .support import run

TREE = Workload.process_tree("4242")
BOX = Workload.container("c0ffee")
CONTROL = [Mount.device(p) for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")]


def pre_create(plugin, workload, alloc) -> WorkloadConfig:
    devices = {d.device_id: d for d in plugin.devices}
    return run(plugin.create_lifecycle_hook(workload, alloc, devices).pre_create())


def uuid(plugin, device_id) -> str:
    device = next(d for d in plugin.devices if d.device_id == device_id)
    assert device.uuid is not None
    return device.uuid


def test_process_tree_sees_its_gpus_by_uuid_in_natural_order(start):
    plugin = start(fk.gpus(12))
    alloc = {"cuda.device": {"cuda10": Decimal(1), "cuda2": Decimal(1), "cuda3": Decimal(0)}}
    config = pre_create(plugin, TREE, alloc)
    assert config == WorkloadConfig(
        env_vars={"CUDA_VISIBLE_DEVICES": f"{uuid(plugin, 'cuda2')},{uuid(plugin, 'cuda10')}"},
        resource_data={"CUDA_GLOBAL_DEVICE_IDS": "0:cuda2,1:cuda10"},
    )


def test_container_gets_uuids_device_nodes_and_cdi_names(start):
    gpus = fk.gpus(4)
    gpus[3].minor = 7
    plugin = start(gpus)
    config = pre_create(plugin, BOX, {"cuda.device": {"cuda3": Decimal(1), "cuda0": Decimal(1)}})
    first, second = uuid(plugin, "cuda0"), uuid(plugin, "cuda3")
    assert config.env_vars == {
        "NVIDIA_VISIBLE_DEVICES": f"{first},{second}",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }
    assert list(config.mounts) == [
        Mount.device("/dev/nvidia0"),
        Mount.device("/dev/nvidia7"),
        *CONTROL,
    ]
    assert config.cdi_devices == (f"nvidia.com/gpu={first}", f"nvidia.com/gpu={second}")
    assert config.resource_data == {"CUDA_GLOBAL_DEVICE_IDS": "0:cuda0,1:cuda3"}
    assert "CUDA_VISIBLE_DEVICES" not in config.env_vars


def test_mig_instances_use_their_mig_uuids_the_parent_node_and_their_caps(start, proc):
    fk.write_mig_minors(
        proc,
        {
            "gpu3/gi7/access": 66,
            "gpu3/gi7/ci0/access": 67,
            "gpu3/gi8/access": 75,
            "gpu3/gi8/ci0/access": 76,
        },
    )
    plugin = start([fk.mig_gpu(0, ["1g.10gb", "1g.10gb"], minor=3)])
    alloc = {"cuda.mig-1g.10gb": {"cuda0-mig7": Decimal(1), "cuda0-mig8": Decimal(1)}}
    migs = [uuid(plugin, "cuda0-mig7"), uuid(plugin, "cuda0-mig8")]
    assert all(u.startswith("MIG-") for u in migs)
    tree = pre_create(plugin, TREE, alloc)
    assert tree.env_vars == {"CUDA_VISIBLE_DEVICES": ",".join(migs)}
    box = pre_create(plugin, BOX, alloc)
    assert box.env_vars["NVIDIA_VISIBLE_DEVICES"] == ",".join(migs)
    caps = [Mount.device(f"/dev/nvidia-caps/nvidia-cap{m}") for m in (66, 67, 75, 76)]
    assert list(box.mounts) == [Mount.device("/dev/nvidia3"), *CONTROL, *caps]
    assert box.cdi_devices == tuple(f"nvidia.com/gpu={u}" for u in migs)


def test_whole_gpus_get_no_caps_nodes(start, proc):
    fk.write_mig_minors(proc, {"gpu0/gi1/access": 9})
    box = pre_create(start(fk.gpus(1)), BOX, {"cuda.device": {"cuda0": Decimal(1)}})
    assert not any("nvidia-caps" in m.source for m in box.mounts)


def test_shares_are_reported_per_visible_device(start):
    plugin = start(fk.gpus(3), {"allocation": "fractional"})
    alloc = {"cuda.shares": {"cuda2": Decimal("0.25"), "cuda0": Decimal("0.50")}}
    config = pre_create(plugin, TREE, alloc)
    assert config.resource_data == {
        "CUDA_GLOBAL_DEVICE_IDS": "0:cuda0,1:cuda2",
        "CUDA_DEVICE_SHARES": "0:0.5,1:0.25",
        "CUDA_SHARE_ENFORCEMENT": "advisory",  # no MPS here (and shares on two GPUs)
    }
    assert config.env_vars["ACCELKIT_CUDA_SHARE_ENFORCEMENT"] == "advisory"


def test_uuid_device_ids_in_resource_data(start):
    plugin = start(fk.gpus(2), {"device-id": "uuid"})
    first = plugin.devices[0].device_id
    config = pre_create(plugin, TREE, {"cuda.device": {first: Decimal(1)}})
    assert config.env_vars == {"CUDA_VISIBLE_DEVICES": first}
    assert config.resource_data == {"CUDA_GLOBAL_DEVICE_IDS": f"0:{first}"}


def test_nothing_allocated_hides_every_gpu(start):
    plugin = start(fk.gpus(2))
    assert pre_create(plugin, TREE, {}).env_vars == {"CUDA_VISIBLE_DEVICES": ""}
    box = pre_create(plugin, BOX, {"cuda.device": {"cuda0": Decimal(0)}})
    assert box.env_vars == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert box.mounts == ()
    assert box.cdi_devices == ()


def test_the_hook_is_stateless(start):
    plugin = start(fk.gpus(4))
    alloc = {"cuda.device": {"cuda1": Decimal(1), "cuda3": Decimal(1)}}
    reordered = {"cuda.device": {"cuda3": Decimal(1), "cuda1": Decimal(1)}}
    for workload in (TREE, BOX):
        first = pre_create(plugin, workload, alloc)
        again = pre_create(plugin, workload, alloc)
        assert first == again == pre_create(plugin, workload, reordered)


def test_through_the_agent_context(start):
    plugin = start(fk.gpus(4))
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda2", "cuda3"))
    hook = ctx.create_lifecycle_hook(TREE, {"cuda.device": {"cuda3": Decimal(1)}})
    config = run(hook.pre_create())
    assert config.env_vars == {"CUDA_VISIBLE_DEVICES": uuid(plugin, "cuda3")}
    run(hook.post_create())
    run(hook.pre_terminate())
    run(hook.post_terminate())


def test_an_unknown_device_is_denied(start):
    plugin = start(fk.gpus(1))
    hook = plugin.create_lifecycle_hook(TREE, {"cuda.device": {"cuda9": Decimal(1)}}, {})
    with pytest.raises(WorkloadCreationDenied, match="'cuda9' is unknown or has no UUID"):
        run(hook.pre_create())


def test_a_device_without_uuid_is_denied(start):
    plugin = start(fk.gpus(1))
    device = ComputeDevice("cuda", "cuda0", "0000:10:00.0", None, 1, 1)
    hook = plugin.create_lifecycle_hook(
        BOX, {"cuda.device": {"cuda0": Decimal(1)}}, {"cuda0": device}
    )
    with pytest.raises(WorkloadCreationDenied, match="has no UUID"):
        run(hook.pre_create())


def test_a_container_device_without_minor_number_is_denied(start):
    plugin = start(fk.gpus(1))
    device = ComputeDevice("cuda", "cuda0", "0000:10:00.0", None, 1, 1, uuid="GPU-x")
    hook = plugin.create_lifecycle_hook(
        BOX, {"cuda.device": {"cuda0": Decimal(1)}}, {"cuda0": device}
    )
    with pytest.raises(WorkloadCreationDenied, match="no device minor number"):
        run(hook.pre_create())


# -- per-share memory limits ------------------------------------------------------------------


def shared_hook(plugin, workload, alloc):
    ids = [d.device_id for d in plugin.devices]
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of(*ids))
    return ctx.create_lifecycle_hook(workload, alloc)


def test_shares_cap_gpu_memory_while_the_workload_lives(start):
    gpus = fk.gpus(2, memory_total=80 * fk.GIB)
    nvml = fk.FakeNVML(gpus, missing=set())  # a driver with nvmlDeviceSetMemoryLimits_v1
    plugin = start(nvml, {"allocation": "fractional", "shares-per-device": "4"})
    alloc = {"cuda.shares": {"cuda1": Decimal("1.5"), "cuda0": Decimal("0.25")}}
    hook = shared_hook(plugin, TREE, alloc)
    run(hook.pre_create())
    assert gpus[0].memory_limits == gpus[1].memory_limits == {}  # nothing before it exists
    run(hook.post_create())
    assert gpus[0].memory_limits == {"4242": (5 * fk.GIB, 5 * fk.GIB)}  # 0.25 of 4 shares
    assert gpus[1].memory_limits == {"4242": (30 * fk.GIB, 30 * fk.GIB)}
    run(hook.post_terminate())
    run(hook.post_terminate())  # idempotent
    assert gpus[0].memory_limits == gpus[1].memory_limits == {}


def test_without_the_driver_call_limits_are_skipped_and_said(start, caplog):
    gpus = fk.gpus(1)
    plugin = start(fk.FakeNVML(gpus), {"allocation": "fractional"})  # the call is missing
    hook = shared_hook(plugin, TREE, {"cuda.shares": {"cuda0": Decimal("0.5")}})
    with caplog.at_level("INFO", logger="accelkit_cuda"):
        run(hook.post_create())
    assert "no memory limit for 4242 on cuda0" in caplog.text
    assert gpus[0].memory_limits == {}
    run(hook.post_terminate())


def test_a_lost_gpu_while_limiting_is_logged_not_raised(start, caplog):
    gpus = fk.gpus(1)
    nvml = fk.FakeNVML(gpus, missing=set())
    plugin = start(nvml, {"allocation": "fractional"})
    gpus[0].errors["nvmlDeviceSetMemoryLimits_v1"] = fk.NVML_ERROR_GPU_IS_LOST
    hook = shared_hook(plugin, TREE, {"cuda.shares": {"cuda0": Decimal("0.5")}})
    with caplog.at_level("WARNING", logger="accelkit_cuda"):
        run(hook.post_create())
    assert "memory limit of 4242 on cuda0 failed: GPU is lost" in caplog.text


def test_whole_gpus_get_no_memory_limit(start):
    gpus = fk.gpus(1)
    plugin = start(fk.FakeNVML(gpus, missing=set()))
    hook = shared_hook(plugin, TREE, {"cuda.device": {"cuda0": Decimal(1)}})
    run(hook.post_create())
    assert gpus[0].memory_limits == {}


def test_a_hook_without_a_limiter_sets_nothing():
    device = ComputeDevice("cuda", "cuda0", "x", None, fk.GIB, 1, uuid="GPU-x")
    hook = CUDALifecycleHook(
        TREE, {"cuda.shares": {"cuda0": Decimal(1)}}, devices={"cuda0": device}
    )
    run(hook.post_create())
    run(hook.post_terminate())
    assert share_memory_limits(hook.device_alloc, hook.devices, Decimal(2)) == {
        "cuda0": fk.GIB // 2
    }
