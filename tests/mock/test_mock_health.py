"""Mock device health: declared per device, re-read from the device file, watched by polling."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from accelkit.errors import ConfigError
from accelkit.health import HealthEvent, HealthState
from accelkit.types import DeviceId
from accelkit_mock import accelkit_compute_plugins
from accelkit_mock.plugin import MockPlugin
from accelkit_mock.spec import load_kinds

GPUS = """\
[[kinds]]
key = "cuda"
[[kinds.devices]]
id = "cuda0"
[[kinds.devices]]
id = "cuda1"
health = "{state}"
health-reason = "{reason}"
"""


def write(path: Path, state: str = "healthy", reason: str = "") -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(GPUS.format(state=state, reason=reason))
    os.replace(tmp, path)


def gpu_plugin(path: Path, interval: str = "0.01") -> MockPlugin:
    [plugin] = accelkit_compute_plugins(
        config={"config-file": str(path), "health-interval": interval}
    )
    asyncio.run(plugin.discover())
    assert isinstance(plugin, MockPlugin)
    return plugin


def test_declared_health_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "devices.toml"
    write(path, "unhealthy", "XID 79")
    health = asyncio.run(gpu_plugin(path).device_health())
    assert health[DeviceId("cuda0")].state is HealthState.HEALTHY
    assert health[DeviceId("cuda1")].state is HealthState.UNHEALTHY
    assert health[DeviceId("cuda1")].reason == "XID 79"


def test_inline_kinds_report_their_fixed_health() -> None:
    kinds = [{"key": "cuda", "devices": [{"id": "cuda0", "health": "degraded"}]}]
    [plugin] = accelkit_compute_plugins(config={"kinds": kinds})
    asyncio.run(plugin.discover())
    health = asyncio.run(plugin.device_health())
    assert health[DeviceId("cuda0")].state is HealthState.DEGRADED


def test_an_unknown_health_or_interval_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "devices.toml"
    write(path, "sick")
    with pytest.raises(ConfigError, match=r"unknown health 'sick'"):
        load_kinds({"config-file": str(path)})
    with pytest.raises(ConfigError, match="health-interval"):
        load_kinds({"config-file": str(path), "health-intervall": "1"})


def test_the_file_is_re_read_when_it_changes_and_a_bad_one_keeps_the_last(
    tmp_path: Path,
) -> None:
    path = tmp_path / "devices.toml"
    write(path)
    plugin = gpu_plugin(path)
    assert asyncio.run(plugin.device_health())[DeviceId("cuda1")].allocatable
    write(path, "unhealthy", "gone")
    assert not asyncio.run(plugin.device_health())[DeviceId("cuda1")].allocatable
    path.write_text("[[kinds]\n")  # half written: not TOML
    assert asyncio.run(plugin.device_health())[DeviceId("cuda1")].reason == "gone"


def test_watch_health_yields_each_change_once(tmp_path: Path) -> None:
    path = tmp_path / "devices.toml"
    write(path)
    plugin = gpu_plugin(path)

    async def main() -> list[HealthEvent]:
        await plugin.device_health()
        events = plugin.watch_health()
        write(path, "unhealthy", "XID 48")
        first = await asyncio.wait_for(anext(events), 5)
        write(path, "healthy")
        second = await asyncio.wait_for(anext(events), 5)
        await events.aclose()  # type: ignore[attr-defined]
        return [first, second]

    first, second = asyncio.run(main())
    assert (first.device_id, first.old, first.new.state) == (
        "cuda1",
        HealthState.HEALTHY,
        HealthState.UNHEALTHY,
    )
    assert first.reason == "XID 48"
    assert (second.old, second.new.state) == (HealthState.UNHEALTHY, HealthState.HEALTHY)


def test_watch_health_can_be_cancelled(tmp_path: Path) -> None:
    path = tmp_path / "devices.toml"
    write(path)
    plugin = gpu_plugin(path, interval="10")

    async def main() -> None:
        async def consume() -> None:
            async for _event in plugin.watch_health():
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} == set()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("value", "message"),
    [('"0"', "above 0"), ('"0.5s"', "number of seconds")],
)
def test_a_bad_health_interval_is_refused_by_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    from accelkit.cli.app import main

    write(tmp_path / "devices.toml")
    host = tmp_path / "host.toml"
    host.write_text(
        f'[resource]\nstate-dir = "{tmp_path}/state"\n[plugins]\nallowed = ["mock"]\n'
        f'[plugins.config.mock]\nconfig-file = "devices.toml"\nhealth-interval = {value}\n'
    )
    assert main(["check", "--config", str(host)]) == 2
    err = capsys.readouterr().err
    assert "plugins.config.mock.health-interval" in err
    assert message in err
