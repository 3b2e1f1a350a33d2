"""One check of the plugin kit run as pytest would, on a sound NPU plugin or a broken variant."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import pytest

from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook
from accelkit.testing import AgentSetup, PluginConformance
from accelkit.testing.agent_setup import copier, start_plugin
from accelkit.types import (
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    Mount,
    SlotSpec,
    SlotType,
    WorkloadConfig,
)

Failed = pytest.fail.Exception
Skipped = pytest.skip.Exception


class Hook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        ids = self.allocated_device_ids
        return WorkloadConfig(
            env_vars={"NPUS": ",".join(ids)},
            mounts=[Mount.device(f"/dev/{i}") for i in ids],
            cdi_devices=[f"acme.example/npu={i}" for i in ids],
        )


class Plugin(AbstractComputePlugin):
    """Three whole NPUs, each exposed as an env value, a device node and a CDI device."""

    key = DeviceName("npu")
    api_version = "2.0"
    lifecycle_hook_class: ClassVar[type[AbstractLifecycleHook]] = Hook
    exclusive_slot_types = ("npu.device", "npu.mig-*")
    count = 3

    async def list_devices(self) -> Sequence[ComputeDevice]:
        return [
            ComputeDevice("npu", f"npu{i}", f"pci:{i}", 0, 1024, 8, uuid=f"NPU-{i}")
            for i in range(self.count)
        ]

    def configurable_slots(self) -> Sequence[SlotSpec]:
        return [SlotSpec("npu.device", SlotType.COUNT)]

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        return {d.device_id: DeviceSlotInfo("count", "npu.device", 1) for d in devices}


def run_check(
    name: str,
    plugin: AbstractComputePlugin,
    factory: Callable[[], AbstractComputePlugin] | None = None,
) -> None:
    """Run one check of the suite with the fixtures it asks for, as pytest would."""
    check = getattr(PluginConformance(), name)
    wanted = inspect.signature(check).parameters
    factory = factory or copier(plugin)
    with asyncio.Runner() as runner:
        args: dict[str, Any] = {"plugin": plugin, "runner": runner, "plugin_factory": factory}
        if "started" in wanted or "agent" in wanted:
            args["started"] = start_plugin(runner, plugin)
        if "agent" in wanted:
            args["agent"] = AgentSetup.build(plugin)
        check(**{k: args[k] for k in wanted})


def expect_broken(check: str, plugin: AbstractComputePlugin, rule: str, *details: str) -> None:
    """The check fails naming the plugin ``npu``, the rule, a fix and every one of ``details``."""
    with pytest.raises(Failed) as failure:
        run_check(check, plugin)
    message = str(failure.value)
    assert f"plugin 'npu' ({type(plugin).__name__}) breaks the rule {rule!r}" in message
    assert "\nFix: " in message
    for detail in details:
        assert detail in message


def with_health(report: object) -> Plugin:
    """The sound plugin, reporting ``report`` as the health of its devices."""

    async def device_health(self: AbstractComputePlugin) -> object:
        return report

    return type("HealthPlugin", (Plugin,), {"device_health": device_health})()
