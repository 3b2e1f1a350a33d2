"""The conformance kit itself: a sound plugin passes, and each broken rule fails with a sentence."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, ClassVar

import pytest

from accelkit.allocmap import AbstractAllocMap, DiscretePropertyAllocMap
from accelkit.errors import InsufficientResource, PluginUnavailable
from accelkit.plugin import (
    AbstractComputePlugin,
    AbstractLifecycleHook,
    MaskedAgentContext,
    PluginRole,
)
from accelkit.testing import PluginConformance
from accelkit.types import (
    ComputeDevice,
    DeviceAllocation,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotSpec,
    SlotType,
    Workload,
    WorkloadConfig,
)

from .conformance_support import Failed, Skipped, run_check


class GoodHook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(env_vars={"NPUS": ",".join(self.allocated_device_ids)})


class GoodPlugin(AbstractComputePlugin):
    key = DeviceName("npu")
    api_version = "2.0"
    count = 3

    async def list_devices(self) -> Sequence[ComputeDevice]:
        return [ComputeDevice("npu", f"npu{i}", f"pci:{i}", 0, 1024, 8) for i in range(self.count)]

    def configurable_slots(self) -> Sequence[SlotSpec]:
        return [SlotSpec("npu.device", SlotType.COUNT)]

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        return {d.device_id: DeviceSlotInfo("count", "npu.device", 1) for d in devices}

    def create_lifecycle_hook(
        self, workload: Workload, device_alloc: DeviceAllocation, devices: Any
    ) -> AbstractLifecycleHook:
        return GoodHook(workload, device_alloc, devices=devices)


CHECKS = sorted(n for n in dir(PluginConformance) if n.startswith("test_"))


@pytest.mark.parametrize("name", CHECKS)
def test_a_sound_plugin_passes_every_check(name):
    run_check(name, GoodPlugin())


def test_the_suite_checks_every_rule_the_design_names():
    assert {
        "test_key_is_a_plain_name",
        "test_role_is_declared_and_fits_the_slots",
        "test_configurable_slots_are_prefixed_by_the_key",
        "test_every_device_slot_is_a_configurable_slot",
        "test_context_lists_only_its_devices",
        "test_available_slots_count_only_its_devices",
        "test_alloc_maps_cover_only_its_devices",
        "test_allocate_never_grants_devices_outside_the_mask",
        "test_apply_allocation_refuses_devices_outside_the_mask",
        "test_free_refuses_devices_outside_the_mask",
        "test_alloc_to_devices_refuses_devices_outside_the_mask",
        "test_lifecycle_hook_refuses_devices_outside_the_mask",
        "test_hook_returns_a_valid_config",
        "test_hook_is_deterministic_across_a_fresh_plugin_instance",
        "test_hook_survives_a_restart_between_phases",
        "test_node_metrics_are_well_formed",
        "test_workload_and_process_metrics_are_well_formed",
        "test_cleanup_is_idempotent",
        "test_hooks_serve_both_workload_types",
        "test_env_values_hold_no_newline_or_nul",
        "test_hook_exposes_only_the_devices_it_was_given",
        "test_post_terminate_is_idempotent",
        "test_exclusive_slot_types_match_an_offered_slot",
        "test_health_reports_name_only_the_plugins_devices",
        "test_an_installed_distribution_registers_a_plugin",
    } <= set(CHECKS)


# -- the plugin object --------------------------------------------------------------------------


class DottedKey(GoodPlugin):
    key = DeviceName("acme.npu")


class NoKey(GoodPlugin):
    key = DeviceName("")


class UnprefixedSlot(GoodPlugin):
    def configurable_slots(self) -> Sequence[SlotSpec]:
        return [SlotSpec("device", SlotType.COUNT)]


class RepeatedSlot(GoodPlugin):
    def configurable_slots(self) -> Sequence[Any]:
        return [SlotSpec("npu.device", SlotType.COUNT)] * 2 + ["npu.extra"]


class NoSlots(GoodPlugin):
    def configurable_slots(self) -> Sequence[SlotSpec]:
        return []


class WrongDeviceName(GoodPlugin):
    async def list_devices(self) -> Sequence[ComputeDevice]:
        return [ComputeDevice("gpu", "npu0", "pci:0", 0, 1024, 8)]


class RepeatedDevice(GoodPlugin):
    async def list_devices(self) -> Sequence[ComputeDevice]:
        return [ComputeDevice("npu", "npu0", "pci:0", 0, 1024, 8)] * 2


class UndeclaredSlot(GoodPlugin):
    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, Any]:
        slots: dict[DeviceId, Any] = {
            d.device_id: DeviceSlotInfo("count", "npu.other", 1) for d in devices
        }
        if slots:
            slots[next(iter(slots))] = "not a slot info"
        return slots


class ForgetfulSlots(GoodPlugin):
    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        return dict(itertools.islice(super().device_slots(devices).items(), 1))


class EverySlotAlways(GoodPlugin):
    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        return super().device_slots(self.devices)


class BadNodeInfo(GoodPlugin):
    async def get_node_info(self) -> Any:
        return {"driver": "1.0"}


class BareSlotPlugin(GoodPlugin):
    """A plugin offering one bare slot (``cpu`` or ``mem``) instead of ``npu.device``."""

    bare: ClassVar[str] = "cpu"
    bare_type: ClassVar[SlotType] = SlotType.COUNT

    async def list_devices(self) -> Sequence[ComputeDevice]:
        return [ComputeDevice(self.key, f"{i}", f"x:{i}", 0, 1024, 1) for i in range(self.count)]

    def configurable_slots(self) -> Sequence[SlotSpec]:
        return [SlotSpec(self.bare, self.bare_type)]

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        return {d.device_id: DeviceSlotInfo(self.bare_type, self.bare, 1) for d in devices}


class CoresPlugin(BareSlotPlugin):
    key = DeviceName("vcpu")
    role = PluginRole.CORES


class MemoryPlugin(BareSlotPlugin):
    key = DeviceName("ram")
    role = PluginRole.MEMORY
    bare = "mem"
    bare_type = SlotType.BYTES
    shared_by_amount = True


class RoleAsText(GoodPlugin):
    role = "accelerator"  # type: ignore[assignment]


class CoresWithoutCpuSlot(GoodPlugin):
    role = PluginRole.CORES


class CoresCountedInBytes(CoresPlugin):
    bare_type = SlotType.BYTES


class MemoryByDevice(MemoryPlugin):
    shared_by_amount = False


class AcceleratorWithCpuSlot(BareSlotPlugin):
    key = DeviceName("cpu")  # the key alone no longer makes a plugin the cores plugin


@pytest.mark.parametrize("plugin_class", [CoresPlugin, MemoryPlugin])
@pytest.mark.parametrize("name", CHECKS)
def test_sound_cores_and_memory_plugins_pass_every_check(plugin_class, name):
    run_check(name, plugin_class())


class CleanupOnce(GoodPlugin):
    async def cleanup(self) -> None:
        if getattr(self, "closed", False):
            msg = "already closed"
            raise RuntimeError(msg)
        self.closed = True


@pytest.mark.parametrize(
    ("plugin_class", "check", "sentence"),
    [
        (DottedKey, "test_key_is_a_plain_name", "the key 'acme.npu' must not contain a dot"),
        (NoKey, "test_key_is_a_plain_name", "must set the class attribute `key`"),
        (UnprefixedSlot, "test_configurable_slots_are_prefixed_by_the_key", "named 'npu.<slot>'"),
        (RepeatedSlot, "test_configurable_slots_are_prefixed_by_the_key", "more than once"),
        (RepeatedSlot, "test_configurable_slots_are_prefixed_by_the_key", "not a SlotSpec"),
        (NoSlots, "test_configurable_slots_are_prefixed_by_the_key", "at least one slot"),
        (WrongDeviceName, "test_devices_are_named_for_the_plugin", "must be the plugin key"),
        (RepeatedDevice, "test_devices_are_named_for_the_plugin", "must be unique"),
        (UndeclaredSlot, "test_every_device_slot_is_a_configurable_slot", "does not list"),
        (UndeclaredSlot, "test_every_device_slot_is_a_configurable_slot", "not a DeviceSlotInfo"),
        (ForgetfulSlots, "test_every_device_slot_is_a_configurable_slot", "gives no slot"),
        (EverySlotAlways, "test_device_slots_cover_only_the_devices_asked_for", "exactly"),
        (BadNodeInfo, "test_node_info_is_a_node_info", "must return a NodeInfo, not dict"),
        (CleanupOnce, "test_cleanup_is_idempotent", "safe to call twice; the second call"),
        (RoleAsText, "test_role_is_declared_and_fits_the_slots", "'accelerator', not a PluginRole"),
        (CoresWithoutCpuSlot, "test_role_is_declared_and_fits_the_slots", "no slot 'cpu'"),
        (CoresCountedInBytes, "test_role_is_declared_and_fits_the_slots", "is bytes, not count"),
        (MemoryByDevice, "test_role_is_declared_and_fits_the_slots", "shared_by_amount = True"),
        (
            AcceleratorWithCpuSlot,
            "test_configurable_slots_are_prefixed_by_the_key",
            "only the plugin with role PluginRole.CORES offers the bare 'cpu'",
        ),
    ],
)
def test_a_broken_plugin_fails_with_a_sentence(plugin_class, check, sentence):
    with pytest.raises(Failed, match=sentence.replace("(", r"\(").replace(".", r"\.")):
        run_check(check, plugin_class())


# -- masks --------------------------------------------------------------------------------------


class LeakyContext(MaskedAgentContext):
    """A context that forgets its mask in the methods named by ``leaks``."""

    leaks: frozenset[str] = frozenset()

    def list_devices(self) -> Sequence[ComputeDevice]:
        return self.plugin.devices if "list" in self.leaks else super().list_devices()

    def available_slots(self) -> Any:
        if "slots" in self.leaks:
            return {"npu.device": Decimal(len(self.plugin.devices))}
        return super().available_slots()

    def create_alloc_map(self) -> AbstractAllocMap:
        if "map" in self.leaks:
            return DiscretePropertyAllocMap(self.plugin.device_slots(self.plugin.devices))
        return super().create_alloc_map()

    def alloc_to_devices(self, device_alloc: DeviceAllocation) -> Sequence[ComputeDevice]:
        if "devices" in self.leaks:
            return [
                d
                for d in self.plugin.devices
                if any(d.device_id in a for a in device_alloc.values())
            ]
        return super().alloc_to_devices(device_alloc)

    def create_lifecycle_hook(self, workload: Workload, device_alloc: DeviceAllocation) -> Any:
        if "hook" in self.leaks:
            return self.plugin.create_lifecycle_hook(workload, device_alloc, {})
        return super().create_lifecycle_hook(workload, device_alloc)


def leaky(*leaks: str) -> GoodPlugin:
    context = type("Leaky", (LeakyContext,), {"leaks": frozenset(leaks)})

    class Plugin(GoodPlugin):
        def create_agent_context(self, agent_id: Any, partition: Any) -> Any:
            return context(self, agent_id, partition)

    return Plugin()


class MaskBlindMap(GoodPlugin):
    def create_alloc_map(self, device_slots: Any, device_mask: Any) -> AbstractAllocMap:
        return DiscretePropertyAllocMap(device_slots)


class UnderReportingMap(DiscretePropertyAllocMap):
    def allocatable(self) -> Any:
        return {k: v // 2 for k, v in super().allocatable().items()}


class SilentFree(DiscretePropertyAllocMap):
    def free(self, alloc: Any) -> None:
        pass


class PartialFree(DiscretePropertyAllocMap):
    def free(self, alloc: Any) -> None:
        for slot, per_device in alloc.items():
            for device, amount in per_device.items():
                super().free({slot: {device: amount}})


def with_map(map_class: type[DiscretePropertyAllocMap]) -> GoodPlugin:
    class Plugin(GoodPlugin):
        def create_alloc_map(self, device_slots: Any, device_mask: Any) -> AbstractAllocMap:
            return map_class(device_slots, device_mask=device_mask)

    return Plugin()


class HiddenCapacity(GoodPlugin):
    count = 4

    def create_alloc_map(self, device_slots: Any, device_mask: Any) -> AbstractAllocMap:
        return UnderReportingMap(device_slots, device_mask=device_mask)


@pytest.mark.parametrize(
    ("plugin", "check", "sentence"),
    [
        (leaky("list"), "test_context_lists_only_its_devices", "the agent context lists"),
        (leaky("slots"), "test_available_slots_count_only_its_devices", "more than the agent's"),
        (leaky("map"), "test_alloc_maps_cover_only_its_devices", "create_alloc_map\\(\\) of"),
        (leaky("map"), "test_allocate_never_grants_devices_outside_the_mask", "granted device"),
        (
            leaky("map"),
            "test_apply_allocation_refuses_devices_outside_the_mask",
            "apply_allocation\\(\\) on the agent's alloc map accepted device 'npu1'",
        ),
        (
            MaskBlindMap(),
            "test_apply_allocation_refuses_devices_outside_the_mask",
            "on the plugin's create_alloc_map\\(\\) accepted",
        ),
        (with_map(SilentFree), "test_free_refuses_devices_outside_the_mask", "free\\(\\) on"),
        (with_map(PartialFree), "test_free_refuses_devices_outside_the_mask", "all or nothing"),
        (leaky("devices"), "test_alloc_to_devices_refuses_devices_outside_the_mask", "accepted"),
        (leaky("hook"), "test_lifecycle_hook_refuses_devices_outside_the_mask", "accepted"),
        (HiddenCapacity(), "test_allocate_never_grants_devices_outside_the_mask", "still granted"),
    ],
)
def test_a_context_that_ignores_its_mask_fails_with_a_sentence(plugin, check, sentence):
    with pytest.raises(Failed, match=sentence):
        run_check(check, plugin)


class ListsAnotherDevice(LeakyContext):
    def list_devices(self) -> Sequence[ComputeDevice]:
        return self.devices

    @property
    def device_mask(self) -> frozenset[DeviceId]:  # type: ignore[override]
        return frozenset({DeviceId("npu9")})

    @device_mask.setter
    def device_mask(self, value: frozenset[DeviceId]) -> None:
        pass


def test_a_context_reporting_another_mask_fails():
    class Plugin(GoodPlugin):
        def create_agent_context(self, agent_id: Any, partition: Any) -> Any:
            return ListsAnotherDevice(self, agent_id, partition)

    with pytest.raises(Failed, match="the context's device_mask is \\['npu9'\\]"):
        run_check("test_context_lists_only_its_devices", Plugin())


def test_alloc_to_devices_must_name_the_allocated_device():
    class Plugin(GoodPlugin):
        def create_agent_context(self, agent_id: Any, partition: Any) -> Any:
            class Context(MaskedAgentContext):
                def alloc_to_devices(self, device_alloc: DeviceAllocation) -> Any:
                    super().alloc_to_devices(device_alloc)
                    return []

            return Context(self, agent_id, partition)

    with pytest.raises(Failed, match="returned \\[\\]"):
        run_check("test_alloc_to_devices_refuses_devices_outside_the_mask", Plugin())


def test_checks_needing_two_devices_skip_with_one():
    class Single(GoodPlugin):
        count = 1

    with pytest.raises(Skipped, match="at least two devices"):
        run_check("test_free_refuses_devices_outside_the_mask", Single())


def test_checks_skip_without_devices():
    class Empty(GoodPlugin):
        count = 0

    with pytest.raises(Skipped, match="found no devices"):
        run_check("test_context_lists_only_its_devices", Empty())


def test_checks_skip_when_the_plugin_is_unavailable():
    class Absent(GoodPlugin):
        async def init(self) -> None:
            msg = "no NPU driver"
            raise PluginUnavailable(msg)

    with pytest.raises(Skipped, match="unavailable here: no NPU driver"):
        run_check("test_node_metrics_are_well_formed", Absent())


def test_checks_skip_when_there_is_no_capacity():
    class Empty(GoodPlugin):
        def device_slots(self, devices: Iterable[ComputeDevice]) -> Any:
            return {d.device_id: DeviceSlotInfo("count", "npu.device", 0) for d in devices}

    with pytest.raises(Skipped, match="no capacity"):
        run_check("test_hook_returns_a_valid_config", Empty())


# -- hooks --------------------------------------------------------------------------------------


class InvalidConfigHook(AbstractLifecycleHook):
    async def pre_create(self) -> Any:
        return WorkloadConfig(env_vars={"BAD NAME": "1"}, cdi_devices=["npu0"])


class CountingHook(AbstractLifecycleHook):
    counter = itertools.count()

    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(env_vars={"N": str(next(self.counter))})


class SessionHook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(env_vars={"SESSION": str(self.devices_session)})  # type: ignore[attr-defined]


class RememberingHook(AbstractLifecycleHook):
    prepared: ClassVar[set[str]] = set()

    async def pre_create(self) -> WorkloadConfig:
        RememberingHook.prepared.add(f"{self.owner}:{self.workload.id}")  # type: ignore[attr-defined]
        return WorkloadConfig()

    async def post_terminate(self) -> None:
        key = f"{self.owner}:{self.workload.id}"  # type: ignore[attr-defined]
        if key not in RememberingHook.prepared:
            msg = f"never prepared {key}"
            raise KeyError(msg)


def with_hook(hook_class: type[AbstractLifecycleHook], **extra: Any) -> type[GoodPlugin]:
    class Plugin(GoodPlugin):
        def create_lifecycle_hook(self, workload: Any, device_alloc: Any, devices: Any) -> Any:
            hook = hook_class(workload, device_alloc, devices=devices)
            for name, make in extra.items():
                setattr(hook, name, make(self))
            return hook

    return Plugin


_SESSIONS = itertools.count()


class SessionPlugin(GoodPlugin):
    async def init(self) -> None:
        self.session = next(_SESSIONS)

    def create_lifecycle_hook(self, workload: Any, device_alloc: Any, devices: Any) -> Any:
        hook = SessionHook(workload, device_alloc, devices=devices)
        hook.devices_session = self.session  # type: ignore[attr-defined]
        return hook


@pytest.mark.parametrize(
    ("plugin", "check", "sentence"),
    [
        (with_hook(InvalidConfigHook)(), "test_hook_returns_a_valid_config", "'BAD NAME'"),
        (with_hook(InvalidConfigHook)(), "test_hook_returns_a_valid_config", "fully qualified"),
        (
            with_hook(CountingHook)(),
            "test_hook_is_deterministic_across_a_fresh_plugin_instance",
            "two hooks for the same",
        ),
        (
            SessionPlugin(),
            "test_hook_is_deterministic_across_a_fresh_plugin_instance",
            "a hook built by a fresh plugin instance",
        ),
        (
            with_hook(RememberingHook, owner=id)(),
            "test_hook_survives_a_restart_between_phases",
            "post_terminate\\(\\) of a hook rebuilt after a restart raised KeyError",
        ),
    ],
)
def test_a_stateful_or_invalid_hook_fails_with_a_sentence(plugin, check, sentence):
    with pytest.raises(Failed, match=sentence):
        run_check(check, plugin)


def test_a_factory_returning_the_same_instance_fails():
    plugin = GoodPlugin()
    with pytest.raises(Failed, match="must build a new plugin instance"):
        run_check("test_hook_survives_a_restart_between_phases", plugin, lambda: plugin)


def test_an_uncopyable_plugin_is_told_to_override_the_factory():
    class Locked(GoodPlugin):
        def __init__(self) -> None:
            super().__init__({})
            self.lock = threading.Lock()

    with pytest.raises(Failed, match="override the `plugin_factory` fixture"):
        run_check("test_hook_is_deterministic_across_a_fresh_plugin_instance", Locked())


def test_a_second_instance_must_start_too():
    class OnlyOnce(GoodPlugin):
        started = 0

        async def init(self) -> None:
            type(self).started += 1
            if type(self).started > 1:
                msg = "device busy"
                raise PluginUnavailable(msg)

    with pytest.raises(Failed, match=r"second instance .* is unavailable \(device busy\)"):
        run_check("test_hook_survives_a_restart_between_phases", OnlyOnce())


def test_a_second_instance_must_find_the_same_devices():
    class Shrinking(GoodPlugin):
        async def list_devices(self) -> Sequence[ComputeDevice]:
            devices = await super().list_devices()
            type(self).count -= 1
            return devices

    with pytest.raises(Failed, match="found different devices"):
        run_check("test_hook_survives_a_restart_between_phases", Shrinking())


def test_an_alloc_map_refusing_one_unit_fails():
    class AlwaysFull(DiscretePropertyAllocMap):
        def allocate(self, slots: Any, **kwargs: Any) -> Any:
            msg = "full"
            raise InsufficientResource(msg, slot="npu.device", requested=1, allocatable=0)

    class Plugin(GoodPlugin):
        def create_alloc_map(self, device_slots: Any, device_mask: Any) -> AbstractAllocMap:
            return AlwaysFull(device_slots, device_mask=device_mask)

    with pytest.raises(Failed, match=r"refused 1 of 'npu\.device' although"):
        run_check("test_hook_returns_a_valid_config", Plugin())


def test_cleanup_raising_on_the_first_call_is_reported():
    class Raising(GoodPlugin):
        async def cleanup(self) -> None:
            msg = "boom"
            raise OSError(msg)

    with pytest.raises(Failed, match="the first call raised OSError"):
        run_check("test_cleanup_is_idempotent", Raising())
