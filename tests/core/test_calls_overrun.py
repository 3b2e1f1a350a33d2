"""A blocking call that overruns its limit and ends after its event loop has closed."""

from __future__ import annotations

import asyncio
import threading
import time
from decimal import Decimal

import pytest

from accelkit.calls import call_sync
from accelkit.errors import PluginTimeout


@pytest.mark.parametrize("fails", [False, True])
def test_a_late_call_ending_after_the_loop_closed_is_dropped_quietly(monkeypatch, fails):
    crashes: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", crashes.append)
    finished = threading.Event()

    def slow() -> str:
        time.sleep(0.3)
        finished.set()
        if fails:
            raise RuntimeError("late and broken")
        return "late"

    async def run() -> None:
        with pytest.raises(PluginTimeout, match=r"'p' timed out after 0\.05 s in slow"):
            await call_sync("p", "slow", Decimal("0.05"), slow)

    asyncio.run(run())  # the loop is closed when this returns; the thread still sleeps
    assert finished.wait(10)
    time.sleep(0.1)  # the thread hands its outcome over right after setting the event
    assert crashes == []
