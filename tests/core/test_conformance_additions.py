"""The kit's rules on workload types, device exposure, teardown, exclusive slots, health and
registration: a sound plugin passes, and each broken rule fails naming plugin, rule and fix."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Callable
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook
from accelkit.testing import registration_checks
from accelkit.testing.workload_checks import exposure_problems
from accelkit.types import ComputeDevice, Mount, WorkloadConfig, WorkloadType

from .conformance_support import (
    Hook,
    Plugin,
    Skipped,
    expect_broken,
    run_check,
    with_health,
)


def with_hook(pre_create: Callable[[AbstractLifecycleHook], WorkloadConfig], **more: Any) -> Plugin:
    async def pre(self: AbstractLifecycleHook) -> WorkloadConfig:
        return pre_create(self)

    hook = type("CustomHook", (Hook,), {"pre_create": pre, **more})
    plugin_class = type("CustomPlugin", (Plugin,), {"lifecycle_hook_class": hook})
    return plugin_class()


NEW_CHECKS = [
    "test_api_version_is_declared_and_compatible",
    "test_hooks_serve_both_workload_types",
    "test_env_values_hold_no_newline_or_nul",
    "test_hook_exposes_only_the_devices_it_was_given",
    "test_post_terminate_is_idempotent",
    "test_exclusive_slot_types_match_an_offered_slot",
    "test_health_reports_name_only_the_plugins_devices",
    "test_an_installed_distribution_registers_a_plugin",
]


@pytest.mark.parametrize("name", NEW_CHECKS[:6])
def test_a_sound_plugin_passes(name: str):
    run_check(name, Plugin())


# -- env values and workload types ----------------------------------------------------------


@pytest.mark.parametrize("bad", ["line\nbreak", "carriage\rreturn", "nul\0byte"])
def test_env_values_with_newline_or_nul_fail(bad: str):
    plugin = with_hook(lambda hook: WorkloadConfig(env_vars={"NPUS": bad}))
    expect_broken(
        "test_env_values_hold_no_newline_or_nul",
        plugin,
        "environment values hold no newline or NUL",
        "'NPUS' has a value with NUL or newline",
    )


def test_a_hook_that_fails_for_containers_fails():
    def pre_create(hook: AbstractLifecycleHook) -> WorkloadConfig:
        if hook.workload.type is WorkloadType.CONTAINER:
            raise RuntimeError("containers not supported")
        return WorkloadConfig()

    expect_broken(
        "test_hooks_serve_both_workload_types",
        with_hook(pre_create),
        "hooks serve both workload types",
        "for a container workload raised RuntimeError('containers not supported')",
    )


def test_a_config_the_runtime_refuses_fails_for_the_workload_type():
    def pre_create(hook: AbstractLifecycleHook) -> WorkloadConfig:
        if hook.workload.type is WorkloadType.PROCESS_TREE:
            return WorkloadConfig()
        return WorkloadConfig(mounts=[Mount("/a", "/data"), Mount("/b", "/data")])

    expect_broken(
        "test_hooks_serve_both_workload_types",
        with_hook(pre_create),
        "hooks return configs the runtimes accept",
        "for a container workload",
        "appears twice",
    )


# -- device exposure --------------------------------------------------------------------------


def _every_device(field: str) -> Callable[[AbstractLifecycleHook], WorkloadConfig]:
    names = {
        "env": WorkloadConfig(env_vars={"NPUS": "npu0,npu1,npu2"}),
        "cdi": WorkloadConfig(cdi_devices=["acme.example/npu=npu2"]),
        "mount": WorkloadConfig(mounts=[Mount.device("/dev/npu1")]),
        "uuid": WorkloadConfig(resource_data={"UUIDS": "NPU-2"}),
    }
    return lambda hook: names[field]


@pytest.mark.parametrize("field", ["env", "cdi", "mount", "uuid"])
def test_a_hook_exposing_devices_it_was_not_given_fails(field: str):
    expect_broken(
        "test_hook_exposes_only_the_devices_it_was_given",
        with_hook(_every_device(field)),
        "a hook exposes only the devices it was given",
        "given ['npu0'] exposes other devices",
    )


def test_a_device_mount_outside_dev_fails():
    plugin = with_hook(lambda hook: WorkloadConfig(mounts=[Mount("/tmp/x", "/x", "device")]))
    expect_broken(
        "test_hook_exposes_only_the_devices_it_was_given",
        plugin,
        "a hook exposes only the devices it was given",
        "is not a device node under /dev",
    )


def test_ids_are_matched_as_whole_names_and_cores_through_the_cpuset():
    devices = [
        ComputeDevice("npu", "npu1", "pci:1", 0, 0, 1),
        ComputeDevice("cpu", "3", "3", 0, 0, 1),
    ]
    assert exposure_problems(WorkloadConfig(env_vars={"A": "npu10,npu11"}), devices) == []
    assert exposure_problems(WorkloadConfig(env_vars={"OMP_NUM_THREADS": "3"}), devices) == []
    assert exposure_problems(WorkloadConfig(cpuset_cpus=[3]), devices) == [
        "cpuset_cpus holds core 3"
    ]


def test_the_exposure_check_skips_with_one_device():
    plugin = Plugin()
    plugin.count = 1
    with pytest.raises(Skipped, match="needs a device the hook was not given"):
        run_check("test_hook_exposes_only_the_devices_it_was_given", plugin)


# -- teardown -----------------------------------------------------------------------------------


def test_post_terminate_that_fails_the_second_time_fails():
    calls = itertools.count()

    async def post_terminate(self: AbstractLifecycleHook) -> None:
        if next(calls) % 3 == 1:
            raise FileNotFoundError("/run/npu/lock")

    plugin = with_hook(lambda hook: WorkloadConfig(), post_terminate=post_terminate)
    expect_broken(
        "test_post_terminate_is_idempotent",
        plugin,
        "post_terminate is idempotent",
        "called twice raised FileNotFoundError",
    )


def test_post_terminate_that_fails_on_a_rebuilt_hook_fails():
    released: set[str] = set()

    async def post_terminate(self: AbstractLifecycleHook) -> None:
        if self.workload.id in released and self.__dict__.get("done") is None:
            raise RuntimeError("already released")
        released.add(self.workload.id)
        self.__dict__["done"] = True

    plugin = with_hook(lambda hook: WorkloadConfig(), post_terminate=post_terminate)
    expect_broken(
        "test_post_terminate_is_idempotent",
        plugin,
        "post_terminate is idempotent",
        "on a hook rebuilt after a crash raised RuntimeError",
    )


# -- exclusive slot types -----------------------------------------------------------------------


def with_exclusive(*patterns: str) -> Plugin:
    return type("ExclusivePlugin", (Plugin,), {"exclusive_slot_types": patterns})()


@pytest.mark.parametrize("patterns", [(), ("npu.*",), ("npu.device", "npu.shares")])
def test_exclusive_patterns_matching_an_offered_slot_pass(patterns: tuple[str, ...]):
    run_check("test_exclusive_slot_types_match_an_offered_slot", with_exclusive(*patterns))


def test_exclusive_patterns_matching_nothing_fail():
    expect_broken(
        "test_exclusive_slot_types_match_an_offered_slot",
        with_exclusive("npu.devcie", "npu.mig-*"),
        "exclusive_slot_types match slots the plugin offers",
        "none of the patterns ['npu.devcie', 'npu.mig-*'] matches an offered slot ['npu.device']",
    )


def test_exclusive_patterns_of_another_plugins_slots_fail():
    expect_broken(
        "test_exclusive_slot_types_match_an_offered_slot",
        with_exclusive("npu.device", "cuda.device"),
        "exclusive_slot_types match slots the plugin offers",
        "pattern(s) ['cuda.device'] lie outside the plugin's slots (npu.*)",
    )


# -- health -------------------------------------------------------------------------------------


def test_the_default_health_of_every_device_passes():
    run_check("test_health_reports_name_only_the_plugins_devices", Plugin())


def test_health_of_the_plugins_own_devices_passes():
    run_check("test_health_reports_name_only_the_plugins_devices", with_health({"npu0": "ok"}))


def test_health_naming_another_device_fails():
    expect_broken(
        "test_health_reports_name_only_the_plugins_devices",
        with_health({"npu0": "ok", "gpu7": "bad"}),
        "health reports name only the plugin's devices",
        "reports device(s) ['gpu7']",
    )


def test_health_that_is_not_a_mapping_fails():
    expect_broken(
        "test_health_reports_name_only_the_plugins_devices",
        with_health(["npu0"]),
        "health reports name only the plugin's devices",
        "returned a list",
    )


# -- registration -------------------------------------------------------------------------------

_counter = itertools.count()


def installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook_source: str
) -> AbstractComputePlugin:
    """A package with a plugin class and ``hook_source``, behind a fake installed entry point."""
    package = f"kitprobe{next(_counter)}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(
        "from accelkit import hookimpl\n"
        "from accelkit.errors import PluginUnavailable\n"
        "from accelkit.testing.plugin_sample import SamplePlugin\n\n"
        "class ProbePlugin(SamplePlugin):\n    pass\n\n" + textwrap.dedent(hook_source)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = EntryPoint(name="probe", value=package, group="accelkit")
    monkeypatch.setattr(registration_checks, "entry_points", lambda group: [ep])
    module = __import__(package)
    return module.ProbePlugin()


@pytest.fixture(autouse=True)
def _sample_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lets the generated packages subclass this file's sound plugin."""
    sample = type(sys)("accelkit.testing.plugin_sample")
    sample.SamplePlugin = Plugin  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "accelkit.testing.plugin_sample", sample)


