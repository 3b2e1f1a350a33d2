"""Every plugin call runs on the plugin's own worker: a plugin that blocks instead of awaiting
is cut off at the limit like one that awaits forever, its worker abandoned, the plugin failed.

Blocked calls wait on ``released`` (set when the module's tests are done), never on the clock.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import threading
import time
import types
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

import pytest

from accelkit import hookimpl
from accelkit.calls import (
    call_async,
    call_blocking,
    call_sync,
    failure_of,
    iterate,
    on_failure,
    plugin_of,
    retire,
    worker_of,
)
from accelkit.discovery import PluginLoader
from accelkit.errors import PluginTimeout
from accelkit.partition import DevicePartition
from accelkit.plugin import AbstractLifecycleHook
from accelkit.registry import PluginStatus
from accelkit.selection import PluginSelection
from accelkit.types import AgentId, DeviceName, Workload, WorkloadConfig

from .one_device_plugin import OneDevicePlugin

LIMIT = Decimal("0.2")
HANG = 3600.0  # what a blocked call would take if nobody cut it off
released = threading.Event()


@pytest.fixture(autouse=True, scope="module")
def _release_blocked_workers():
    yield
    released.set()


class Hook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(env_vars={"THREAD": threading.current_thread().name})


class Plugin(OneDevicePlugin):
    key: ClassVar[DeviceName] = DeviceName("w")
    api_version: ClassVar[str] = "2.0"
    lifecycle_hook_class = Hook

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.started = threading.Event()
        self.cancelled = threading.Event()

    async def where(self) -> str:
        return threading.current_thread().name

    def where_sync(self, suffix: str = "") -> str:
        return threading.current_thread().name + suffix

    async def blocks(self) -> None:
        released.wait(HANG)  # blocks its thread instead of awaiting

    def blocks_sync(self) -> None:
        released.wait(HANG)

    async def awaits(self) -> None:
        self.started.set()
        try:
            await asyncio.sleep(HANG)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


def test_a_coroutine_that_blocks_is_cut_off_while_the_callers_loop_runs_on():
    plugin = Plugin()
    heard: list[str] = []
    on_failure(plugin, heard.append)
    ticks = 0

    async def main() -> None:
        nonlocal ticks

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        with pytest.raises(PluginTimeout, match=r"^plugin 'p' timed out after 0\.2 s in blocks$"):
            await call_async("p", "blocks", LIMIT, plugin.blocks)
        ticker.cancel()

    began = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - began < HANG / 10
    assert ticks > 1  # the caller's loop was never blocked
    assert failure_of(plugin) == "plugin 'p' timed out after 0.2 s in blocks"
    assert heard == ["plugin 'p' timed out after 0.2 s in blocks"]
    # failed for the process: every later call is refused at once, and said so once
    with pytest.raises(PluginTimeout, match=r"plugin 'p' is failed, where is not called"):
        asyncio.run(call_async("p", "where", LIMIT, plugin.where))
    with pytest.raises(PluginTimeout, match=r"plugin 'p' is failed, where_sync is not called"):
        call_blocking("p", "where_sync", LIMIT, plugin.where_sync)
    assert len(heard) == 1


def test_a_coroutine_that_awaits_forever_is_cut_off_and_the_plugin_keeps_working():
    plugin = Plugin()

    async def main() -> str:
        await call_async("p", "where", LIMIT, plugin.where)  # the worker is up
        with pytest.raises(PluginTimeout, match=r"timed out after 0\.2 s in awaits"):
            await call_async("p", "awaits", LIMIT, plugin.awaits)
        return await call_async("p", "where", LIMIT, plugin.where)

    assert asyncio.run(main()) == "accelkit-plugin-w"
    # begun, it was cancelled on the worker before the next call went on; on a loaded machine
    # the worker may come to it only after the limit, and then it is never begun at all
    assert plugin.cancelled.is_set() == plugin.started.is_set()
    assert failure_of(plugin) is None


def test_a_synchronous_call_that_blocks_is_cut_off_and_fails_the_plugin():
    plugin = Plugin()
    with pytest.raises(PluginTimeout, match=r"timed out after 0\.2 s in blocks_sync"):
        asyncio.run(call_sync("p", "blocks_sync", LIMIT, plugin.blocks_sync))
    assert failure_of(plugin) == "plugin 'p' timed out after 0.2 s in blocks_sync"


def test_a_blocking_call_outside_an_event_loop_is_cut_off_too():
    plugin = Plugin()
    with pytest.raises(PluginTimeout, match=r"timed out after 0\.2 s in blocks_sync"):
        call_blocking("p", "blocks_sync", LIMIT, plugin.blocks_sync)
    assert failure_of(plugin) is not None


def test_a_caller_that_gives_up_on_a_blocked_call_leaves_the_plugin_failed_for_the_next():
    plugin = Plugin()

    async def main() -> None:
        with pytest.raises(TimeoutError):  # the caller's own limit, not the plugin call's
            await asyncio.wait_for(call_async("p", "blocks", Decimal(HANG), plugin.blocks), 0.2)
        with pytest.raises(PluginTimeout, match=r"did not end blocks when cancelled"):
            await call_async("p", "where", LIMIT, plugin.where)

    asyncio.run(main())
    assert failure_of(plugin) == "plugin 'p' did not end blocks when cancelled"


def test_every_kind_of_plugin_call_runs_on_the_plugins_worker():
    plugin = Plugin()
    asyncio.run(plugin.discover())
    context = plugin.create_agent_context(AgentId("a"), DevicePartition.of("w0"))
    hook = context.create_lifecycle_hook(Workload.process_tree("x"), {})
    assert plugin_of(plugin.where) is plugin
    assert plugin_of(functools.partial(plugin.where_sync, "!")) is plugin
    assert plugin_of(context.available_slots) is plugin
    assert plugin_of(hook.pre_create) is plugin
    assert plugin_of(lambda: None) is None

    async def main() -> list[str]:
        config = await call_async("p", "pre_create", LIMIT, hook.pre_create)
        return [
            await call_async("p", "where", LIMIT, plugin.where),
            await call_sync("p", "where", LIMIT, functools.partial(plugin.where_sync, "!")),
            config.env_vars["THREAD"],
            await call_sync("p", "name", LIMIT, lambda: threading.current_thread().name),
        ]

    on_worker, partial, in_hook, elsewhere = asyncio.run(main())
    assert on_worker == in_hook == "accelkit-plugin-w"
    assert partial == "accelkit-plugin-w!"
    assert elsewhere == "accelkit-p-name"  # a call of no plugin: a thread of its own
    assert call_blocking("p", "where_sync", LIMIT, plugin.where_sync) == "accelkit-plugin-w"


def test_a_retired_worker_ends_and_a_later_call_gets_a_fresh_one():
    plugin = Plugin()
    first = worker_of(plugin)
    retire(plugin)
    assert first.stopped
    assert call_blocking("p", "where_sync", LIMIT, plugin.where_sync) == "accelkit-plugin-w"
    assert worker_of(plugin) is not first
    first._thread.join(HANG)  # ends once its loop is stopped
    assert not first._thread.is_alive()


def test_a_plugin_dropped_without_retire_ends_its_worker():
    plugin = Plugin()
    thread = worker_of(plugin)._thread
    del plugin
    gc.collect()
    thread.join(HANG)
    assert not thread.is_alive()


def test_a_failed_worker_is_never_replaced():
    plugin = Plugin()
    with pytest.raises(PluginTimeout):
        call_blocking("p", "blocks_sync", LIMIT, plugin.blocks_sync)
    stuck = worker_of(plugin)
    retire(plugin)
    assert worker_of(plugin) is stuck
    assert stuck._thread.daemon  # abandoned, never joined: it cannot hold the process open


class Slow(Plugin):
    key = DeviceName("slow")

    async def cleanup(self) -> None:
        released.wait(HANG)


def test_the_loader_marks_a_plugin_that_overruns_a_later_call_failed():
    @hookimpl
    def accelkit_compute_plugins(config: Any) -> Any:
        return [Slow(config), Plugin(config)]

    loader = PluginLoader(PluginSelection(call_timeout=LIMIT))
    loader.register(types.SimpleNamespace(accelkit_compute_plugins=accelkit_compute_plugins), "d")
    loader.build()

    async def main() -> None:
        await loader.start()
        slow = loader.plugins[0]
        assert slow.key == "slow"
        with pytest.raises(PluginTimeout, match=r"timed out after 0\.2 s in blocks"):
            await call_async("slow", "blocks", LIMIT, slow.blocks)  # type: ignore[attr-defined]
        await loader.close()  # the stuck plugin's cleanup is not even asked for

    began = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - began < HANG / 10
    record = loader.records["d"]
    assert record.status is PluginStatus.FAILED
    assert record.error == "plugin 'slow' timed out after 0.2 s in blocks"
    assert loader.plugins == []


class Watching(Plugin):
    key = DeviceName("watch")

    def __init__(self, *, fails: bool = False) -> None:
        super().__init__()
        self.fails = fails
        self.closed = threading.Event()

    async def watch_health(self) -> Any:
        try:
            yield threading.current_thread().name
            if self.fails:
                raise RuntimeError("driver gone")
            await asyncio.sleep(HANG)
        finally:
            self.closed.set()


def test_watch_health_runs_on_the_worker_and_ends_there_when_the_caller_stops():
    plugin = Watching()

    async def main() -> list[str]:
        seen: list[str] = []

        async def watch() -> None:
            async for item in iterate("watch", "watch_health", plugin.watch_health):
                seen.append(item)

        task = asyncio.ensure_future(watch())
        while not seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    assert asyncio.run(main()) == ["accelkit-plugin-watch"]
    assert plugin.closed.wait(HANG)  # its finally ran, on its own loop
    assert call_blocking("watch", "where_sync", LIMIT, plugin.where_sync) == "accelkit-plugin-watch"


def test_an_error_of_watch_health_reaches_the_caller():
    plugin = Watching(fails=True)

    seen: list[str] = []

    async def main() -> None:
        async for item in iterate("watch", "watch_health", plugin.watch_health):
            seen.append(item)

    with pytest.raises(RuntimeError, match="driver gone"):
        asyncio.run(main())
    assert seen == ["accelkit-plugin-watch"]
