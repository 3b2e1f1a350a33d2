"""A hook that keeps the base class's empty teardown and post_create methods is not called for
them: no hand-off to its plugin's worker, no intent to record; the phases still complete."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from accelkit.events import WorkloadPhase
from accelkit.plugin import AbstractLifecycleHook
from accelkit.types import AgentId, DeviceName, Workload, WorkloadConfig
from accelkit.workload import HookTarget, WorkloadLifecycle
from accelkit.workload import lifecycle as lifecycle_module
from accelkit.workload.lifecycle import implements


class OnlyPreCreate(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig()


class AlsoPostTerminate(OnlyPreCreate):
    ran: list[str]

    async def post_terminate(self) -> None:
        self.ran.append("post_terminate")


class Context:
    def __init__(self, hook_class: type[OnlyPreCreate]) -> None:
        self.hook_class = hook_class
        self.ran: list[str] = []

    def create_lifecycle_hook(self, workload, device_alloc):
        hook = self.hook_class(workload, device_alloc)
        hook.ran = self.ran
        return hook


def drive(hook_class, monkeypatch):
    """Run a whole life; (hook calls handed on, intents, phases done, what the hook ran)."""
    handed: list[str] = []
    original = lifecycle_module.call_async

    async def counted(plugin, method, timeout, call):
        handed.append(method)
        return await original(plugin, method, timeout, call)

    monkeypatch.setattr(lifecycle_module, "call_async", counted)
    intents: list[str] = []
    done: list[str] = []
    context = Context(hook_class)
    driver = WorkloadLifecycle(
        AgentId("agent-1"),
        Workload.process_tree("w1"),
        [HookTarget(DeviceName("cpu"), context, {"cpu": {"0": Decimal(1)}})],  # type: ignore[arg-type]
        release=lambda: None,
        on_start=lambda _key, phase: intents.append(phase.value),
        on_phase=lambda _key, phase: done.append(phase.value),
    )

    async def life() -> None:
        await driver.prepare()
        await driver.post_create()
        await driver.terminate()

    asyncio.run(life())
    return handed, intents, done, context.ran


def test_the_base_class_empty_hooks_are_neither_called_nor_intended(monkeypatch):
    handed, intents, done, _ran = drive(OnlyPreCreate, monkeypatch)
    assert handed == ["pre_create"]
    assert intents == ["pre_create"]
    assert done == ["pre_create", "post_create", "pre_terminate", "post_terminate"]


def test_a_hook_of_its_own_is_called_and_its_intent_recorded(monkeypatch):
    handed, intents, done, ran = drive(AlsoPostTerminate, monkeypatch)
    assert handed == ["pre_create", "post_terminate"]
    assert intents == ["pre_create", "post_terminate"]
    assert done == ["pre_create", "post_create", "pre_terminate", "post_terminate"]
    assert ran == ["post_terminate"]


@pytest.mark.parametrize("phase", ["post_create", "pre_terminate", "post_terminate"])
def test_implements_tells_the_class_and_the_instance_overrides(phase):
    hook = OnlyPreCreate(Workload.process_tree("w1"), {})
    assert not implements(hook, WorkloadPhase(phase))

    async def own() -> None:
        return None

    setattr(hook, phase, own)  # an instance's own method counts as an implementation
    assert implements(hook, WorkloadPhase(phase))
    assert implements(hook, WorkloadPhase.PRE_CREATE)