def test_a_registered_distribution_passes(tmp_path, monkeypatch):
    plugin = installed(
        tmp_path,
        monkeypatch,
        """
        @hookimpl
        def accelkit_compute_plugins(config):
            return [ProbePlugin(config)]
        """,
    )
    run_check("test_an_installed_distribution_registers_a_plugin", plugin)


@pytest.mark.parametrize(
    ("source", "detail"),
    [
        ("def accelkit_compute_plugins(config):\n    return []\n", "registers no compute plugin"),
        (
            "@hookimpl\ndef accelkit_compute_plugin(config):\n    return []\n",
            "registers no compute plugin",
        ),
        (
            "@hookimpl\ndef accelkit_compute_plugins(config, node):\n    return []\n",
            "does not register",
        ),
        ("@hookimpl\ndef accelkit_compute_plugins(config):\n    return []\n", "returned []"),
        (
            "@hookimpl\ndef accelkit_compute_plugins(config):\n    raise KeyError('x')\n",
            "raised KeyError('x')",
        ),
    ],
)
def test_a_distribution_registering_no_plugin_fails(tmp_path, monkeypatch, source, detail):
    plugin = installed(tmp_path, monkeypatch, source)
    expect_broken(
        "test_an_installed_distribution_registers_a_plugin",
        plugin,
        "an installed distribution registers at least one plugin",
        detail,
    )


