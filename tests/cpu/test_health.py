"""Health of the cpu plugin: cores the kernel has offline, from a fake and the real sysfs."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.errors import ConfigError
from accelkit.health import HealthEvent, HealthState
from accelkit.testing.fakehost import FakeHost
from accelkit_cpu.config import CPUConfig
from accelkit_cpu.cpulist import format_cpu_list, parse_cpu_list
from accelkit_cpu.online import offline_cores
from accelkit_cpu.plugin import CPUPlugin

CORES = (0, 1, 2, 3)


def host(
    tmp_path: Path, online: str | None = "0-3", per_core: dict[int, str] | None = None
) -> Path:
    """Four cores; ``online`` is the kernel's list (``None``: no file), ``per_core`` cpuN/online."""
    fake = FakeHost(tmp_path)
    if online is not None:
        fake.write("sys/devices/system/cpu/online", f"{online}\n")
    for core, value in (per_core or {}).items():
        fake.write(f"sys/devices/system/cpu/cpu{core}/online", f"{value}\n")
    return tmp_path


def plugin_on(root: Path, **config: str) -> CPUPlugin:
    plugin = CPUPlugin(config, root=root, affinity=lambda: CORES)
    asyncio.run(plugin.init())
    asyncio.run(plugin.discover())
    return plugin


def states(plugin: CPUPlugin) -> dict[str, tuple[str, str]]:
    found = asyncio.run(plugin.device_health())
    return {d: (h.state.value, h.reason) for d, h in found.items()}


def test_every_online_core_is_healthy(tmp_path: Path) -> None:
    plugin = plugin_on(host(tmp_path, "0-3", {1: "1", 2: "1"}))
    assert set(states(plugin).values()) == {("healthy", "")}


def test_a_core_whose_online_file_reads_0_is_unhealthy(tmp_path: Path) -> None:
    plugin = plugin_on(host(tmp_path, "0-3", {2: "0"}))
    assert states(plugin)["2"] == ("unhealthy", "offline")
    assert states(plugin)["1"] == ("healthy", "")


def test_a_core_missing_from_the_online_list_is_unhealthy(tmp_path: Path) -> None:
    plugin = plugin_on(host(tmp_path, "0-1,3"))
    assert states(plugin) == {
        "0": ("healthy", ""),
        "1": ("healthy", ""),
        "2": ("unhealthy", "offline"),
        "3": ("healthy", ""),
    }


def test_no_sysfs_says_nothing(tmp_path: Path) -> None:
    assert set(states(plugin_on(host(tmp_path, None))).values()) == {("healthy", "")}


@pytest.mark.parametrize(
    ("online", "per_core", "words"),
    [("0-x", {}, "sys/devices/system/cpu/online: malformed"), ("0-3", {1: "yes"}, "cpu1/online")],
)
def test_a_malformed_file_makes_every_core_unknown_naming_it(
    tmp_path: Path, online: str, per_core: dict[int, str], words: str
) -> None:
    found = states(plugin_on(host(tmp_path, online, per_core)))
    assert {state for state, _ in found.values()} == {"unknown"}
    assert all(words in reason for _, reason in found.values())


@given(st.sets(st.sampled_from(CORES)), st.sets(st.sampled_from(CORES)))
def test_offline_is_the_union_of_both_sources(listed_off: set[int], file_off: set[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = host(
            Path(tmp),
            format_cpu_list(set(CORES) - listed_off),
            {c: "0" if c in file_off else "1" for c in CORES},
        )
        assert set(offline_cores(root, CORES)) == listed_off | file_off


def watch(plugin: CPUPlugin, change: Callable[[], None], count: int) -> list[HealthEvent]:
    async def run() -> list[HealthEvent]:
        stream = plugin.watch_health()
        try:
            await asyncio.sleep(0.05)
            change()
            return [await asyncio.wait_for(anext(stream), 5) for _ in range(count)]
        finally:
            await stream.aclose()

    return asyncio.run(run())


def test_the_watch_reports_a_core_going_offline_and_coming_back(tmp_path: Path) -> None:
    root = host(tmp_path, "0-3", {3: "1"})
    plugin = plugin_on(root, **{"health-interval": "0.02"})
    asyncio.run(plugin.device_health())
    online = root / "sys/devices/system/cpu/cpu3/online"
    (gone,) = watch(plugin, lambda: online.write_text("0\n"), 1)
    assert (gone.device_id, gone.old, gone.new.state, gone.reason) == (
        "3",
        HealthState.HEALTHY,
        HealthState.UNHEALTHY,
        "offline",
    )
    (back,) = watch(plugin, lambda: online.write_text("1\n"), 1)
    assert (back.device_id, back.old, back.new.state) == (
        "3",
        HealthState.UNHEALTHY,
        HealthState.HEALTHY,
    )


def test_a_change_before_the_watch_starts_is_not_missed(tmp_path: Path) -> None:
    root = host(tmp_path, "0-3")
    plugin = plugin_on(root, **{"health-interval": "30"})
    asyncio.run(plugin.device_health())
    (root / "sys/devices/system/cpu/online").write_text("0-2\n")
    (event,) = watch(plugin, lambda: None, 1)
    assert (event.device_id, event.new.state) == ("3", HealthState.UNHEALTHY)


def test_the_watch_ends_when_cancelled(tmp_path: Path) -> None:
    plugin = plugin_on(host(tmp_path), **{"health-interval": "30"})

    async def cancel() -> None:
        task = asyncio.ensure_future(anext(plugin.watch_health()))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(cancel())


def test_the_real_sysfs_agrees_with_the_kernel() -> None:
    """Read-only: this machine's usable cores are online, and reported healthy."""
    online = Path("/sys/devices/system/cpu/online")
    if not online.exists():
        pytest.skip("no /sys/devices/system/cpu/online here")
    plugin = CPUPlugin({})
    asyncio.run(plugin.init())
    asyncio.run(plugin.discover())
    found = asyncio.run(plugin.device_health())
    assert set(found) == {d.device_id for d in plugin.devices}
    listed = set(parse_cpu_list(online.read_text()))
    for core, health in found.items():
        assert int(core) in listed  # a core this process may use is online
        assert health.state is HealthState.HEALTHY


@pytest.mark.parametrize(("value", "seconds"), [("0.5", Decimal("0.5")), (3, Decimal(3))])
def test_health_interval(value: object, seconds: Decimal) -> None:
    assert CPUConfig.from_mapping({"health-interval": value}).health_interval == seconds
    assert CPUConfig.from_mapping({}).health_interval == Decimal(2)


@pytest.mark.parametrize("value", ["0", "-1", "soon", True, 100000])
def test_a_bad_health_interval_names_the_key(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        CPUConfig.from_mapping({"health-interval": value})
    assert info.value.key == "health-interval"
