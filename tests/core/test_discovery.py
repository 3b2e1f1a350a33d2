"""Discovery on a fresh loader: statuses, selection, strict mode and the contract checks."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, ClassVar

import pytest

from accelkit import hookimpl
from accelkit.discovery import PluginLoader, make_plugin_manager
from accelkit.errors import ConfigError, PluginLoadError, PluginUnavailable
from accelkit.events import WorkloadEvent, WorkloadPhase
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook, PluginRole
from accelkit.registry import PluginStatus, slot_belongs
from accelkit.selection import PluginSelection
from accelkit.types import (
    AgentId,
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotName,
    SlotSpec,
    SlotType,
    Workload,
    WorkloadConfig,
)


class Hook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig()


class FakePlugin(AbstractComputePlugin):
    key: ClassVar[DeviceName] = DeviceName("fake")
    slot: ClassVar[str] = "fake.device"
    fail_in: ClassVar[str] = ""
    events: list[str]

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.events = []

    def _maybe_fail(self, stage: str) -> None:
        if self.fail_in == stage:
            raise RuntimeError(f"boom in {stage}")
        if self.fail_in == f"absent-{stage}":
            raise PluginUnavailable("no such hardware")

    async def init(self) -> None:
        self.events.append("init")
        self._maybe_fail("init")

    async def cleanup(self) -> None:
        self.events.append("cleanup")

    async def list_devices(self) -> Sequence[ComputeDevice]:
        self._maybe_fail("list")
        return [ComputeDevice(self.key, DeviceId(f"{self.key}0"), "here", 0, 0, 1)]

    def configurable_slots(self) -> Sequence[SlotSpec]:
        return [SlotSpec(SlotName(self.slot), SlotType.COUNT)]

    def device_slots(self, devices: Any) -> dict[DeviceId, DeviceSlotInfo]:
        return {
            d.device_id: DeviceSlotInfo(SlotType.COUNT, SlotName(self.slot), Decimal(1))
            for d in devices
        }

    def create_lifecycle_hook(self, workload: Workload, device_alloc: Any, devices: Any) -> Hook:
        return Hook(workload, device_alloc, devices=devices)


def plugin_class(key: str, **attributes: Any) -> type[FakePlugin]:
    attributes.setdefault("slot", f"{key}.device")
    return type(f"{key.title()}Plugin", (FakePlugin,), {"key": key, **attributes})


def module_returning(factory: Callable[[Any], Any]) -> types.SimpleNamespace:
    @hookimpl
    def accelkit_compute_plugins(config: Any) -> Any:
        return factory(config)

    return types.SimpleNamespace(accelkit_compute_plugins=accelkit_compute_plugins)


def start(loader: PluginLoader) -> list[AbstractComputePlugin]:
    loader.build()
    return asyncio.run(loader.start())


def test_factory_builds_independent_managers():
    first, second = make_plugin_manager(), make_plugin_manager()
    assert first is not second
    assert first.project_name == "accelkit"
    assert hasattr(first.hook, "accelkit_compute_plugins")
    assert hasattr(first.hook, "accelkit_workload_event")


def test_loaded_plugin_receives_its_config_and_discovers():
    seen = {}
    loader = PluginLoader(PluginSelection(configs={"one": {"answer": 42}}))
    loader.register(
        module_returning(lambda c: [seen.setdefault("c", c) and plugin_class("one")(c)]), "one"
    )
    plugins = start(loader)
    assert [p.key for p in plugins] == ["one"]
    assert seen["c"] == {"answer": 42}
    assert plugins[0].devices[0].device_id == "one0"
    assert loader.records["one"].status is PluginStatus.LOADED


def test_implementation_may_take_fewer_arguments():
    @hookimpl
    def accelkit_compute_plugins() -> Any:
        return [plugin_class("bare")()]

    loader = PluginLoader()
    loader.register(
        types.SimpleNamespace(accelkit_compute_plugins=accelkit_compute_plugins), "bare"
    )
    assert [p.key for p in start(loader)] == ["bare"]


@pytest.mark.parametrize("stage", ["init", "list"])
def test_absent_hardware_is_unavailable_not_failed(stage):
    loader = PluginLoader()
    loader.register(
        module_returning(lambda c: [plugin_class("gpu", fail_in=f"absent-{stage}")()]), "gpu"
    )
    loader.register(module_returning(lambda c: [plugin_class("ok")()]), "ok")
    plugins = start(loader)
    record = loader.records["gpu"]
    assert record.status is PluginStatus.UNAVAILABLE
    assert record.error == "no such hardware"
    assert [p.key for p in plugins] == ["ok"]


@pytest.mark.parametrize("stage", ["init", "list"])
def test_raising_plugin_fails_and_others_keep_working(stage):
    instance = plugin_class("bad", fail_in=stage)()
    loader = PluginLoader()
    loader.register(module_returning(lambda c: [instance]), "bad")
    loader.register(module_returning(lambda c: [plugin_class("ok")()]), "ok")
    plugins = start(loader)
    record = loader.records["bad"]
    assert record.status is PluginStatus.FAILED
    assert record.error == f"RuntimeError: boom in {stage}"
    assert "Traceback" in (record.traceback or "")
    assert [p.key for p in plugins] == ["ok"]
    assert instance.events[-1] == "cleanup"  # a failed start is cleaned up at once


def test_hook_that_raises_while_building_fails_only_itself():
    def explode(config: Any) -> Any:
        raise ValueError("bad config value")

    loader = PluginLoader()
    loader.register(module_returning(explode), "bad")
    loader.register(module_returning(lambda c: [plugin_class("ok")()]), "ok")
    plugins = start(loader)
    assert loader.records["bad"].status is PluginStatus.FAILED
    assert "bad config value" in (loader.records["bad"].error or "")
    assert [p.key for p in plugins] == ["ok"]


def test_hook_raising_unavailable_while_building():
    def absent(config: Any) -> Any:
        raise PluginUnavailable("library not installed")

    loader = PluginLoader()
    loader.register(module_returning(absent), "gpu")
    start(loader)
    assert loader.records["gpu"].status is PluginStatus.UNAVAILABLE
    assert loader.records["gpu"].error == "library not installed"


def test_strict_mode_turns_a_failure_into_an_error():
    loader = PluginLoader(PluginSelection(strict=True))
    loader.register(module_returning(lambda c: [plugin_class("bad", fail_in="init")()]), "bad")
    loader.build()
    with pytest.raises(PluginLoadError, match="bad: RuntimeError: boom in init"):
        asyncio.run(loader.start())


def test_strict_mode_does_not_mind_absent_hardware():
    loader = PluginLoader(PluginSelection(strict=True))
    loader.register(
        module_returning(lambda c: [plugin_class("gpu", fail_in="absent-init")()]), "gpu"
    )
    assert start(loader) == []


def test_duplicate_keys_name_both_plugins():
    loader = PluginLoader()
    loader.register(
        module_returning(lambda c: [plugin_class("cuda")()]), "first", distribution="dist-a"
    )
    loader.register(
        module_returning(lambda c: [plugin_class("cuda")()]), "second", distribution="dist-b"
    )
    plugins = start(loader)
    record = loader.records["second"]
    assert record.status is PluginStatus.FAILED
    assert "PluginContractError" in (record.error or "")
    assert "'first' from dist-a" in (record.error or "")
    assert "'second' from dist-b" in (record.error or "")
    assert [p.key for p in plugins] == ["cuda"]


def test_duplicate_keys_are_a_startup_error_in_strict_mode():
    loader = PluginLoader(PluginSelection(strict=True))
    loader.register(module_returning(lambda c: [plugin_class("cuda")()]), "first")
    loader.register(module_returning(lambda c: [plugin_class("cuda")()]), "second")
    loader.build()
    with pytest.raises(PluginLoadError, match="claimed by both"):
        asyncio.run(loader.start())


def test_unprefixed_slot_names_the_plugin_whose_prefix_it_uses():
    loader = PluginLoader()
    loader.register(module_returning(lambda c: [plugin_class("cuda")()]), "cuda")
    loader.register(
        module_returning(lambda c: [plugin_class("rogue", slot="cuda.device")()]), "rogue"
    )
    start(loader)
    error = loader.records["rogue"].error or ""
    assert "not prefixed by its key 'rogue'" in error
    assert "CudaPlugin (plugin 'cuda'" in error


def test_device_slots_are_checked_after_discovery():
    class Sneaky(plugin_class("sneaky")):  # type: ignore[misc]
        def device_slots(self, devices: Any) -> dict[DeviceId, DeviceSlotInfo]:
            return {d.device_id: DeviceSlotInfo("count", "mem", 1) for d in devices}

    loader = PluginLoader()
    loader.register(module_returning(lambda c: [Sneaky()]), "sneaky")
    assert start(loader) == []
    assert "slot 'mem'" in (loader.records["sneaky"].error or "")


def test_non_plugin_objects_are_refused():
    loader = PluginLoader()
    loader.register(module_returning(lambda c: [object()]), "junk")
    start(loader)
    assert "not an AbstractComputePlugin" in (loader.records["junk"].error or "")


def test_plugin_without_key_is_refused():
    class Keyless(FakePlugin):
        key = ""  # type: ignore[assignment]

    loader = PluginLoader()
    loader.register(module_returning(lambda c: [Keyless()]), "keyless")
    start(loader)
    assert "no valid 'key'" in (loader.records["keyless"].error or "")


def test_abstract_methods_missing_fail_at_instantiation_with_the_class_name():
    class Incomplete(AbstractComputePlugin):
        key = DeviceName("inc")

    with pytest.raises(TypeError, match="Incomplete"):
        Incomplete()  # type: ignore[abstract]


@pytest.mark.parametrize(
    ("selection", "reason"),
    [
        (PluginSelection(blocked=["x"]), "listed in plugins.blocked"),
        (PluginSelection(allowed=["y"]), "not listed in plugins.allowed"),
        (
            PluginSelection().with_environment({"ACCELKIT_DISABLE_PLUGINS": "a, x"}),
            "disabled by ACCELKIT_DISABLE_PLUGINS",
        ),
        (PluginSelection(allowed=["x"], blocked=["x"]), "listed in plugins.blocked"),
    ],
)
def test_selection_blocks_by_entry_point_name(selection, reason):
    loader = PluginLoader(selection)
    loader.register(module_returning(lambda c: [plugin_class("x")()]), "x")
    assert start(loader) == []
    assert loader.records["x"].status is PluginStatus.BLOCKED
    assert loader.records["x"].error == reason


@pytest.mark.parametrize(
    ("value", "strict"),
    [("1", True), ("true", True), (" YES ", True), ("0", False), ("off", False)],
)
def test_strict_from_environment(value, strict):
    assert PluginSelection().with_environment({"ACCELKIT_STRICT_PLUGINS": value}).strict is strict


def test_strict_unset_keeps_the_config():
    assert PluginSelection().with_environment({}).strict is False
    assert PluginSelection(strict=True).with_environment({}).strict is True


@pytest.mark.parametrize("value", ["banana", "", "2", "\uff11"])
def test_strict_that_is_no_boolean_is_a_config_error_naming_the_variable(value):
    with pytest.raises(ConfigError, match=r"ACCELKIT_STRICT_PLUGINS=.*expected 1 or 0"):
        PluginSelection().with_environment({"ACCELKIT_STRICT_PLUGINS": value})


def test_a_distribution_may_return_several_plugins_and_close_cleans_all():
    instances = [plugin_class("a")(), plugin_class("b")()]
    loader = PluginLoader()
    loader.register(module_returning(lambda c: instances), "many")
    assert [p.key for p in start(loader)] == ["a", "b"]
    asyncio.run(loader.close())
    assert [i.events for i in instances] == [["init", "cleanup"], ["init", "cleanup"]]
    asyncio.run(loader.close())  # idempotent: nothing is cleaned twice
    assert instances[0].events.count("cleanup") == 1


def test_partly_unavailable_distribution_keeps_the_rest():
    instances = [plugin_class("a", fail_in="absent-init")(), plugin_class("b")()]
    loader = PluginLoader()
    loader.register(module_returning(lambda c: instances), "many")
    assert [p.key for p in start(loader)] == ["b"]
    record = loader.records["many"]
    assert record.status is PluginStatus.LOADED
    assert record.error == "a: no such hardware"


def test_workload_observers_are_isolated_from_each_other():
    seen: list[str] = []

    @hookimpl
    def accelkit_workload_event(event: WorkloadEvent) -> None:
        seen.append(event.phase)

    @hookimpl
    def broken_observer(event: WorkloadEvent) -> None:
        raise RuntimeError("observer bug")

    loader = PluginLoader()
    loader.register(types.SimpleNamespace(accelkit_workload_event=accelkit_workload_event), "good")
    # registered last, so pluggy would call it first and stop there without the guard
    loader.register(types.SimpleNamespace(accelkit_workload_event=broken_observer), "bad")
    event = WorkloadEvent(AgentId("agent-1"), Workload("w"), "post_create")
    loader.notify_workload_event(event)
    assert seen == [WorkloadPhase.POST_CREATE]


def test_slot_prefix_rule():
    cores, memory, accelerator = PluginRole.CORES, PluginRole.MEMORY, PluginRole.ACCELERATOR
    assert slot_belongs("cpu", cores, "cpu")
    assert slot_belongs("vcpu", cores, "cpu")  # the role offers the bare slot, not the key
    assert slot_belongs("ram", memory, "mem")
    assert slot_belongs("cuda", accelerator, "cuda.device")
    assert slot_belongs("cuda", accelerator, "cuda.mig-1g.10gb")
    assert slot_belongs("vcpu", cores, "vcpu.smt")
    assert not slot_belongs("cuda", accelerator, "cuda.")
    assert not slot_belongs("cuda", accelerator, "cpu")
    assert not slot_belongs("cpu", accelerator, "cpu")
    assert not slot_belongs("cpu", cores, "mem")
    assert not slot_belongs("gpu", accelerator, "cuda.device")
    assert not slot_belongs("cpux", accelerator, "cpu")


def test_record_json_shape():
    loader = PluginLoader()
    record = loader.register(module_returning(lambda c: []), "empty", distribution="d", version="1")
    start(loader)
    assert record.as_json() == {
        "name": "empty",
        "distribution": "d",
        "version": "1",
        "status": "loaded",
        "error": None,
    }
