"""The plugin API version: parsing, the loader's verdicts, and the shipped plugins' declarations."""

from __future__ import annotations

import asyncio
import types
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

import accelkit
from accelkit import hookimpl
from accelkit.apiversion import PLUGIN_API_VERSION, ApiVersion, check_api_version
from accelkit.discovery import PluginLoader
from accelkit.errors import PluginContractError
from accelkit.plugin import AbstractComputePlugin
from accelkit.registry import PluginStatus
from accelkit.types import DeviceName

from .one_device_plugin import OneDevicePlugin


class VersionedPlugin(OneDevicePlugin):
    key: ClassVar[DeviceName] = DeviceName("ver")
    api_version: ClassVar[str] = PLUGIN_API_VERSION


def written_for(version: str | None) -> type[VersionedPlugin]:
    attributes = {} if version is None else {"api_version": version}
    cls = type("OtherPlugin", (VersionedPlugin,), attributes)
    if version is None:  # a class that never declared one, as plugins older than the API had
        cls.api_version = None  # type: ignore[assignment]
    return cls


def load(plugin_class: type[VersionedPlugin]) -> PluginLoader:
    @hookimpl
    def accelkit_compute_plugins() -> Any:
        return [plugin_class()]

    loader = PluginLoader()
    loader.register(types.SimpleNamespace(accelkit_compute_plugins=accelkit_compute_plugins), "v")
    loader.build()
    asyncio.run(loader.start())
    return loader


def test_core_exports_the_api_version():
    assert accelkit.PLUGIN_API_VERSION == PLUGIN_API_VERSION == "2.0"
    assert "PLUGIN_API_VERSION" in accelkit.__all__


@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_versions_parse_and_print_back(major: int, minor: int):
    text = f"{major}.{minor}"
    assert str(ApiVersion.parse(text)) == text


@pytest.mark.parametrize("text", ["2", "2.0.1", "v2.0", "02.0", "2.x", "", " 2.0", 2.0, None])
def test_malformed_versions_are_refused_with_the_expected_form(text: object):
    with pytest.raises(ValueError, match=r"'major\.minor'"):
        ApiVersion.parse(text)


def test_versions_order_by_major_then_minor():
    assert ApiVersion.parse("2.10") > ApiVersion.parse("2.9") > ApiVersion.parse("1.99")


def test_same_and_older_minor_versions_load_silently():
    loader = load(written_for(PLUGIN_API_VERSION))
    assert loader.records["v"].status is PluginStatus.LOADED
    assert loader.records["v"].error is None
    assert loader.warnings == []
    assert check_api_version(written_for("2.0")(), "p") is None


@pytest.mark.parametrize("version", ["1.4", "3.0"])
def test_another_major_version_fails_naming_both_versions(version: str):
    record = load(written_for(version)).records["v"]
    assert record.status is PluginStatus.FAILED
    assert record.error is not None
    assert f"written for plugin API {version}" in record.error
    assert f"this accelkit provides plugin API {PLUGIN_API_VERSION}" in record.error
    assert "OtherPlugin" in record.error


def test_a_newer_minor_version_loads_with_a_warning(caplog: pytest.LogCaptureFixture):
    loader = load(written_for("2.7"))
    record = loader.records["v"]
    assert record.status is PluginStatus.LOADED
    assert record.error is not None
    assert "plugin API 2.7, newer than the 2.0" in record.error
    assert "newer than the 2.0" in caplog.text
    assert loader.warnings == [record.error]  # every command prints the loader's warnings


def test_a_malformed_declaration_fails_the_plugin():
    record = load(written_for("two")).records["v"]
    assert record.status is PluginStatus.FAILED
    assert "malformed api_version" in (record.error or "")


def test_a_missing_declaration_loads_with_a_warning_saying_what_to_set():
    record = load(written_for(None)).records["v"]
    assert record.status is PluginStatus.LOADED
    assert "declares no api_version" in (record.error or "")
    assert f"api_version = {PLUGIN_API_VERSION!r}" in (record.error or "")


def test_check_raises_a_contract_error_for_another_major():
    with pytest.raises(PluginContractError, match=r"written for plugin API 9\.0"):
        check_api_version(written_for("9.0")(), "the plugin")


@pytest.mark.parametrize(
    "module", ["accelkit_cpu.plugin", "accelkit_mem.plugin", "accelkit_cuda.plugin", "acme_npu"]
)
def test_every_shipped_plugin_declares_the_current_api(module: str):
    mod = __import__(module, fromlist=["_"])
    classes = [
        v
        for v in vars(mod).values()
        if isinstance(v, type) and issubclass(v, AbstractComputePlugin) and "key" in vars(v)
    ]
    assert classes, module
    for cls in classes:
        assert ApiVersion.parse(cls.api_version).major == ApiVersion.parse(PLUGIN_API_VERSION).major


def test_the_mock_plugin_declares_the_current_api():
    from accelkit_mock.plugin import MockPlugin

    assert MockPlugin.api_version == PLUGIN_API_VERSION
