"""The kit's health checks: reports are DeviceHealth values, a watch ends cleanly when cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from accelkit.health import DeviceHealth, HealthEvent, HealthState
from accelkit.plugin import AbstractComputePlugin
from accelkit.testing import health_checks
from accelkit.types import DeviceId

from . import conformance_support as kit

WATCH = "test_watch_health_can_be_cancelled"
VALUES = "test_health_reports_are_device_health_values"


@pytest.fixture(autouse=True)
def short_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health_checks, "WATCH_FOR", 0.02)
    monkeypatch.setattr(health_checks, "END_WITHIN", 0.5)


def with_watch(watch: Any) -> AbstractComputePlugin:
    plugin: AbstractComputePlugin = type("WatchPlugin", (kit.Plugin,), {"watch_health": watch})()
    return plugin


async def polling(self: AbstractComputePlugin) -> AsyncIterator[HealthEvent]:
    while True:
        await asyncio.sleep(0.005)
        yield HealthEvent(DeviceId("npu0"), HealthState.HEALTHY, DeviceHealth.healthy())


def test_the_default_watch_and_a_polling_watch_pass() -> None:
    kit.run_check(WATCH, kit.Plugin())
    kit.run_check(WATCH, with_watch(polling))
    kit.run_check(VALUES, kit.Plugin())


def test_a_watch_that_swallows_cancellation_fails() -> None:
    async def stubborn(self: AbstractComputePlugin) -> AsyncIterator[HealthEvent]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:  # swallowed once: the loop's close cancels it again
            await asyncio.sleep(10)
        yield HealthEvent(DeviceId("npu0"), HealthState.HEALTHY, DeviceHealth.healthy())

    with pytest.raises(kit.Failed) as failure:
        kit.run_check(WATCH, with_watch(stubborn))
    assert "still running 0.5 s after it was cancelled" in str(failure.value)


def test_a_watch_that_raises_fails() -> None:
    async def broken(self: AbstractComputePlugin) -> AsyncIterator[HealthEvent]:
        await asyncio.sleep(0)
        msg = "nvml gone"
        raise RuntimeError(msg)
        yield  # pragma: no cover

    kit.expect_broken(
        WATCH, with_watch(broken), "watch_health() can be cancelled cleanly", "nvml gone"
    )


def test_a_watch_that_leaves_a_task_running_fails() -> None:
    async def leaky(self: AbstractComputePlugin) -> AsyncIterator[HealthEvent]:
        asyncio.get_running_loop().create_task(asyncio.sleep(30), name="poller")
        while True:
            await asyncio.sleep(10)
            yield HealthEvent(DeviceId("npu0"), HealthState.HEALTHY, DeviceHealth.healthy())

    kit.expect_broken(
        WATCH, with_watch(leaky), "watch_health() can be cancelled cleanly", "['poller']"
    )


def test_a_watch_yielding_something_else_fails() -> None:
    async def chatty(self: AbstractComputePlugin) -> AsyncIterator[object]:
        while True:
            await asyncio.sleep(0.005)
            yield "npu0 is fine"

    kit.expect_broken(
        WATCH, with_watch(chatty), "watch_health() can be cancelled cleanly", "not HealthEvent"
    )


def test_reports_that_are_not_device_health_fail() -> None:
    kit.expect_broken(
        VALUES,
        kit.with_health({"npu0": "ok"}),
        "health reports are DeviceHealth values",
        "['npu0']",
    )