def test_an_unavailable_distribution_is_skipped(tmp_path, monkeypatch):
    source = "@hookimpl\ndef accelkit_compute_plugins():\n    raise PluginUnavailable('no npu')\n"
    plugin = installed(tmp_path, monkeypatch, source)
    with pytest.raises(Skipped, match="unavailable here: no npu"):
        run_check("test_an_installed_distribution_registers_a_plugin", plugin)


def test_a_plugin_without_an_installed_distribution_is_skipped():
    with pytest.raises(Skipped, match="no installed distribution has an `accelkit` entry point"):
        run_check("test_an_installed_distribution_registers_a_plugin", Plugin())


def test_the_shipped_distributions_register_their_plugins():
    from accelkit_mock import accelkit_compute_plugins

    kinds = [{"key": "cuda", "devices": [{"id": "cuda0"}]}]
    (plugin,) = accelkit_compute_plugins(config={"kinds": kinds})
    run_check("test_an_installed_distribution_registers_a_plugin", plugin)


# -- api version --------------------------------------------------------------------------------


def written_for(version: str | None) -> Plugin:
    plugin_class = type("VersionedPlugin", (Plugin,), {"api_version": version})
    return plugin_class()


def test_a_plugin_without_api_version_fails():
    expect_broken(
        "test_api_version_is_declared_and_compatible",
        written_for(None),
        "the plugin class declares the plugin API it was written against",
        "declares no api_version",
        "set api_version = '2.0' on VersionedPlugin",
    )


@pytest.mark.parametrize("version", ["1.0", "3.1", "two"])
def test_a_plugin_of_another_major_or_malformed_version_fails(version: str):
    expect_broken(
        "test_api_version_is_declared_and_compatible",
        written_for(version),
        "the plugin class declares the plugin API it was written against",
        "api_version" if version == "two" else f"written for plugin API {version}",
    )


def test_a_plugin_of_a_newer_minor_version_passes_with_a_warning():
    with pytest.warns(UserWarning, match="newer than the 2.0"):
        run_check("test_api_version_is_declared_and_compatible", written_for("2.5"))
