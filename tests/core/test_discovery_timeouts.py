"""Time limits on start-up calls: a plugin that hangs is ``failed``, the others start."""

from __future__ import annotations

import asyncio
import logging
import time
import types
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, ClassVar

import pytest

from accelkit import hookimpl
from accelkit.discovery import PluginLoader
from accelkit.errors import PluginLoadError
from accelkit.plugin import AbstractComputePlugin
from accelkit.registry import PluginStatus
from accelkit.selection import PluginSelection
from accelkit.types import (
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotSpec,
)

from .one_device_plugin import OneDevicePlugin

LIMIT = Decimal("0.2")
HANG = 5.0  # seconds a hanging call would take: far above LIMIT, short enough to end on its own


class Plugin(OneDevicePlugin):
    """Hangs in ``hang_in``: coroutines await, synchronous methods block their thread."""

    key: ClassVar[DeviceName] = DeviceName("ok")
    hang_in: ClassVar[str] = ""

    async def _wait(self, stage: str) -> None:
        if self.hang_in == stage:
            await asyncio.sleep(HANG)

    def _block(self, stage: str) -> None:
        if self.hang_in == stage:
            time.sleep(HANG)

    async def init(self) -> None:
        await self._wait("init")

    async def cleanup(self) -> None:
        await self._wait("cleanup")

    async def list_devices(self) -> Sequence[ComputeDevice]:
        await self._wait("list_devices")
        return await super().list_devices()

    def configurable_slots(self) -> Sequence[SlotSpec]:
        self._block("configurable_slots")
        return super().configurable_slots()

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        self._block("device_slots")
        return super().device_slots(devices)


def module(key: str, hang_in: str = "", *, build_hangs: bool = False) -> types.SimpleNamespace:
    cls = type(f"{key.title()}Plugin", (Plugin,), {"key": key, "hang_in": hang_in})

    @hookimpl
    def accelkit_compute_plugins(config: Any) -> Any:
        if build_hangs:
            time.sleep(HANG)
        return [cls(config)]

    return types.SimpleNamespace(accelkit_compute_plugins=accelkit_compute_plugins)


def loader_with(hanging: types.SimpleNamespace, *, strict: bool = False) -> PluginLoader:
    loader = PluginLoader(PluginSelection(call_timeout=LIMIT, strict=strict))
    loader.register(hanging, "slow")
    loader.register(module("ok"), "ok")
    return loader


async def start(loader: PluginLoader) -> list[AbstractComputePlugin]:
    loader.build()
    try:
        return await loader.start()
    finally:
        await loader.close()


@pytest.mark.parametrize(
    ("hanging", "method"),
    [
        (module("slow", build_hangs=True), "accelkit_compute_plugins"),
        (module("slow", "configurable_slots"), "configurable_slots"),
        (module("slow", "init"), "init"),
        (module("slow", "list_devices"), "list_devices"),
        (module("slow", "device_slots"), "device_slots"),
    ],
)
def test_a_plugin_that_hangs_at_start_up_is_failed_and_the_others_start(hanging, method):
    loader = loader_with(hanging)
    began = time.monotonic()
    plugins = asyncio.run(start(loader))
    assert time.monotonic() - began < HANG  # the limit fired; nobody waited for the hang
    assert [p.key for p in plugins] == ["ok"]
    record = loader.records["slow"]
    assert record.status is PluginStatus.FAILED
    assert record.error == f"plugin 'slow' timed out after 0.2 s in {method}"
    assert loader.records["ok"].status is PluginStatus.LOADED


def test_strict_mode_turns_a_timeout_into_a_start_up_error():
    loader = loader_with(module("slow", "list_devices"), strict=True)
    with pytest.raises(PluginLoadError, match=r"slow: plugin 'slow' timed out after 0\.2 s in"):
        asyncio.run(start(loader))


def test_a_cleanup_that_hangs_is_logged_and_closing_goes_on(caplog):
    loader = loader_with(module("slow", "cleanup"))
    loader.build()

    async def run() -> None:
        await loader.start()
        await loader.close()

    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="accelkit.discovery"):
        asyncio.run(run())
    assert time.monotonic() - began < HANG
    assert "cleanup of plugin <SlowPlugin key='slow'> failed" in caplog.text
    assert "timed out after 0.2 s in cleanup" in caplog.text


