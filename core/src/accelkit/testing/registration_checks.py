"""Checks of what a plugin declares: exclusive slot patterns, health reports, registration."""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any, cast

import pytest

from accelkit import hookspecs
from accelkit.discovery import make_plugin_manager
from accelkit.errors import PluginUnavailable
from accelkit.plugin import AbstractComputePlugin, PluginRole
from accelkit.testing.expectations import fail_rule


def plugin_packages(plugin: AbstractComputePlugin) -> set[str]:
    """The top-level packages the plugin's class comes from (a class made with ``type()``
    reports ``abc`` as its module, so its bases are asked too)."""
    packages = {cls.__module__.partition(".")[0] for cls in type(plugin).__mro__}
    return packages - {"abc", "builtins", "accelkit"}


def installed_entry_points(plugin: AbstractComputePlugin) -> list[EntryPoint]:
    """The installed ``accelkit`` entry points whose module lies in the plugin's package."""
    packages = plugin_packages(plugin)
    return [
        ep
        for ep in entry_points(group=hookspecs.PROJECT_NAME)
        if ep.module.partition(".")[0] in packages
    ]


def _in_namespace(key: str, role: PluginRole, pattern: str) -> bool:
    """Whether ``pattern`` names the plugin's own slots: its role's bare slot or ``key.*``."""
    if (bare := role.bare_slot) is not None and fnmatch.fnmatchcase(bare, pattern):
        return True
    return pattern.startswith(f"{key}.") and len(pattern) > len(key) + 1


def _produce(plugin: AbstractComputePlugin, ep: EntryPoint, module: object) -> Sequence[object]:
    rule = "an installed distribution registers at least one plugin"
    pm = make_plugin_manager()
    try:
        pm.register(module, name=ep.name)
    except Exception as exc:  # pluggy validates the hook implementations here
        fail_rule(
            plugin,
            rule,
            f"entry point {ep.name!r} does not register: {exc}",
            "give the hook function the arguments of its spec (config) or fewer",
        )
    impls = pm.hook.accelkit_compute_plugins.get_hookimpls()
    if not impls:
        fail_rule(
            plugin,
            rule,
            f"entry point {ep.name!r} ({ep.value}) registers no compute plugin",
            "define `@hookimpl def accelkit_compute_plugins(config)` in that module (a "
            "missing @hookimpl or a misspelled name registers nothing)",
        )
    produced: list[object] = []
    for impl in impls:
        args: dict[str, Any] = {"config": plugin.config}
        try:
            result = impl.function(**{n: args[n] for n in impl.argnames})
            produced += list(cast("Iterable[object]", result or ()))
        except PluginUnavailable as exc:
            pytest.skip(f"entry point {ep.name!r}: the plugin is unavailable here: {exc}")
        except Exception as exc:
            fail_rule(
                plugin,
                rule,
                f"accelkit_compute_plugins() of entry point {ep.name!r} raised {exc!r} with "
                f"the plugin's own configuration {dict(plugin.config)!r}",
                "build the plugin objects without touching hardware; raise PluginUnavailable "
                "when it is absent",
            )
    return produced


class RegistrationChecks:
    """Exclusive slot patterns, health reports and the installed entry point."""

    def test_exclusive_slot_types_match_an_offered_slot(
        self, started: AbstractComputePlugin
    ) -> None:
        rule = "exclusive_slot_types match slots the plugin offers"
        patterns = tuple(started.exclusive_slot_types)
        offered = sorted(spec.name for spec in started.configurable_slots())
        if stray := [p for p in patterns if not _in_namespace(started.key, started.role, p)]:
            fail_rule(
                started,
                rule,
                f"pattern(s) {stray} lie outside the plugin's slots ({started.key}.*)",
                f"name this plugin's own slots, such as '{started.key}.device'",
            )
        if patterns and not any(fnmatch.filter(offered, p) for p in patterns):
            fail_rule(
                started,
                rule,
                f"none of the patterns {list(patterns)} matches an offered slot {offered}",
                "fix the spelling of the patterns (fnmatch syntax, e.g. 'npu.mig-*')",
            )

    def test_health_reports_name_only_the_plugins_devices(
        self, started: AbstractComputePlugin, runner: asyncio.Runner
    ) -> None:
        rule = "health reports name only the plugin's devices"
        report = runner.run(started.device_health())
        if not isinstance(report, Mapping):
            fail_rule(
                started,
                rule,
                f"device_health() returned a {type(report).__name__}",
                "return a mapping of device id to DeviceHealth",
            )
        own = {d.device_id for d in started.devices}
        if stray := sorted(set(report) - own):
            fail_rule(
                started,
                rule,
                f"device_health() reports device(s) {stray}, which list_devices() does not "
                f"return ({sorted(own)})",
                "report exactly the devices of list_devices(), by the same ids",
            )

    def test_an_installed_distribution_registers_a_plugin(
        self, plugin: AbstractComputePlugin
    ) -> None:
        found = installed_entry_points(plugin)
        if not found:
            pytest.skip(
                "no installed distribution has an `accelkit` entry point into "
                f"{sorted(plugin_packages(plugin))}; "
                "install the distribution to check its registration"
            )
        for ep in found:
            module = ep.load()
            produced = _produce(plugin, ep, module)
            plugins = [p for p in produced if isinstance(p, AbstractComputePlugin)]
            if not plugins:
                fail_rule(
                    plugin,
                    "an installed distribution registers at least one plugin",
                    f"entry point {ep.name!r} returned {produced!r}, no compute plugin",
                    "return a list of AbstractComputePlugin instances from "
                    "accelkit_compute_plugins(config)",
                )
