"""Health value types and the plugin defaults: every device healthy, no events."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from decimal import Decimal

import pytest

from accelkit.health import DeviceHealth, HealthEvent, HealthState
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook
from accelkit.types import (
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotName,
    SlotSpec,
    SlotType,
)


def test_only_unhealthy_keeps_a_device_out_of_grants() -> None:
    assert [s.value for s in HealthState if not s.allocatable] == ["unhealthy"]
    assert DeviceHealth("degraded", "ECC errors").allocatable
    assert not DeviceHealth("unhealthy", "XID 79").allocatable


def test_a_report_is_stamped_now_and_converts_its_state() -> None:
    report = DeviceHealth("healthy")
    assert report.state is HealthState.HEALTHY
    assert report.since > Decimal(1_600_000_000)
    assert isinstance(report.since, Decimal)


@pytest.mark.parametrize("bad", ["-1", "NaN", "Infinity"])
def test_a_timestamp_must_be_a_finite_non_negative_number(bad: str) -> None:
    with pytest.raises(ValueError, match="not a timestamp"):
        DeviceHealth("healthy", since=Decimal(bad))


def test_an_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError, match="sideways"):
        DeviceHealth("sideways")


def test_an_event_carries_the_new_reason() -> None:
    event = HealthEvent(DeviceId("cuda0"), "healthy", DeviceHealth("unhealthy", "XID 79"))
    assert event.old is HealthState.HEALTHY
    assert event.reason == "XID 79"


class _Plain(AbstractComputePlugin):
    key = DeviceName("plain")
    api_version = "2.0"
    lifecycle_hook_class = AbstractLifecycleHook

    async def list_devices(self) -> list[ComputeDevice]:
        return [
            ComputeDevice(self.key, DeviceId(f"plain{i}"), f"bus{i}", None, 0, 1) for i in range(2)
        ]

    def configurable_slots(self) -> list[SlotSpec]:
        return [SlotSpec(SlotName("plain.device"), SlotType.COUNT)]

    def device_slots(self, devices: Iterable[ComputeDevice]) -> dict[DeviceId, DeviceSlotInfo]:
        slot = SlotName("plain.device")
        return {d.device_id: DeviceSlotInfo(SlotType.COUNT, slot, Decimal(1)) for d in devices}


def test_the_default_plugin_reports_every_device_healthy_and_no_events() -> None:
    async def scenario() -> tuple[dict[DeviceId, DeviceHealth], list[HealthEvent]]:
        plugin = _Plain({})
        await plugin.discover()
        report = dict(await plugin.device_health())
        events = [event async for event in plugin.watch_health()]
        return report, events

    report, events = asyncio.run(scenario())
    assert sorted(report) == ["plain0", "plain1"]
    assert all(h.state is HealthState.HEALTHY for h in report.values())
    assert events == []
