"""Plugin sections read by the plugins' declared schemas, checked by the loader before start;
entry points that register nothing; plugin names that match nothing."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Sequence
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Annotated, Any, ClassVar

import attrs
import pytest

from accelkit import discovery as discovery_module
from accelkit import hookimpl
from accelkit.config.plugin_sections import place_in_host_config, read_section, unmatched_names
from accelkit.config.rules import int_between
from accelkit.discovery import PluginLoader
from accelkit.errors import ConfigError, ConfigErrors, PluginLoadError
from accelkit.plugin import AbstractComputePlugin
from accelkit.registry import PluginStatus
from accelkit.selection import PluginSelection
from accelkit.types import DeviceName

from .one_device_plugin import OneDevicePlugin


@attrs.frozen
class DialConfig:
    level: Annotated[int, int_between(1, 3)] = 1
    label: str = ""


class DialPlugin(OneDevicePlugin):
    """Reads its section lazily: only the loader's check stands between a typo and a start."""

    key: ClassVar[DeviceName] = DeviceName("dial")
    api_version: ClassVar[str] = "2.0"
    config_schema: ClassVar[type[DialConfig]] = DialConfig
    started: ClassVar[list[str]] = []

    async def init(self) -> None:
        self.started.append("init")

    async def get_node_info(self) -> Any:
        raise NotImplementedError

    async def gather_node_metrics(self, ctx: Any) -> Sequence[Any]:
        return []


class DialModule:
    @staticmethod
    @hookimpl
    def accelkit_compute_plugins(config: Any) -> Sequence[AbstractComputePlugin]:
        return [DialPlugin(config)]


class EagerModule:
    """Reads its section in the hook, as the shipped plugins do in their constructors."""

    @staticmethod
    @hookimpl
    def accelkit_compute_plugins(config: Any) -> Sequence[AbstractComputePlugin]:
        read_section(DialConfig, config)
        return [DialPlugin(config)]


def loader_for(module: object, section: dict[str, Any], source: Path | None = None) -> PluginLoader:
    selection = PluginSelection(configs={"dial": section}, source=str(source) if source else None)
    loader = PluginLoader(selection)
    loader.register(module, "dial")
    return loader


@pytest.mark.parametrize("module", [DialModule, EagerModule])
def test_a_bad_section_is_a_config_error_and_nothing_starts(module, tmp_path):
    host = tmp_path / "host.toml"
    host.write_text('[plugins.config.dial]\nlevel = 7\nlabl = "x"\n', encoding="utf-8")
    DialPlugin.started.clear()
    loader = loader_for(module, {"level": 7, "labl": "x"}, host)
    with pytest.raises(ConfigErrors) as info:
        loader.build()
    found = {(e.file, e.key, e.line, e.message) for e in info.value.errors}
    assert found == {
        (str(host), "plugins.config.dial.level", 2, "must be from 1 to 3, got 7"),
        (str(host), "plugins.config.dial.labl", 3, "unknown key (allowed: level, label)"),
    }
    assert loader.records["dial"].plugins == []
    assert asyncio.run(loader.start()) == []
    assert DialPlugin.started == []


def test_a_good_section_builds_and_starts(tmp_path):
    DialPlugin.started.clear()
    loader = loader_for(DialModule, {"level": 2})
    loader.build()
    assert [p.key for p in asyncio.run(loader.start())] == ["dial"]
    assert DialPlugin.started == ["init"]
    assert loader.config_problems == []


def test_without_a_file_the_errors_name_a_placeholder():
    loader = loader_for(DialModule, {"level": 0})
    with pytest.raises(ConfigError, match=r"^<config>: key 'plugins.config.dial.level': "):
        loader.build()


def test_errors_of_another_file_keep_their_file_and_key():
    selection = PluginSelection(source="/etc/host.toml")
    own = ConfigError("bad", file="/etc/devices.toml", key="kinds[0].key", line=3)
    (placed,) = place_in_host_config("mock", [own], selection)
    assert placed is own


def write_module(tmp_path: Path, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body), encoding="utf-8")


def test_an_entry_point_that_registers_nothing_is_failed_also_in_strict_mode(tmp_path, monkeypatch):
    write_module(
        tmp_path, "forgot_hookimpl", "def accelkit_compute_plugins(config):\n    return []\n"
    )
    write_module(
        tmp_path,
        "empty_but_sound",
        "from accelkit import hookimpl\n\n@hookimpl\ndef accelkit_compute_plugins(config):\n"
        "    return []\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = [
        EntryPoint("forgot", "forgot_hookimpl", "accelkit"),
        EntryPoint("sound", "empty_but_sound", "accelkit"),
    ]
    monkeypatch.setattr(discovery_module, "entry_points", lambda group: found)
    loader = PluginLoader(PluginSelection(strict=True))
    loader.load_entry_points()
    loader.build()
    forgot = loader.records["forgot"]
    assert forgot.status is PluginStatus.FAILED
    assert "forgot_hookimpl registers no compute plugin" in (forgot.error or "")
    assert loader.records["sound"].status is PluginStatus.LOADED
    with pytest.raises(PluginLoadError, match="registers no compute plugin"):
        asyncio.run(loader.start())


def test_names_that_match_no_plugin_are_warned_about(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(discovery_module, "entry_points", lambda group: [])
    selection = PluginSelection(allowed=["cpu"], blocked=["gpu"]).with_environment(
        {"ACCELKIT_DISABLE_PLUGINS": "tpu"}
    )
    loader = PluginLoader(selection)
    loader.load_entry_points()
    assert len(loader.warnings) == 3
    assert "plugins.allowed names 'cpu', which matches no installed plugin" in caplog.text
    assert "(installed: none)" in loader.warnings[0]


def test_unmatched_names_are_silent_when_every_name_is_installed():
    selection = PluginSelection(allowed=["cpu"], blocked=["mem"], configs={"cpu": {}})
    assert unmatched_names(selection, ["cpu", "mem"]) == []


def test_an_unreadable_host_file_only_costs_the_line_numbers(tmp_path):
    selection = PluginSelection(source=str(tmp_path / "gone.toml"))
    (placed,) = place_in_host_config("dial", [ConfigError("bad", key="level")], selection)
    assert (placed.file, placed.key, placed.line) == (
        str(tmp_path / "gone.toml"),
        "plugins.config.dial.level",
        None,
    )
