"""Runtimes registered through the ``accelkit_runtimes`` hook, built-ins included (DESIGN §18)."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Generator
from typing import Any

import pytest

from accelkit import hookimpl
from accelkit.config import load_host_config
from accelkit.discovery import PluginLoader, make_plugin_manager
from accelkit.node import Node
from accelkit.registry import PluginStatus
from accelkit.runtime import builtin
from accelkit.runtime.base import TrackingRuntime
from accelkit.runtime.process import ProcessRuntime
from accelkit.runtime.registry import (
    default_runtimes,
    installed_runtimes,
    installed_runtimes_by_name,
    launching_names,
    runtime_classes,
)

BUILTIN = ["process", "docker", "kubelet-pods", "slurm-jobs", "k8s-claims"]


class Extra(ProcessRuntime):
    name = "extra"


class Tracker(TrackingRuntime):
    name = "tracker"
    tracks = "jobs of a test"

    async def is_alive(self, handle: Any) -> bool | None:
        return None

    async def stop(self, handle: Any, grace: float) -> None:
        return None


def adding(*classes: Any) -> types.SimpleNamespace:
    @hookimpl
    def accelkit_runtimes() -> Any:
        return list(classes)

    return types.SimpleNamespace(accelkit_runtimes=accelkit_runtimes)


def collect(*distributions: tuple[str, Any]) -> tuple[dict[str, Any], list[str]]:
    loader = PluginLoader()
    for name, module in distributions:
        loader.register(module, name)
    warnings: list[str] = []
    return runtime_classes(loader.pm, warn=warnings.append), warnings


def test_the_built_ins_are_registered_through_the_hook():
    classes, warnings = collect()
    assert list(classes) == BUILTIN
    assert warnings == []
    assert launching_names(classes) == ["process", "docker"]
    assert list(default_runtimes()) == BUILTIN


def test_a_distribution_adds_its_runtimes_after_the_built_ins():
    classes, warnings = collect(("extras", adding(Extra, Tracker)))
    assert list(classes) == [*BUILTIN, "extra", "tracker"]
    assert classes["extra"] is Extra
    assert warnings == []
    assert launching_names(classes) == ["process", "docker", "extra"]


def test_a_name_taken_by_a_built_in_stays_the_built_in_and_both_are_named():
    class Impostor(ProcessRuntime):
        name = "docker"

    classes, warnings = collect(("impostor", adding(Impostor)))
    assert classes["docker"].__name__ == "DockerRuntime"
    assert warnings == [
        "runtime name 'docker' claimed by both DockerRuntime (plugin 'accelkit-runtimes') "
        "and Impostor (plugin 'impostor'); the first is kept"
    ]


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        (object(), "plugin 'bad' returned <object object at"),
        (int, "plugin 'bad' returned <class 'int'>, which is not a Runtime subclass"),
        (type("Nameless", (ProcessRuntime,), {"name": ""}), "Nameless of plugin 'bad' has no"),
        (type("Half", (TrackingRuntime,), {"name": "half"}), "does not implement is_alive, stop"),
    ],
)
def test_what_is_not_a_runtime_is_refused_and_the_rest_kept(returned, said):
    classes, warnings = collect(("bad", adding(returned, Extra)))
    assert "extra" in classes
    assert len(warnings) == 1
    assert said in warnings[0]


def test_a_hook_that_raises_is_named_and_the_others_kept():
    @hookimpl
    def accelkit_runtimes() -> Any:
        raise RuntimeError("no engine library")

    classes, warnings = collect(
        ("broken", types.SimpleNamespace(accelkit_runtimes=accelkit_runtimes)),
        ("extras", adding(Extra)),
    )
    assert list(classes) == [*BUILTIN, "extra"]
    assert warnings == [
        "plugin 'broken' failed to register its runtimes: RuntimeError: no engine library"
    ]


def test_a_runtime_whose_constructor_raises_is_left_out():
    class Fragile(Extra):
        name = "fragile"

        def __init__(self) -> None:
            raise OSError("no socket")

    loader = PluginLoader(pm=make_plugin_manager())
    loader.register(adding(Fragile, Extra), "fragile")
    warnings: list[str] = []
    runtimes = installed_runtimes(loader.pm, warn=warnings.append)
    assert "extra" in runtimes
    assert "fragile" not in runtimes
    assert warnings == ["runtime 'fragile' (Fragile) failed to start: OSError: no socket"]


def test_a_wrapper_sees_every_runtime_registration():
    seen: list[str] = []

    class Observer:
        @hookimpl(wrapper=True)
        def accelkit_runtimes(self) -> Generator[None, Any, Any]:
            results = yield
            seen.extend(cls.name for classes in results for cls in classes)
            return results

    loader = PluginLoader()
    loader.register(adding(Extra), "extras")
    loader.pm.register(Observer(), name="observer")
    runtime_classes(loader.pm)
    assert seen == [*BUILTIN, "extra"]


def test_a_distribution_with_runtimes_alone_is_loaded_not_failed():
    loader = PluginLoader()
    record = loader.register(adding(Extra), "extras")
    loader.build()
    assert record.status is PluginStatus.LOADED
    assert builtin.NAME not in loader.records  # registered when runtimes are collected


def test_a_node_offers_the_runtimes_of_its_loader_and_names_the_refused(mock_node):
    path = mock_node(cpus=1)
    path.write_text(path.read_text().replace('allowed = ["mock"]', 'allowed = ["mock", "extras"]'))
    config = load_host_config(path)
    loader = PluginLoader.from_entry_points(config.plugins)
    loader.register(adding(Extra, int), "extras")

    async def main() -> tuple[list[str], list[str]]:
        async with Node.open(config, loader=loader) as node:
            return list(node.runtimes), list(node.host.loader.warnings)

    names, warnings = asyncio.run(main())
    assert names == [*BUILTIN, "extra"]
    assert any("plugin 'extras' returned <class 'int'>" in w for w in warnings), warnings


def by_name(*distributions: tuple[str, Any]) -> tuple[Any, list[str]]:
    loader = PluginLoader(pm=make_plugin_manager())
    for name, module in distributions:
        loader.register(module, name)
    warnings: list[str] = []
    return installed_runtimes_by_name(loader.pm, warn=warnings.append), warnings


def test_the_built_in_table_names_the_classes_the_hook_returns():
    assert {cls.name: cls.__name__ for cls in builtin.accelkit_runtimes()} == {
        name: cls for name, (_, cls) in builtin.CLASSES.items()
    }


def test_runtimes_by_name_are_the_installed_ones_built_when_first_asked_for():
    runtimes, warnings = by_name(("extras", adding(Extra, Tracker)))
    assert list(runtimes) == [*BUILTIN, "extra", "tracker"]
    assert len(runtimes) == len(BUILTIN) + 2
    assert warnings == []
    assert [r.name for r in runtimes.built()] == []
    docker = runtimes["docker"]
    assert type(docker).__name__ == "DockerRuntime"
    assert runtimes["docker"] is docker
    assert isinstance(runtimes["extra"], Extra)
    assert [r.name for r in runtimes.built()] == ["docker", "extra"]
    with pytest.raises(KeyError):
        runtimes["nothing"]


def test_by_name_a_name_taken_by_a_built_in_stays_the_built_in_and_both_are_named():
    class Impostor(ProcessRuntime):
        name = "docker"

    runtimes, warnings = by_name(("impostor", adding(Impostor)))
    assert type(runtimes["docker"]).__name__ == "DockerRuntime"
    assert warnings == [
        "runtime name 'docker' claimed by both DockerRuntime (plugin 'accelkit-runtimes') "
        "and Impostor (plugin 'impostor'); the first is kept"
    ]


def test_by_name_a_runtime_whose_constructor_raises_is_left_out():
    class Fragile(Extra):
        name = "fragile"

        def __init__(self) -> None:
            raise OSError("no socket")

    runtimes, warnings = by_name(("fragile", adding(Fragile, Extra)))
    assert list(runtimes) == [*BUILTIN, "extra"]
    assert warnings == ["runtime 'fragile' (Fragile) failed to start: OSError: no socket"]
