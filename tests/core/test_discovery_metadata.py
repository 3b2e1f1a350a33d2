"""Loading the installed entry points reads a distribution's metadata only when its name or
version is asked for, and then once: a command that never shows them (``run``) parses no
metadata file, ``accelkit plugins`` one per distribution."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from accelkit.apiversion import check_api_version
from accelkit.discovery import PluginLoader
from accelkit.registry import PluginStatus
from accelkit.selection import PluginSelection


@pytest.fixture
def metadata_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The distributions whose metadata was read, one entry per read."""
    reads: list[str] = []
    read = importlib.metadata.Distribution.metadata

    def counted(dist: importlib.metadata.Distribution) -> importlib.metadata.PackageMetadata:
        found = read.fget(dist)  # type: ignore[attr-defined]
        reads.append(found["Name"])
        return found  # type: ignore[no-any-return]

    monkeypatch.setattr(importlib.metadata.Distribution, "metadata", property(counted))
    return reads


def test_loading_reads_no_metadata_and_a_record_reads_it_once(metadata_reads):
    cpu_version = importlib.metadata.version("accelkit-cpu")
    metadata_reads.clear()
    loader = PluginLoader(PluginSelection(allowed=["mock"]))
    loader.load_entry_points()
    assert loader.records["mock"].status is PluginStatus.LOADED
    assert loader.records["cpu"].status is PluginStatus.BLOCKED
    assert metadata_reads == []

    cpu = loader.records["cpu"]
    assert (cpu.distribution, cpu.version) == ("accelkit-cpu", cpu_version)
    assert cpu.as_json()["distribution"] == "accelkit-cpu"
    assert metadata_reads == ["accelkit-cpu"]
    mock = loader.records["mock"].as_json()
    assert (mock["distribution"], mock["status"]) == ("accelkit-mock", "loaded")
    assert metadata_reads == ["accelkit-cpu", "accelkit-mock"]


def test_a_registered_record_keeps_what_it_was_given(metadata_reads):
    loader = PluginLoader()
    record = loader.register(object(), "x", distribution="d", version="1")
    assert (record.distribution, record.version) == ("d", "1")
    assert metadata_reads == []


def test_building_the_plugins_reads_no_metadata_and_a_message_still_names_the_distribution(
    metadata_reads, tmp_path
):
    """The API version check names the plugin's distribution only in a message it gives."""
    devices = tmp_path / "mock-devices.toml"
    devices.write_text((Path(__file__).parents[2] / "docs/examples/mock-devices.toml").read_text())
    selection = PluginSelection(allowed=["mock"], configs={"mock": {"config-file": str(devices)}})
    loader = PluginLoader(selection)
    loader.load_entry_points()
    loader.build()
    assert loader.records["mock"].plugins
    assert metadata_reads == []

    said: list[str] = []

    def who() -> str:
        said.append("asked")
        return "Newer (plugin 'n' from d)"

    newer = type("Newer", (), {"api_version": "2.99"})()
    warning = check_api_version(newer, who) or ""
    assert warning.startswith("Newer (plugin 'n' from d) was written for plugin API 2.99")
    assert said == ["asked"]
    said.clear()
    assert check_api_version(type("Now", (), {"api_version": "2.0"})(), who) is None
    assert said == []
