"""Blocking calls of no plugin (an entry point's import, a distribution's hook) share a spare
thread one after another, and a call that hangs is still cut off at its limit: it keeps its
thread, and the next call gets another."""

from __future__ import annotations

import asyncio
import threading
from decimal import Decimal

import pytest

from accelkit.calls import call_blocking, call_sync
from accelkit.errors import PluginTimeout

LIMIT = Decimal(30)


def _here() -> tuple[int | None, str]:
    thread = threading.current_thread()
    return thread.ident, thread.name


def test_calls_one_after_another_share_one_thread_named_after_each_call():
    first, first_name = call_blocking("mock", "import", LIMIT, _here)
    second, second_name = call_blocking("mock", "accelkit_compute_plugins", LIMIT, _here)
    third, third_name = asyncio.run(call_sync("mock", "runtimes", LIMIT, _here))
    assert first == second == third != threading.get_ident()
    assert (first_name, second_name, third_name) == (
        "accelkit-mock-import",
        "accelkit-mock-accelkit_compute_plugins",
        "accelkit-mock-runtimes",
    )


def test_a_failing_call_raises_to_its_caller_and_leaves_the_thread_to_the_next():
    def broken() -> None:
        raise RuntimeError("broken import")

    with pytest.raises(RuntimeError, match="broken import"):
        call_blocking("mock", "import", LIMIT, broken)
    before, _ = call_blocking("mock", "import", LIMIT, _here)
    with pytest.raises(RuntimeError, match="broken import"):
        asyncio.run(call_sync("mock", "import", LIMIT, broken))
    assert call_blocking("mock", "import", LIMIT, _here)[0] == before


@pytest.mark.parametrize("kind", ["blocking", "sync"])
def test_a_hung_call_is_cut_off_keeps_its_thread_and_the_next_call_gets_another(kind):
    released = threading.Event()
    hung: list[int | None] = []

    def hangs() -> None:
        hung.append(threading.get_ident())
        released.wait()

    def cut_off() -> None:
        if kind == "blocking":
            call_blocking("slow", "import", Decimal("0.2"), hangs)
        else:
            asyncio.run(call_sync("slow", "import", Decimal("0.2"), hangs))

    try:
        with pytest.raises(PluginTimeout, match=r"^plugin 'slow' timed out after 0\.2 s in import"):
            cut_off()
        assert not released.is_set()  # still hanging on its thread
        other, _ = call_blocking("fine", "import", LIMIT, _here)
        assert other not in hung
        with pytest.raises(PluginTimeout):  # a second hang is cut off as well
            cut_off()
        assert len(set(hung)) == 2
    finally:
        released.set()
