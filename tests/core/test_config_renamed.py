"""Renamed keys: a schema field annotated with ``Renamed("old")`` still reads the old key, the
loader warns about it, and giving both spellings is an error."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit import hookimpl
from accelkit.config import Renamed, int_between, read_section
from accelkit.config.converter import renamed_keys, structure
from accelkit.discovery import PluginLoader
from accelkit.errors import ConfigError, ConfigErrors
from accelkit.plugin import AbstractComputePlugin
from accelkit.selection import PluginSelection
from accelkit.types import DeviceName

from .one_device_plugin import OneDevicePlugin


@attrs.frozen
class Limits:
    max_queues: Annotated[int, int_between(1, 64), Renamed("queues")] = 8


@attrs.frozen
class DialConfig:
    overcommit_factor: Annotated[int, int_between(1, 10), Renamed("overcommit")] = 1
    sysfs_dir: Annotated[str, Renamed("dir")] = "/sys"
    limits: Limits = Limits()


def test_the_old_key_is_read_as_the_new_one():
    value, errors = structure({"overcommit": 3, "dir": "/x"}, DialConfig, file=None)
    assert errors == []
    assert value == DialConfig(overcommit_factor=3, sysfs_dir="/x")
    assert renamed_keys({"overcommit": 3, "dir": "/x"}, DialConfig) == [
        ("overcommit", "overcommit-factor"),
        ("dir", "sysfs-dir"),
    ]


def test_the_new_key_needs_no_warning():
    assert renamed_keys({"overcommit-factor": 3}, DialConfig) == []
    assert renamed_keys({}, DialConfig) == []


def test_renamed_keys_of_nested_tables_are_read_and_found():
    value, errors = structure({"limits": {"queues": 4}}, DialConfig, file=None)
    assert errors == []
    assert value is not None
    assert value.limits.max_queues == 4
    assert renamed_keys({"limits": {"queues": 4}}, DialConfig) == [("queues", "max-queues")]


def test_both_spellings_at_once_are_an_error_naming_the_old_key():
    _value, errors = structure(
        {"overcommit": 3, "overcommit-factor": 2}, DialConfig, file="h.toml", prefix=("p",)
    )
    assert [(e.key, e.message) for e in errors] == [
        ("p.overcommit", "renamed 'overcommit-factor', which is given too: remove 'overcommit'")
    ]


def test_an_old_key_with_a_bad_value_is_reported_under_the_new_key():
    _value, errors = structure({"overcommit": 70}, DialConfig, file=None)
    assert [(e.key, e.message) for e in errors] == [
        ("overcommit-factor", "must be from 1 to 10, got 70")
    ]


def test_read_section_takes_the_old_key():
    assert read_section(DialConfig, {"overcommit": 2}).overcommit_factor == 2
    with pytest.raises(ConfigError, match="which is given too"):
        read_section(DialConfig, {"overcommit": 2, "overcommit-factor": 2})


@given(st.integers(1, 10))
def test_old_and_new_spellings_read_the_same(factor: int):
    old, _ = structure({"overcommit": factor}, DialConfig, file=None)
    new, _ = structure({"overcommit-factor": factor}, DialConfig, file=None)
    assert old == new == DialConfig(overcommit_factor=factor)


class DialPlugin(OneDevicePlugin):
    key: ClassVar[DeviceName] = DeviceName("dial")
    api_version: ClassVar[str] = "2.0"
    config_schema: ClassVar[type[DialConfig]] = DialConfig

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.settings = read_section(DialConfig, self.config)


class DialModule:
    @staticmethod
    @hookimpl
    def accelkit_compute_plugins(config: Any) -> Sequence[AbstractComputePlugin]:
        return [DialPlugin(config)]


def built(section: dict[str, Any]) -> PluginLoader:
    loader = PluginLoader(PluginSelection(configs={"dial": section}, source="/etc/host.toml"))
    loader.register(DialModule, "dial")
    loader.build()
    return loader


def test_the_loader_warns_of_an_old_key_and_the_plugin_reads_it():
    loader = built({"overcommit": 4})
    assert loader.warnings == [
        "/etc/host.toml: [plugins.config.dial] 'overcommit' is deprecated, it is now spelt "
        "'overcommit-factor' (the old key is still read)"
    ]
    [plugin] = loader.records["dial"].plugins
    assert isinstance(plugin, DialPlugin)
    assert plugin.settings.overcommit_factor == 4


def test_the_loader_says_nothing_of_a_section_in_current_keys():
    assert built({"overcommit-factor": 4}).warnings == []


def test_both_spellings_in_a_section_stop_the_loader():
    with pytest.raises(ConfigError) as info:
        built({"overcommit": 4, "overcommit-factor": 4})
    errors = info.value.errors if isinstance(info.value, ConfigErrors) else [info.value]
    assert [e.key for e in errors] == ["plugins.config.dial.overcommit"]


def test_a_schemas_annotations_are_evaluated_once(monkeypatch):
    # each string annotation is compiled where it is evaluated: once per field, not once for
    # the renamed keys and again for the structuring
    @attrs.frozen
    class Fresh:
        speed: Annotated[int, int_between(1, 9), Renamed("velocity")] = 1
        label: str = ""

    evaluated: list[str] = []
    real_init = typing.ForwardRef.__init__

    def counting_init(self: typing.ForwardRef, arg: str, *args: Any, **kwargs: Any) -> None:
        evaluated.append(arg)
        real_init(self, arg, *args, **kwargs)

    monkeypatch.setattr(typing.ForwardRef, "__init__", counting_init)
    value, errors = structure({"velocity": 3, "label": "x"}, Fresh, file=None)
    assert errors == []
    assert value == Fresh(speed=3, label="x")
    assert sorted(evaluated) == sorted(
        ["Annotated[int, int_between(1, 9), Renamed('velocity')]", "str"]
    )
