"""Health of the cuda plugin over the fake NVML: lost GPUs, recovery actions, XID events."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest

from accelkit.health import HealthEvent, HealthState
from accelkit_cuda import CUDAPlugin
from accelkit_cuda.health import XID_APPLICATION, XID_UNHEALTHY

from . import fake_nvml as fk
from .support import run

U, H = HealthState.UNHEALTHY, HealthState.HEALTHY
FAST = {"health-interval": "0.05"}


def states(plugin: CUDAPlugin) -> dict[str, tuple[str, str]]:
    return {d: (h.state.value, h.reason) for d, h in run(plugin.device_health()).items()}


def event_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "accelkit-cuda-events"]


async def take(watch: AsyncIterator[HealthEvent], count: int) -> list[HealthEvent]:
    return [await asyncio.wait_for(anext(watch), 5) for _ in range(count)]


def test_healthy_gpus_and_a_driver_without_the_recovery_field(start):
    nvml = fk.FakeNVML([fk.FakeGpu(0), fk.FakeGpu(1, recovery_action=None)])
    plugin = start(nvml)
    assert states(plugin) == {"cuda0": ("healthy", ""), "cuda1": ("healthy", "")}


def test_a_driver_without_field_values_at_all_is_not_an_error(start):
    nvml = fk.FakeNVML(fk.gpus(1), missing={"nvmlDeviceGetFieldValues"})
    assert states(start(nvml)) == {"cuda0": ("healthy", "")}


@pytest.mark.parametrize(
    ("action", "name"),
    [(1, "GPU_RESET"), (2, "NODE_REBOOT"), (3, "DRAIN_P2P"), (4, "DRAIN_AND_RESET")],
)
def test_a_recovery_action_makes_the_gpu_unhealthy_with_the_action_as_reason(start, action, name):
    gpu = fk.FakeGpu(0)
    plugin = start([gpu, fk.FakeGpu(1)])
    gpu.recovery_action = action
    assert states(plugin) == {
        "cuda0": ("unhealthy", f"recovery action {name}"),
        "cuda1": ("healthy", ""),
    }
    gpu.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_NONE
    assert states(plugin)["cuda0"] == ("healthy", "")


@pytest.mark.parametrize(
    ("code", "state"),
    [
        (fk.NVML_ERROR_GPU_IS_LOST, "unhealthy"),
        (fk.NVML_ERROR_UNKNOWN, "unhealthy"),
        (fk.NVML_ERROR_NO_PERMISSION, "unknown"),
    ],
)
def test_a_failing_query_is_unhealthy_when_the_gpu_is_lost_else_unknown(start, code, state):
    gpu = fk.FakeGpu(1)
    plugin = start([fk.FakeGpu(0), gpu])
    gpu.errors["nvmlDeviceGetMemoryInfo"] = code
    found = states(plugin)
    assert found["cuda0"] == ("healthy", "")
    assert found["cuda1"][0] == state
    assert str(fk.NVMLError(code)) in found["cuda1"][1]


def test_mig_devices_follow_their_parent(start):
    parent = fk.mig_gpu(0, ["3g.40gb", "1g.10gb"])
    plugin = start([parent, fk.FakeGpu(1)])
    parent.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    found = states(plugin)
    reboot = ("unhealthy", "recovery action NODE_REBOOT")
    assert found["cuda0-mig1"] == found["cuda0-mig7"] == reboot
    assert found["cuda1"] == ("healthy", "")
    parent.errors["*"] = fk.NVML_ERROR_GPU_IS_LOST
    assert {s for s, _ in states(plugin).values()} == {"unhealthy", "healthy"}


def test_an_unchanged_report_keeps_its_time(start):
    plugin = start(fk.gpus(1))
    first = run(plugin.device_health())["cuda0"]
    assert run(plugin.device_health())["cuda0"] is first


async def _watch(plugin: CUDAPlugin, act, count: int) -> list[HealthEvent]:
    """Start the watch, run ``act`` once the event thread has registered, collect ``count``."""
    watch = plugin.watch_health()
    first = asyncio.ensure_future(anext(watch))
    nvml = plugin.library.health.module
    for _ in range(200):
        if nvml.event_sets and nvml.event_sets[-1].registered:
            break
        await asyncio.sleep(0.01)
    act()
    try:
        found = [await asyncio.wait_for(first, 5)]
        return found + await take(watch, count - 1)
    finally:
        await watch.aclose()


def test_a_critical_xid_makes_the_gpu_unhealthy_at_once_and_a_reset_brings_it_back(start):
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu, fk.FakeGpu(1)])
    plugin = start(nvml, {"health-interval": "30"})  # the event alone must tell
    run(plugin.device_health())
    (lost,) = run(_watch(plugin, lambda: nvml.inject_xid(gpu, 79), 1))
    assert (lost.device_id, lost.old, lost.new.state) == ("cuda0", H, U)
    assert lost.reason == "XID 79: GPU has fallen off the bus"
    # the mark stays while the driver has not reset the GPU
    assert states(plugin)["cuda0"] == ("unhealthy", "XID 79: GPU has fallen off the bus")
    gpu.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_GPU_RESET
    assert states(plugin)["cuda0"] == ("unhealthy", "recovery action GPU_RESET")
    gpu.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_NONE
    assert states(plugin) == {"cuda0": ("healthy", ""), "cuda1": ("healthy", "")}


def test_the_watch_yields_recovery_from_its_periodic_reading(start):
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu])
    plugin = start(nvml, FAST)
    run(plugin.device_health())

    def reset() -> None:
        gpu.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_GPU_RESET

    (asked,) = run(_watch(plugin, reset, 1))
    assert (asked.new.state, asked.reason) == (U, "recovery action GPU_RESET")
    gpu.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_NONE
    (back,) = run(_watch(plugin, lambda: None, 1))
    assert (back.old, back.new.state, back.reason) == (U, H, "")


@pytest.mark.parametrize("xid", sorted(XID_UNHEALTHY))
def test_every_critical_xid_is_unhealthy(start, xid):
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu])
    plugin = start(nvml, FAST)
    (event,) = run(_watch(plugin, lambda: nvml.inject_xid(gpu, xid), 1))
    assert event.new.state is U
    assert event.reason.startswith(f"XID {xid}: ")


@pytest.mark.parametrize("xid", [*sorted(XID_APPLICATION), 999])
def test_application_and_unknown_xids_change_nothing(start, xid):
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu])
    plugin = start(nvml, FAST)

    def act() -> None:
        nvml.inject_xid(gpu, xid)
        nvml.inject_event(gpu, fk.nvmlEventTypeDoubleBitEccError)

    (event,) = run(_watch(plugin, act, 1))
    assert event.reason == "double-bit ECC error"  # the next event, not the XID


def test_an_xid_of_one_gpu_instance_marks_that_instance_only(start):
    parent = fk.mig_gpu(0, ["3g.40gb", "1g.10gb"])
    nvml = fk.FakeNVML([parent])
    plugin = start(nvml, FAST)
    (event,) = run(_watch(plugin, lambda: nvml.inject_xid(parent, 94, gpu_instance_id=7), 1))
    assert event.device_id == "cuda0-mig7"
    assert states(plugin)["cuda0-mig1"] == ("healthy", "")


def test_a_lost_gpu_marks_every_mig_instance(start):
    parent = fk.mig_gpu(0, ["3g.40gb", "1g.10gb"])
    nvml = fk.FakeNVML([parent, fk.FakeGpu(1)])
    plugin = start(nvml, FAST)
    events = run(_watch(plugin, lambda: nvml.lose_gpu(parent), 2))
    assert {e.device_id for e in events} == {"cuda0-mig1", "cuda0-mig7"}
    assert all(e.new.state is U for e in events)


def test_registration_asks_only_supported_types_and_skips_gpus_without_events(start):
    plain = fk.FakeGpu(0, event_types=fk.nvmlEventTypeXidCriticalError)
    none = fk.FakeGpu(1, event_types=0)
    nvml = fk.FakeNVML([plain, none])
    plugin = start(nvml, FAST)
    (event,) = run(_watch(plugin, lambda: nvml.inject_xid(plain, 48), 1))
    assert event.device_id == "cuda0"
    (made,) = nvml.event_sets
    assert [(g.index, types) for g, types in made.registered.values()] == [
        (0, fk.nvmlEventTypeXidCriticalError)
    ]
    assert made.freed


def test_the_fake_refuses_unsupported_types_and_mig_handles_like_nvml():
    parent = fk.mig_gpu(0, ["1g.10gb"])
    nvml = fk.FakeNVML([parent, fk.FakeGpu(1)])
    nvml.nvmlInit()
    made = nvml.nvmlEventSetCreate()
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceRegisterEvents(nvml.gpus[1], fk.nvmlEventTypeGpuRecoveryAction, made)
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceRegisterEvents(parent.migs[0], fk.nvmlEventTypeXidCriticalError, made)
    assert made.registered == {}
    with pytest.raises(nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(made, 10)
    nvml.nvmlEventSetFree(made)
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlEventSetWait_v2(made, 10)


def test_no_event_set_means_polling_only(start):
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu])
    plugin = start(nvml, FAST)

    def failing_create() -> None:
        raise fk.NVMLError(fk.NVML_ERROR_NOT_SUPPORTED)

    nvml.nvmlEventSetCreate = failing_create

    async def watch() -> HealthEvent:
        stream = plugin.watch_health()
        await asyncio.sleep(0.1)
        gpu.recovery_action = fk.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P
        try:
            return (await take(stream, 1))[0]
        finally:
            await stream.aclose()

    assert run(watch()).reason == "recovery action DRAIN_P2P"


def test_a_failing_wait_rereads_health_and_the_watch_goes_on(start):
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu])
    plugin = start(nvml, {"health-interval": "30"})

    def fail() -> None:
        made = nvml.event_sets[-1]
        gpu.errors["nvmlDeviceGetMemoryInfo"] = fk.NVML_ERROR_GPU_IS_LOST
        with made.ready:
            made.pending.append(fk.NVML_ERROR_GPU_IS_LOST)
            made.ready.notify_all()

    (event,) = run(_watch(plugin, fail, 1))
    assert event.new.state is U
    assert "GPU is lost" in event.reason


def test_cancelling_the_watch_ends_the_event_thread_and_frees_the_set(start):
    nvml = fk.FakeNVML(fk.gpus(2))
    plugin = start(nvml, FAST)

    async def cancel() -> None:
        task = asyncio.ensure_future(anext(plugin.watch_health()))
        await asyncio.sleep(0.3)
        assert event_threads()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(cancel())
    assert event_threads() == []
    (made,) = nvml.event_sets
    assert made.freed
    assert made.waiting == 0


def test_a_gpu_found_by_listing_again_is_watched_too(start):
    nvml = fk.FakeNVML(fk.gpus(1))
    plugin = start(nvml, {"health-interval": "0.05"})
    added = fk.FakeGpu(1)

    async def watch() -> HealthEvent:
        stream = plugin.watch_health()
        first = asyncio.ensure_future(anext(stream))
        try:
            await asyncio.sleep(0.1)
            nvml.gpus.append(added)
            await plugin.discover()
            for _ in range(300):  # the watch replaces its thread at its next reading
                if len(nvml.event_sets) == 2 and nvml.event_sets[1].registered:
                    break
                await asyncio.sleep(0.01)
            nvml.inject_xid(added, 95)
            return await asyncio.wait_for(first, 5)
        finally:
            first.cancel()
            await stream.aclose()

    event = run(watch())
    assert (event.device_id, event.reason) == ("cuda1", "XID 95: uncontained ECC error")
    assert [s.freed for s in nvml.event_sets] == [True, True]
    assert event_threads() == []


def test_a_gpu_whose_registration_fails_is_still_read_and_the_others_watched(start, caplog):
    broken = fk.FakeGpu(0, errors={"nvmlDeviceRegisterEvents": fk.NVML_ERROR_GPU_IS_LOST})
    other = fk.FakeGpu(1)
    nvml = fk.FakeNVML([broken, other])
    plugin = start(nvml, {"health-interval": "30"})
    (event,) = run(_watch(plugin, lambda: nvml.inject_xid(other, 64), 1))
    assert event.device_id == "cuda1"
    assert "no NVML events from cuda0: GPU is lost" in caplog.text


def test_a_failing_free_is_logged(start, caplog):
    gpu = fk.FakeGpu(0)
    nvml = fk.FakeNVML([gpu])
    plugin = start(nvml, FAST)

    def failing_free(event_set: fk.FakeEventSet) -> None:
        raise fk.NVMLError(fk.NVML_ERROR_UNKNOWN)

    nvml.nvmlEventSetFree = failing_free
    run(_watch(plugin, lambda: nvml.inject_xid(gpu, 74), 1))
    assert event_threads() == []
    assert "nvmlEventSetFree failed: Unknown Error" in caplog.text


def test_an_action_this_plugin_does_not_know_is_shown_as_degraded(start):
    gpu = fk.FakeGpu(0)
    plugin = start([gpu])
    gpu.recovery_action = 42
    assert states(plugin) == {"cuda0": ("degraded", "recovery action 42")}
