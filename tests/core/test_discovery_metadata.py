"""Loading the installed entry points reads a distribution's metadata only when its name or
version is asked for, and then once: a command that never shows them (``run``) parses no
metadata file, ``accelkit plugins`` one per distribution."""

from __future__ import annotations

import importlib.metadata

import pytest

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