def test_the_limit_comes_from_the_host_config(tmp_path):
    from accelkit.config import load_host_config

    path = tmp_path / "host.toml"
    path.write_text('[plugins]\ncall-timeout = "0.2"\n')
    selection = load_host_config(path).plugins
    assert selection.call_timeout == LIMIT
    loader = PluginLoader(selection)
    loader.register(module("slow", "init"), "slow")
    asyncio.run(start(loader))
    assert loader.records["slow"].error == "plugin 'slow' timed out after 0.2 s in init"


def test_a_plugin_that_hangs_creating_an_agent_context_fails_the_host_start_by_name():
    import attrs

    from accelkit.config import HostConfig
    from accelkit.errors import PluginTimeout
    from accelkit.host import PartitionHost

    class Stuck(Plugin):
        key = DeviceName("stuck")

        def create_agent_context(self, agent_id: Any, partition: Any) -> Any:
            time.sleep(HANG)

    cleaned: list[str] = []

    class Cleaned(Stuck):
        async def cleanup(self) -> None:
            cleaned.append(self.key)

    class Fine(Plugin):
        key = DeviceName("fine")

        async def cleanup(self) -> None:
            cleaned.append(self.key)

    @hookimpl
    def accelkit_compute_plugins(config: Any) -> Any:
        return [Fine(config), Cleaned(config)]

    config = HostConfig()
    config = attrs.evolve(config, plugins=attrs.evolve(config.plugins, call_timeout=LIMIT))
    loader = PluginLoader(config.plugins)
    loader.register(types.SimpleNamespace(accelkit_compute_plugins=accelkit_compute_plugins), "s")
    loader.build()

    async def run() -> None:
        async with PartitionHost.open(config, loader=loader):
            pass

    began = time.monotonic()
    with pytest.raises(PluginTimeout, match=r"'stuck' timed out after 0\.2 s in create_agent_cont"):
        asyncio.run(run())
    assert time.monotonic() - began < HANG
    # the half-started host cleaned its plugins up, but the one stuck on its worker: a call
    # queued there would wait for the hang
    assert cleaned == ["fine"]
    assert loader.records["s"].status is PluginStatus.FAILED


def test_a_workload_observer_that_hangs_is_left_behind_and_the_others_are_told(caplog):
    from accelkit.events import WorkloadEvent, WorkloadPhase
    from accelkit.types import AgentId, Workload

    seen: list[str] = []
    told: list[str] = []

    @hookimpl
    def accelkit_workload_event(event: WorkloadEvent) -> None:
        told.append(event.workload.id)
        time.sleep(HANG)

    @hookimpl
    def attentive(event: WorkloadEvent) -> None:
        seen.append(event.workload.id)

    loader = PluginLoader(PluginSelection(call_timeout=LIMIT))
    loader.register(types.SimpleNamespace(accelkit_workload_event=accelkit_workload_event), "hung")
    loader.register(types.SimpleNamespace(accelkit_workload_event=attentive), "fine")
    event = WorkloadEvent(AgentId("a"), Workload("w1"), WorkloadPhase.POST_CREATE)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="accelkit.discovery"):
        loader.notify_workload_event(event)
    assert time.monotonic() - began < HANG
    assert seen == ["w1"]
    assert "timed out after 0.2 s in accelkit_workload_event" in caplog.text
    # stuck on its worker, the observer is not told again (nor waited for) in this process
    loader.notify_workload_event(
        WorkloadEvent(AgentId("a"), Workload("w2"), WorkloadPhase.POST_CREATE)
    )
    assert seen == ["w1", "w2"]
    assert told == ["w1"]


class TwiceListingPlugin(Plugin):
    """Lists one device twice: a contract breach, reported at discovery."""

    key: ClassVar[DeviceName] = DeviceName("twice")

    async def list_devices(self) -> Sequence[ComputeDevice]:
        one = ComputeDevice(self.key, DeviceId("twice0"), "here", 0, 0, 1)
        return [one, ComputeDevice(self.key, DeviceId("twice1"), "here", 0, 0, 1), one]


def test_a_plugin_listing_a_device_twice_fails_and_the_others_start():
    @hookimpl
    def accelkit_compute_plugins(config: Any) -> Any:
        return [TwiceListingPlugin(config)]

    loader = PluginLoader(PluginSelection(call_timeout=LIMIT))
    loader.register(
        types.SimpleNamespace(accelkit_compute_plugins=accelkit_compute_plugins), "twice"
    )
    loader.register(module("ok"), "ok")
    started = asyncio.run(start(loader))
    assert [p.key for p in started] == ["ok"]
    record = loader.records["twice"]
    assert record.status is PluginStatus.FAILED
    assert "list_devices returned duplicate device ids: twice0" in (record.error or "")
