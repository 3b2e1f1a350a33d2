"""A plugin's hook is made and its pre_create run in one hand-off to the plugin's worker, after
the intent is recorded; a hook that cannot be made, or is made too late, leaves nothing to tear
down, and a blocking hook creation is cut off at the hook time limit, named as such.

Blocked calls wait on an event set by the test, never on the clock.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

import pytest

from accelkit.calls import PluginWorker, worker_of
from accelkit.errors import PluginTimeout, WorkloadError
from accelkit.partition import DevicePartition
from accelkit.plugin import AbstractAgentContext, AbstractLifecycleHook
from accelkit.types import AgentId, DeviceId, DeviceName, SlotName, Workload, WorkloadConfig
from accelkit.workload.lifecycle import HookTarget, WorkloadLifecycle

from .one_device_plugin import OneDevicePlugin

KEY = DeviceName("w")
LIMIT = Decimal("0.2")
journal: list[tuple[str, str]] = []


class Hook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        journal.append(("pre_create", threading.current_thread().name))
        return WorkloadConfig(env_vars={"W": "1"})

    async def post_terminate(self) -> None:
        journal.append(("post_terminate", threading.current_thread().name))


class Plugin(OneDevicePlugin):
    key: ClassVar[DeviceName] = KEY
    api_version: ClassVar[str] = "2.0"
    lifecycle_hook_class = Hook

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.fault: Exception | None = None
        self.block: threading.Event | None = None


def made_by(plugin: Plugin, context: AbstractAgentContext) -> None:
    """The context's hooks go through the plugin's faults, blocks and the journal."""
    original = type(context).create_lifecycle_hook

    class Context(type(context)):  # type: ignore[misc]
        def create_lifecycle_hook(self, workload: Workload, alloc: Any) -> AbstractLifecycleHook:
            if plugin.block is not None:
                plugin.block.wait()
            journal.append(("made", threading.current_thread().name))
            if plugin.fault is not None:
                raise plugin.fault
            return original(self, workload, alloc)

    context.__class__ = Context


def lifecycle(plugin: Plugin, phases: list[tuple[str, str]]) -> tuple[WorkloadLifecycle, list[int]]:
    asyncio.run(plugin.discover())
    context = plugin.create_agent_context(AgentId("a"), DevicePartition.of("w0"))
    made_by(plugin, context)
    released: list[int] = []
    driver = WorkloadLifecycle(
        AgentId("a"),
        Workload.process_tree("x"),
        [HookTarget(KEY, context, {SlotName("w.device"): {DeviceId("w0"): Decimal(1)}})],
        release=lambda: released.append(1),
        on_start=lambda key, phase: phases.append(("start", phase.value)),
        on_phase=lambda key, phase: phases.append(("done", phase.value)),
        hook_timeout=LIMIT,
    )
    return driver, released


@pytest.fixture(autouse=True)
def _clean() -> None:
    journal.clear()


def count_hand_offs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for name in ("run_async", "run_sync"):
        original = getattr(PluginWorker, name)

        def counted(self: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
            calls.append(args[1])
            return _original(self, *args, **kw)

        monkeypatch.setattr(PluginWorker, name, counted)
    return calls


def test_the_hook_is_made_and_started_in_one_hand_off_after_the_intent(monkeypatch):
    plugin = Plugin()
    phases: list[tuple[str, str]] = []
    driver, released = lifecycle(plugin, phases)
    hand_offs = count_hand_offs(monkeypatch)
    config = asyncio.run(driver.prepare())
    assert config.env_vars == {"W": "1"}
    assert hand_offs == ["pre_create"]
    assert journal == [("made", "accelkit-plugin-w"), ("pre_create", "accelkit-plugin-w")]
    assert phases == [("start", "pre_create"), ("done", "pre_create")]
    asyncio.run(driver.terminate())
    assert journal[-1] == ("post_terminate", "accelkit-plugin-w")
    assert released == [1]


def test_a_hook_that_cannot_be_made_is_named_has_no_teardown_and_frees():
    plugin = Plugin()
    plugin.fault = AttributeError("no attribute 'uuid'")
    phases: list[tuple[str, str]] = []
    driver, released = lifecycle(plugin, phases)
    with pytest.raises(WorkloadError) as info:
        asyncio.run(driver.prepare())
    assert (
        str(info.value) == "plugin 'w' create_lifecycle_hook: AttributeError: no attribute 'uuid'"
    )
    assert info.value.__cause__ is plugin.fault
    assert [j[0] for j in journal] == ["made"]  # neither pre_create nor post_terminate
    # the intent came first; no hook to tear down is recorded as its teardown done
    assert phases == [("start", "pre_create"), ("done", "post_terminate")]
    assert released == [1]


def test_a_failing_pre_create_still_gets_post_terminate():
    plugin = Plugin()
    phases: list[tuple[str, str]] = []
    driver, released = lifecycle(plugin, phases)

    async def refuse(self: Hook) -> WorkloadConfig:
        journal.append(("pre_create", "refused"))
        raise ValueError("no MIG slice")

    Hook.pre_create, original = refuse, Hook.pre_create  # type: ignore[method-assign]
    try:
        with pytest.raises(WorkloadError, match="plugin 'w' pre_create: ValueError: no MIG slice"):
            asyncio.run(driver.prepare())
    finally:
        Hook.pre_create = original  # type: ignore[method-assign]
    assert [j[0] for j in journal] == ["made", "pre_create", "post_terminate"]
    assert released == [1]


def test_a_blocking_hook_creation_is_cut_off_and_a_hook_made_late_never_starts():
    plugin = Plugin()
    plugin.block = threading.Event()
    phases: list[tuple[str, str]] = []
    driver, released = lifecycle(plugin, phases)
    with pytest.raises(PluginTimeout) as info:
        asyncio.run(driver.prepare())
    assert str(info.value) == "plugin 'w' timed out after 0.2 s in create_lifecycle_hook"
    assert released == [1]
    assert phases == [("start", "pre_create"), ("done", "post_terminate")]
    # unblocked now, the hook is made on the worker, after its caller gave up: never started
    worker = worker_of(plugin)
    ended = threading.Event()
    plugin.block.set()
    worker._loop.call_soon_threadsafe(ended.set)  # after the call that blocked
    assert ended.wait(60)
    assert journal == [("made", "accelkit-plugin-w")]
