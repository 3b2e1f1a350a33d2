"""Hooks are called through pluggy: wrappers observe each call and tracing sees it (DESIGN §4)."""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Generator
from typing import Any, ClassVar

import pytest

from accelkit import hookimpl
from accelkit.cli.app import main
from accelkit.discovery import PluginLoader, make_plugin_manager
from accelkit.events import WorkloadEvent, WorkloadPhase
from accelkit.registry import PluginStatus
from accelkit.selection import PluginSelection
from accelkit.types import AgentId, DeviceName, Workload

from .one_device_plugin import OneDevicePlugin


class Plugin(OneDevicePlugin):
    key: ClassVar[DeviceName] = DeviceName("wrapped")


def named(key: str) -> type[Plugin]:
    return type(f"{key.title()}Plugin", (Plugin,), {"key": key})


def distribution(key: str) -> types.SimpleNamespace:
    @hookimpl
    def accelkit_compute_plugins(config: Any) -> Any:
        return [named(key)(config)]

    @hookimpl
    def accelkit_workload_event(event: WorkloadEvent) -> None:
        seen_events.append((key, event.phase))

    return types.SimpleNamespace(
        accelkit_compute_plugins=accelkit_compute_plugins,
        accelkit_workload_event=accelkit_workload_event,
    )


seen_events: list[tuple[str, str]] = []


class Observer:
    """A vendor's observer: wraps every hook call, sees arguments and results."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    @hookimpl(wrapper=True)
    def accelkit_compute_plugins(self, config: Any) -> Generator[None, Any, Any]:
        results = yield
        self.calls.append(("compute_plugins", sorted(p.key for ps in results for p in ps)))
        return results

    @hookimpl(wrapper=True)
    def accelkit_workload_event(self, event: WorkloadEvent) -> Generator[None, Any, Any]:
        result = yield
        self.calls.append(("workload_event", event.phase))
        return result


def test_a_wrapper_observes_each_distribution_called_on_its_own():
    seen_events.clear()
    observer = Observer()
    loader = PluginLoader(PluginSelection(configs={"a": {"x": 1}}))
    loader.register(distribution("a"), "a")
    loader.register(distribution("b"), "b")
    loader.pm.register(observer, name="observer")
    loader.build()
    plugins = asyncio.run(loader.start())

    assert sorted(p.key for p in plugins) == ["a", "b"]
    assert "observer" not in loader.records  # an observer is no plugin distribution
    # one call per distribution, each seeing only that distribution's plugins
    assert sorted(c for c in observer.calls if c[0] == "compute_plugins") == [
        ("compute_plugins", ["a"]),
        ("compute_plugins", ["b"]),
    ]
    assert plugins[0].config == {"x": 1} or plugins[1].config == {"x": 1}

    loader.notify_workload_event(WorkloadEvent(AgentId("a1"), Workload("w"), "post_create"))
    assert sorted(seen_events) == [
        ("a", WorkloadPhase.POST_CREATE),
        ("b", WorkloadPhase.POST_CREATE),
    ]
    assert observer.calls.count(("workload_event", WorkloadPhase.POST_CREATE)) == 2


def test_a_wrapper_may_replace_the_result():
    class Replacer:
        @hookimpl(wrapper=True)
        def accelkit_compute_plugins(self) -> Generator[None, Any, Any]:
            yield
            return [[named("swapped")()]]

    loader = PluginLoader()
    loader.register(distribution("orig"), "orig")
    loader.pm.register(Replacer(), name="replacer")
    loader.build()
    assert [p.key for p in asyncio.run(loader.start())] == ["swapped"]


def test_an_error_seen_by_a_wrapper_still_fails_only_its_distribution():
    seen: list[str] = []

    class Watcher:
        @hookimpl(wrapper=True)
        def accelkit_compute_plugins(self) -> Generator[None, Any, Any]:
            try:
                return (yield)
            except RuntimeError as exc:
                seen.append(str(exc))
                raise

    @hookimpl
    def accelkit_compute_plugins() -> Any:
        raise RuntimeError("broken build")

    loader = PluginLoader()
    loader.register(types.SimpleNamespace(accelkit_compute_plugins=accelkit_compute_plugins), "bad")
    loader.register(distribution("good"), "good")
    loader.pm.register(Watcher(), name="watcher")
    loader.build()
    assert seen == ["broken build"]
    assert loader.records["bad"].status is PluginStatus.FAILED
    assert loader.records["bad"].error == "RuntimeError: broken build"
    assert loader.records["good"].status is PluginStatus.LOADED


def test_tracing_is_off_unless_hooks_log_at_debug(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="accelkit.hooks")
    loader = PluginLoader(pm=make_plugin_manager())
    loader.register(distribution("quiet"), "quiet")
    loader.build()
    assert not [r for r in caplog.records if r.name == "accelkit.hooks"]


def test_tracing_at_debug_logs_each_hook_call(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG, logger="accelkit.hooks")
    loader = PluginLoader(pm=make_plugin_manager())
    loader.register(distribution("traced"), "traced")
    loader.build()
    lines = [r.getMessage() for r in caplog.records if r.name == "accelkit.hooks"]
    assert any("accelkit_compute_plugins" in line for line in lines), lines
    assert any("finish accelkit_compute_plugins" in line for line in lines), lines


def test_two_verbose_flags_turn_hook_tracing_on(monkeypatch: pytest.MonkeyPatch):
    hooks = logging.getLogger("accelkit.hooks")
    monkeypatch.setattr(hooks, "level", logging.NOTSET)
    assert main(["-v", "plugins", "--help"]) == 0
    assert not hooks.isEnabledFor(logging.DEBUG)
    assert main(["-v", "-v", "plugins", "--help"]) == 0
    assert hooks.level == logging.DEBUG
