"""Health through the real pynvml over the simulated NVML library (see ``test_against_nvml``).

These check what the fake cannot: pynvml's ctypes event data (a new device pointer in every
event, found back to its GPU), ``NVMLError_Timeout`` from ``nvmlEventSetWait_v2``, and the
field-value array with each value's own return code.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from accelkit.health import HealthEvent, HealthState
from accelkit_cuda import CUDAPlugin

from .support import run
from .test_against_nvml import real_pynvml_over, simulated_libraries

__all__ = ["simulated_libraries"]  # the fixture, used by name


@pytest.fixture
def plugin_over(
    simulated_libraries: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    start: Callable[..., CUDAPlugin],
) -> Callable[..., CUDAPlugin]:
    """Start the plugin over the real pynvml on the simulated library ``build``, with ``env``
    set for the library; the ``start`` fixture cleans it up."""

    def _start(build: str, **env: str) -> CUDAPlugin:
        if build not in simulated_libraries:
            pytest.skip("no C compiler to build the simulated NVML library")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        nvml = real_pynvml_over(simulated_libraries[build], monkeypatch)
        return start(nvml, {"health-interval": "30"})

    return _start


def states(plugin: CUDAPlugin) -> dict[str, tuple[HealthState, str]]:
    return {d: (h.state, h.reason) for d, h in run(plugin.device_health()).items()}


@pytest.mark.parametrize("build", ["sim-v3", "sim-v2"])
def test_healthy_gpus_whether_or_not_the_driver_has_the_recovery_field(plugin_over, build):
    plugin = plugin_over(build)
    assert states(plugin) == {
        "cuda0": (HealthState.HEALTHY, ""),
        "cuda1": (HealthState.HEALTHY, ""),
    }


def test_the_recovery_action_field_through_pynvml(plugin_over):
    plugin = plugin_over("sim-v3", NVML_SIM_RECOVERY="1:2")
    assert states(plugin)["cuda1"] == (HealthState.UNHEALTHY, "recovery action NODE_REBOOT")
    assert states(plugin)["cuda0"] == (HealthState.HEALTHY, "")


def test_an_xid_event_through_pynvml_reaches_its_gpu_and_the_thread_ends(plugin_over):
    plugin = plugin_over("sim-v2", NVML_SIM_XID="1:79")

    async def first() -> HealthEvent:
        watch = plugin.watch_health()
        try:
            return await asyncio.wait_for(anext(watch), 5)
        finally:
            await watch.aclose()

    event = run(first())
    assert (event.device_id, event.new.state) == ("cuda1", HealthState.UNHEALTHY)
    assert event.reason == "XID 79: GPU has fallen off the bus"
    assert not [t for t in threading.enumerate() if t.name == "accelkit-cuda-events"]


def test_waits_time_out_quietly_and_cancelling_ends_the_thread(plugin_over):
    plugin = plugin_over("sim-v3")

    async def cancel() -> None:
        task = asyncio.ensure_future(anext(plugin.watch_health()))
        await asyncio.sleep(0.5)  # a few NVMLError_Timeout waits
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(cancel())
    assert not [t for t in threading.enumerate() if t.name == "accelkit-cuda-events"]
