"""The public surface: every public module declares ``__all__``, and the stable plugin-author
surface changes only on purpose (removing or renaming a name needs a new major plugin API)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import accelkit

SRC = Path(accelkit.__file__).parent
ROOT = Path(__file__).resolve().parents[2]

#: the stable plugin-author surface (docs/stability.md); a name may be added, never removed
STABLE = {
    "accelkit": {"PLUGIN_API_VERSION", "__version__", "hookimpl"},
    "accelkit.plugin": {
        "PLUGIN_API_VERSION",
        "AbstractAgentContext",
        "AbstractComputePlugin",
        "AbstractLifecycleHook",
        "AgentShare",
        "MaskedAgentContext",
        "PluginRole",
    },
    "accelkit.hookspecs": {
        "PROJECT_NAME",
        "accelkit_compute_plugins",
        "accelkit_workload_event",
        "hookimpl",
    },
    "accelkit.types": {
        "AgentId",
        "ComputeDevice",
        "DeviceAllocation",
        "DeviceId",
        "DeviceName",
        "DeviceSlotInfo",
        "Mount",
        "MountType",
        "NodeInfo",
        "SlotName",
        "SlotSpec",
        "SlotType",
        "Workload",
        "WorkloadConfig",
        "WorkloadType",
    },
    "accelkit.cgroup": {
        "CgroupDir",
        "CgroupFS",
        "CgroupFormatError",
        "CgroupMembership",
        "CgroupMount",
        "WorkloadLocation",
        "parse_mountinfo",
        "parse_proc_cgroup",
        "process_tree",
        "round_process_tree",
    },
    "accelkit.errors": {
        "AccelkitError",
        "ConfigError",
        "PluginError",
        "PluginUnavailable",
        "PluginLoadError",
        "PluginContractError",
        "ResourceError",
        "InsufficientResource",
        "InvalidResourceArgument",
        "NotMultipleOfQuantum",
        "InvalidResourceCombination",
        "FractionalResourceFragmented",
        "WorkloadError",
        "WorkloadCreationDenied",
        "WorkloadCreationDeferred",
        "HookConflict",
    },
    "accelkit.metrics": {
        "Measurement",
        "MetricContext",
        "MetricType",
        "NodeMetric",
        "ProcessMetric",
        "WorkloadMetric",
    },
    "accelkit.testing": {"AgentSetup", "PluginConformance"},
}

#: helpers for accelkit's own tests: never part of a stable module's exports
TEST_ONLY = {"FakeHost", "spawn_python", "finish", "copier", "start_plugin", "exposure_problems"}


def public_modules() -> list[str]:
    """Every package and every top-level module of accelkit (submodules of packages are
    internal: their package re-exports what is public)."""
    names = ["accelkit"]
    for path in sorted(SRC.iterdir()):
        if path.name.startswith("_") or path.name in ("py.typed",):
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            names.append(f"accelkit.{path.name}")
        elif path.suffix == ".py":
            names.append(f"accelkit.{path.stem}")
    return names


@pytest.mark.parametrize("name", public_modules())
def test_every_public_module_declares_what_it_exports(name: str):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names {missing}, which it does not define"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"


@pytest.mark.parametrize("name", sorted(STABLE))
def test_the_stable_surface_keeps_every_name(name: str):
    exported = set(importlib.import_module(name).__all__)
    assert STABLE[name] <= exported, f"{name} lost {sorted(STABLE[name] - exported)}"


@pytest.mark.parametrize("name", sorted(STABLE))
def test_stable_modules_export_no_test_only_helpers(name: str):
    assert not TEST_ONLY & set(importlib.import_module(name).__all__)


def test_the_stable_modules_are_documented_in_the_api_reference():
    api = (ROOT / "docs" / "api.md").read_text()
    for name in STABLE:
        assert f"::: {name}\n" in api, f"docs/api.md does not render {name}"
