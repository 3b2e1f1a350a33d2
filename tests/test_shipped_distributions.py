"""The cpu and mem distributions as the loader meets them: their hook returns a configured
plugin, and importing them loads neither the plugin module nor psutil."""

from __future__ import annotations

import importlib

import pytest

from accelkit.plugin import AbstractComputePlugin
from accelkit_cpu.plugin import CPUPlugin
from accelkit_mem.plugin import MemPlugin

from .distribution_probes import loaded_by_importing, plugin_of

SHIPPED = [("cpu", CPUPlugin), ("mem", MemPlugin)]


@pytest.mark.parametrize(("key", "plugin_class"), SHIPPED)
def test_the_hook_returns_a_configured_plugin(
    key: str, plugin_class: type[AbstractComputePlugin]
) -> None:
    distribution = importlib.import_module(f"accelkit_{key}")
    plugin = plugin_of(distribution, {"overcommit-factor": 2})
    assert isinstance(plugin, plugin_class)
    assert plugin.key == key
    assert plugin.settings.overcommit_factor == 2  # type: ignore[attr-defined]
    assert getattr(distribution, plugin_class.__name__) is plugin_class
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = distribution.Nope


@pytest.mark.parametrize("key", [key for key, _ in SHIPPED])
def test_importing_the_distribution_is_cheap(key: str) -> None:
    assert loaded_by_importing(f"accelkit_{key}", [f"accelkit_{key}.plugin", "psutil"]) == []
