"""Checks of a plugin's health reporting: well-formed reports, and a watch that can be stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from accelkit.health import DeviceHealth, HealthEvent
from accelkit.plugin import AbstractComputePlugin
from accelkit.testing.expectations import fail_rule

#: how long the watch runs before it is cancelled
WATCH_FOR = 0.2
#: how long a cancelled watch may take to end
END_WITHIN = 5.0


class HealthChecks:
    """``device_health()`` values and the cancellation of ``watch_health()``."""

    def test_health_reports_are_device_health_values(
        self, started: AbstractComputePlugin, runner: asyncio.Runner
    ) -> None:
        rule = "health reports are DeviceHealth values"
        report = runner.run(started.device_health())
        if bad := sorted(d for d, h in dict(report).items() if not isinstance(h, DeviceHealth)):
            fail_rule(
                started,
                rule,
                f"device_health() reports {bad} with values that are not DeviceHealth",
                "report accelkit.health.DeviceHealth(state, reason) for every device",
            )

    def test_watch_health_can_be_cancelled(
        self, started: AbstractComputePlugin, runner: asyncio.Runner
    ) -> None:
        rule = "watch_health() can be cancelled cleanly"
        runner.run(_watch_then_cancel(started, rule))


async def _watch_then_cancel(plugin: AbstractComputePlugin, rule: str) -> None:
    """Run the watch a moment, cancel it: it must end with CancelledError, leaving no task."""
    before = asyncio.all_tasks()
    seen: list[object] = []

    async def consume() -> None:
        events: AsyncIterator[HealthEvent] = plugin.watch_health()
        async for event in events:
            seen.append(event)

    task = asyncio.create_task(consume())
    await asyncio.sleep(WATCH_FOR)
    task.cancel()
    done, _pending = await asyncio.wait({task}, timeout=END_WITHIN)
    if not done:
        fail_rule(
            plugin,
            rule,
            f"watch_health() was still running {END_WITHIN:g} s after it was cancelled",
            "never block the event loop in watch_health (wait with asyncio, run blocking "
            "calls in a thread) and do not swallow CancelledError",
        )
    if not task.cancelled() and (exc := task.exception()) is not None:
        fail_rule(
            plugin,
            rule,
            f"watch_health() raised {exc!r} while being cancelled (or before)",
            "let CancelledError propagate; clean up in a finally block",
        )
    if stray := [e for e in seen if not isinstance(e, HealthEvent)]:
        fail_rule(
            plugin,
            rule,
            f"watch_health() yielded {stray[:3]!r}, not HealthEvent values",
            "yield accelkit.health.HealthEvent(device_id, old_state, new_health)",
        )
    await asyncio.sleep(0)
    left = {t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()}
    if left := {t for t in left if not t.done()}:
        names = sorted(t.get_name() for t in left)
        fail_rule(
            plugin,
            rule,
            f"tasks {names} were left running after watch_health() was cancelled",
            "cancel and await the tasks the watch starts, in a finally block",
        )
