"""The health board: effective health (reports merged with cordons) and the change fan-out."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.errors import InvalidResourceArgument
from accelkit.health import DeviceHealth, HealthState
from accelkit.node.health_board import Cordon, DeviceChange, HealthBoard
from accelkit.types import DeviceId, DeviceName

GPU = DeviceName("cuda")
BAD = DeviceHealth(HealthState.UNHEALTHY, "XID 79")


def board_with(*ids: str) -> HealthBoard:
    board = HealthBoard()
    for device in ids:
        board.report(GPU, device, DeviceHealth.healthy())
    return board


def cordon(reason: str = "maintenance") -> Cordon:
    return Cordon(reason, Decimal(1_700_000_000))


def test_reports_are_the_effective_health_until_a_cordon() -> None:
    board = board_with("cuda0", "cuda1")
    board.report(GPU, "cuda1", BAD)
    assert board.of(GPU, "cuda0").state is HealthState.HEALTHY
    assert board.of(GPU, "cuda1") == BAD
    assert board.unallocatable(GPU) == {DeviceId("cuda1")}
    board.set_cordons({(GPU, DeviceId("cuda0")): cordon()})
    health = board.of(GPU, "cuda0")
    assert health.state is HealthState.UNHEALTHY
    assert health.reason == "cordoned: maintenance"
    assert board.unallocatable(GPU) == {DeviceId("cuda0"), DeviceId("cuda1")}
    board.set_cordons({})
    assert board.of(GPU, "cuda0").state is HealthState.HEALTHY


def test_a_cordon_hides_the_reported_health_which_returns_after() -> None:
    board = board_with("cuda0")
    board.set_cordons({(GPU, DeviceId("cuda0")): cordon()})
    assert board.report(GPU, "cuda0", BAD) is None  # effective health did not change
    board.set_cordons({})
    assert board.of(GPU, "cuda0") == BAD


def test_degraded_stays_allocatable() -> None:
    board = board_with("cuda0")
    board.report(GPU, "cuda0", DeviceHealth(HealthState.DEGRADED, "ECC"))
    assert board.unallocatable(GPU) == frozenset()


def test_unknown_plugin_and_device_are_named() -> None:
    board = board_with("cuda0")
    with pytest.raises(InvalidResourceArgument, match=r"no plugin 'rocm' .*plugins: cuda"):
        board.of("rocm", "x")
    with pytest.raises(InvalidResourceArgument, match=r"no device 'cuda9' .*devices: cuda0"):
        board.of(GPU, "cuda9")


def test_snapshot_shows_every_device_effectively() -> None:
    board = board_with("cuda0", "cuda1")
    board.set_cordons({(GPU, DeviceId("cuda1")): cordon("swap")})
    snap = board.snapshot()
    assert snap[GPU][DeviceId("cuda0")].state is HealthState.HEALTHY
    assert snap[GPU][DeviceId("cuda1")].reason == "cordoned: swap"


def test_subscribers_get_every_change_after_they_subscribed() -> None:
    async def scenario() -> tuple[list[DeviceChange], list[DeviceChange]]:
        board = board_with("cuda0")
        board.report(GPU, "cuda0", BAD)  # before anyone listens
        first = board.changes()
        board.report(GPU, "cuda0", DeviceHealth.healthy())
        second = board.changes()
        board.set_cordons({(GPU, DeviceId("cuda0")): cordon()})
        board.forget(GPU, "cuda0")
        got_first = [await anext(first) for _ in range(3)]
        got_second = [await anext(second) for _ in range(2)]
        assert first.pending() == second.pending() == 0
        return got_first, got_second

    first, second = asyncio.run(scenario())
    assert [c.kind for c in first] == ["health", "cordon", "removed"]
    assert [c.kind for c in second] == ["cordon", "removed"]
    assert first[0].new is not None
    assert first[0].new.state is HealthState.HEALTHY
    assert second[1].new is None


def test_a_slow_subscriber_loses_its_oldest_changes_and_counts_them() -> None:
    async def scenario() -> None:
        board = HealthBoard(queue_size=2)
        sub = board.changes()
        for i in range(5):
            board.report(GPU, f"cuda{i}", DeviceHealth.healthy())
        assert sub.dropped == 3
        kept = [sub.get_nowait(), sub.get_nowait()]
        assert [c.device_id for c in kept if c is not None] == ["cuda3", "cuda4"]
        assert sub.get_nowait() is None

    asyncio.run(scenario())


def test_a_closed_subscription_gets_nothing_more() -> None:
    async def scenario() -> None:
        board = board_with("cuda0")
        async with board.changes() as sub:
            assert board.subscribers == 1
        assert board.subscribers == 0
        board.report(GPU, "cuda0", BAD)
        assert sub.pending() == 0
        sub.close()  # closing twice is fine

    asyncio.run(scenario())


def test_publish_applies_changes_from_elsewhere() -> None:
    async def scenario() -> None:
        board = board_with("cuda0")
        sub = board.changes()
        added = DeviceChange(GPU, DeviceId("cuda7"), None, DeviceHealth.healthy(), "added")
        board.publish(added)
        assert board.of(GPU, "cuda7").state is HealthState.HEALTHY
        board.publish(DeviceChange(GPU, DeviceId("cuda7"), added.new, None, "removed"))
        with pytest.raises(InvalidResourceArgument):
            board.of(GPU, "cuda7")
        assert [(await anext(sub)).kind for _ in range(2)] == ["added", "removed"]

    asyncio.run(scenario())


def test_a_change_kind_is_checked() -> None:
    with pytest.raises(ValueError, match="unknown change kind 'broken'"):
        DeviceChange(GPU, DeviceId("cuda0"), None, None, "broken")


def test_transitions_count_state_changes_only() -> None:
    board = board_with("cuda0")
    board.report(GPU, "cuda0", BAD)
    board.report(GPU, "cuda0", DeviceHealth(HealthState.UNHEALTHY, "XID 48"))  # same state
    board.report(GPU, "cuda0", DeviceHealth.healthy())
    assert board.transitions() == {(GPU, DeviceId("cuda0")): 2}


def test_the_queue_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="queue size"):
        HealthBoard(queue_size=0)


states = st.sampled_from(list(HealthState))


@given(st.lists(st.tuples(st.integers(0, 2), states, st.booleans()), max_size=30))
def test_effective_health_is_unhealthy_exactly_when_reported_so_or_cordoned(
    steps: list[tuple[int, HealthState, bool]],
) -> None:
    board = board_with("cuda0", "cuda1", "cuda2")
    reported = {f"cuda{i}": HealthState.HEALTHY for i in range(3)}
    cordoned: set[str] = set()
    for index, state, toggle in steps:
        device = f"cuda{index}"
        board.report(GPU, device, DeviceHealth(state, state.value))
        reported[device] = state
        if toggle:
            cordoned ^= {device}
            board.set_cordons({(GPU, DeviceId(d)): cordon() for d in cordoned})
    expected = {
        DeviceId(d) for d, s in reported.items() if s is HealthState.UNHEALTHY or d in cordoned
    }
    assert board.unallocatable(GPU) == expected
