"""Finding, loading and starting compute plugins, each guarded on its own (DESIGN §4).

Nothing happens at import time: :func:`make_plugin_manager` builds a fresh pluggy manager and
:class:`PluginLoader` is the typed facade the rest of accelkit uses. A plugin whose hardware is
absent ends ``unavailable``; one that raises on import, init or discovery ends ``failed`` with its
error, and the others keep working. Strict mode turns any failure into a start-up error.

Every call into a plugin runs under ``[plugins] call-timeout`` (:mod:`accelkit.calls`): the
import in a thread of its own, the plugin's methods, synchronous or coroutines, on the plugin's
own worker thread and event loop. A plugin that hangs, awaiting or blocking (``time.sleep``
inside ``async def``), is ``failed`` with "plugin 'x' timed out after 30 s in list_devices" and
the others still start; one that overruns a later call (a hook, metrics) is failed from then on
for the rest of the process, and its record says so.
"""

from __future__ import annotations

import functools
import logging
import traceback
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING

import pluggy

from accelkit import hookspecs
from accelkit.apiversion import check_api_version
from accelkit.calls import (
    PluginWorker,
    call_async,
    call_blocking,
    call_sync,
    failure_of,
    on_failure,
    retire,
)
from accelkit.config.plugin_sections import (
    errors_of,
    place_in_host_config,
    raise_all,
    renamed_key_warnings,
    schema_problems,
    unmatched_names,
)
from accelkit.entrypoints import entry_points
from accelkit.errors import (
    ConfigError,
    PluginContractError,
    PluginLoadError,
    PluginTimeout,
    PluginUnavailable,
)
from accelkit.events import WorkloadEvent
from accelkit.plugin import AbstractComputePlugin
from accelkit.registry import (
    HookFunctions,
    KeyRegister,
    PluginRecord,
    PluginStatus,
    check_plugin_object,
    check_slots,
    check_unique_ids,
    hook_of,
    one_result,
    origin,
)
from accelkit.selection import PluginSelection

if TYPE_CHECKING:
    from accelkit.entrypoints import EntryPoint

__all__ = ["PluginLoader", "make_plugin_manager"]

log = logging.getLogger(__name__)


#: pluggy's hook-call tracing goes here, at debug level (``accelkit -v -v``)
hook_log = logging.getLogger("accelkit.hooks")


def make_plugin_manager() -> pluggy.PluginManager:
    """A fresh plugin manager that knows accelkit's hook specifications.

    When ``accelkit.hooks`` logs at debug level (``accelkit -v -v``), pluggy traces every hook
    call and its result there.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    if hook_log.isEnabledFor(logging.DEBUG):
        pm.trace.root.setwriter(lambda text: hook_log.debug("%s", text.rstrip()))
        pm.enable_tracing()
    return pm


def _identity(ep: EntryPoint) -> tuple[str, str]:
    """The name and version of the distribution declaring ``ep``, from one read of its
    metadata (each of ``Distribution.name`` and ``.version`` reads and parses it again)."""
    if (dist := ep.dist) is None:
        return "", ""
    metadata = dist.metadata
    return metadata["Name"], metadata["Version"]


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, PluginTimeout):  # the message names the plugin, the time and the method
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class PluginLoader:
    """Loads plugin distributions by entry-point name and keeps one record for each."""

    def __init__(
        self, selection: PluginSelection | None = None, pm: pluggy.PluginManager | None = None
    ) -> None:
        self.selection = selection or PluginSelection()
        self.pm = pm or make_plugin_manager()
        self.records: dict[str, PluginRecord] = {}
        self._register = KeyRegister()
        self._started: list[AbstractComputePlugin] = []
        self._observers: dict[str, PluginWorker] = {}  # observers of workloads, by name
        #: problems of ``[plugins.config.NAME]`` sections, raised together by :meth:`build`
        self.config_problems: list[ConfigError] = []
        #: what the operator should hear of, once, from every command: plugin names in the
        #: config or the environment that match no installed plugin, plugins written for a
        #: newer minor plugin API (or declaring none), renamed keys a plugin section still uses
        self.warnings: list[str] = []

    @classmethod
    def from_entry_points(cls, selection: PluginSelection | None = None) -> PluginLoader:
        """A loader holding every installed plugin distribution, built but not started."""
        loader = cls(selection)
        loader.load_entry_points()
        loader.build()
        return loader

    # -- registration -------------------------------------------------------------------------

    def register(
        self,
        module: object,
        name: str,
        *,
        distribution: str = "",
        version: str = "",
        identify: Callable[[], tuple[str, str]] | None = None,
    ) -> PluginRecord:
        """Register a module or object implementing the hooks, as entry point ``name`` would
        (``identify`` tells the distribution and version when first asked for)."""
        record = PluginRecord(name, distribution, version, identify=identify)
        self.records[name] = record
        if (reason := self.selection.block_reason(name)) is not None:
            record.mark(PluginStatus.BLOCKED, reason)
            return record
        if not isinstance(module, Hashable):
            module = HookFunctions(module)
        try:
            self.pm.register(module, name=name)
        except Exception as exc:  # pluggy validates hookimpl signatures here
            self._fail(record, exc)
        return record

    def load_entry_points(self, group: str = hookspecs.PROJECT_NAME) -> None:
        """Import every installed distribution of the ``accelkit`` entry-point group."""
        found = sorted(entry_points(group=group), key=lambda e: e.name)
        for ep in found:
            self._load_entry_point(ep)
        self._note(unmatched_names(self.selection, {ep.name for ep in found}))

    def _load_entry_point(self, ep: EntryPoint) -> None:
        identify = functools.partial(_identity, ep)
        if ep.name in self.records:
            prev = self.records[ep.name]
            distribution, version = identify()
            msg = (
                f"entry point {ep.name!r} is declared by both {prev.distribution or '?'} "
                f"and {distribution or '?'}"
            )
            record = PluginRecord(ep.name + f" ({distribution})", distribution, version)
            self.records[record.name] = record
            self._fail(record, PluginContractError(msg))
            return
        if (reason := self.selection.block_reason(ep.name)) is not None:
            record = PluginRecord(ep.name, identify=identify)
            record.mark(PluginStatus.BLOCKED, reason)
            self.records[ep.name] = record
            return
        try:
            module = call_blocking(ep.name, "import", self.selection.call_timeout, ep.load)
        except Exception as exc:
            record = PluginRecord(ep.name, identify=identify)
            self.records[ep.name] = record
            self._fail(record, exc, "import")
            return
        record = self.register(module, ep.name, identify=identify)
        hook = self.pm.hook
        hooks = (hook.accelkit_compute_plugins, hook.accelkit_runtimes, hook.accelkit_bridges)
        names = {i.plugin_name for hook in hooks for i in hook.get_hookimpls() if not i.wrapper}
        if record.status is PluginStatus.LOADED and ep.name not in names:
            msg = (
                f"{ep.value} registers no compute plugin, runtime or bridge (no @hookimpl "
                "accelkit_compute_plugins, accelkit_runtimes or accelkit_bridges)"
            )
            self._fail(record, PluginContractError(msg), "import")

    # -- building and starting ----------------------------------------------------------------

    def build(self) -> None:
        """Ask each registered distribution for its plugin objects, each call guarded.

        Raises:
            ConfigError: every problem of the plugins' config sections, after all are built.
        """
        for impl in self.pm.hook.accelkit_compute_plugins.get_hookimpls():
            if impl.wrapper or impl.hookwrapper:  # an observer, called around each plugin's
                continue
            record = self.records.get(impl.plugin_name)
            if record is None:  # registered on the manager directly, not through us
                record = self.records[impl.plugin_name] = PluginRecord(impl.plugin_name)
            if record.status is not PluginStatus.LOADED:
                continue
            config = self.selection.config_for(record.name)
            limit = self.selection.call_timeout
            try:
                hook = hook_of(self.pm, "accelkit_compute_plugins", impl.plugin_name)
                produced = one_result(
                    call_blocking(
                        record.name,
                        "accelkit_compute_plugins",
                        limit,
                        functools.partial(hook, config=config),
                    )
                )
                plugins = [check_plugin_object(record, p) for p in produced or ()]
                for plugin in plugins:
                    self._note_api_version(record, plugin)
                for plugin in plugins:
                    specs = call_blocking(
                        record.name, "configurable_slots", limit, plugin.configurable_slots
                    )
                    check_slots(record, plugin, (s.name for s in specs), self._register)
                self._register.add(record, plugins)
            except PluginUnavailable as exc:
                record.mark(PluginStatus.UNAVAILABLE, str(exc))
                log.info("plugin %s unavailable: %s", record.name, exc)
                continue
            except ConfigError as exc:  # the host config's fault, not the plugin's
                self._config_problems(record, errors_of(exc))
                continue
            except Exception as exc:
                self._fail(record, exc, "build")
                continue
            if not self._config_problems(record, schema_problems(plugins, config)):
                record.plugins = plugins
                for plugin in plugins:
                    on_failure(plugin, functools.partial(self._overran, record))
                self._note(renamed_key_warnings(record.name, plugins, config, self.selection))
        raise_all(self.config_problems)

    def _note_api_version(self, record: PluginRecord, plugin: AbstractComputePlugin) -> None:
        """Refuse a plugin of another major API version (raises); warn of a newer minor one."""
        named = functools.partial(origin, record, plugin)  # metadata read for a message only
        if (warning := check_api_version(plugin, named)) is None:
            return
        record.error = record.error or warning  # `accelkit plugins` shows it beside "loaded"
        self._note([warning])

    def note(self, warning: str) -> None:
        """Keep one more warning for the operator (a runtime the node could not register)."""
        self._note([warning])

    def _note(self, warnings: Iterable[str]) -> None:
        """Keep warnings for the operator, each once (a distribution may have several plugins)."""
        for warning in warnings:
            if warning not in self.warnings:
                log.warning("%s", warning)
                self.warnings.append(warning)

    def _config_problems(self, record: PluginRecord, errors: list[ConfigError]) -> bool:
        placed = place_in_host_config(record.name, errors, self.selection)
        self.config_problems.extend(placed)
        if placed:
            record.error = f"invalid [plugins.config.{record.name}] section"
        return bool(placed)

    async def start(self) -> list[AbstractComputePlugin]:
        """Run ``init`` and discovery of every built plugin; return those that work."""
        for record in self.records.values():
            if record.status is PluginStatus.LOADED:
                await self._start_record(record)
        self.raise_if_strict()
        return self.plugins

    async def _start_record(self, record: PluginRecord) -> None:
        usable: list[AbstractComputePlugin] = []
        unavailable: list[str] = []
        name, limit = record.name, self.selection.call_timeout
        for plugin in record.plugins:
            self._started.append(plugin)
            try:
                await call_async(name, "init", limit, plugin.init)
                devices = await call_async(name, "list_devices", limit, plugin.discover)
                check_unique_ids(devices)
                slots = await call_sync(
                    name, "device_slots", limit, functools.partial(plugin.device_slots, devices)
                )
                check_slots(
                    record, plugin, (info.slot_name for info in slots.values()), self._register
                )
            except PluginUnavailable as exc:
                unavailable.append(f"{plugin.key}: {exc}" if len(record.plugins) > 1 else str(exc))
                await self._cleanup(plugin)
                continue
            except Exception as exc:
                for started in record.plugins:
                    await self._cleanup(started)
                record.plugins = []
                self._fail(record, exc, "start")
                return
            usable.append(plugin)
        record.plugins = usable
        if unavailable and not usable:
            record.mark(PluginStatus.UNAVAILABLE, "; ".join(unavailable))
            log.info("plugin %s unavailable: %s", record.name, record.error)
        elif unavailable:
            record.error = "; ".join(unavailable)

    def raise_if_strict(self) -> None:
        """In strict mode, any failed plugin is a start-up error."""
        if not self.selection.strict:
            return
        failed = [r for r in self.records.values() if r.status is PluginStatus.FAILED]
        if failed:
            details = "; ".join(f"{r.name}: {r.error}" for r in failed)
            msg = f"strict plugin loading: {len(failed)} plugin(s) failed ({details})"
            raise PluginLoadError(msg)

    async def close(self) -> None:
        """Clean every started plugin up, in reverse order; errors are logged, not raised."""
        while self._started:
            await self._cleanup(self._started.pop())
        for worker in self._observers.values():
            worker.stop()

    async def _cleanup(self, plugin: AbstractComputePlugin) -> None:
        if plugin in self._started:
            self._started.remove(plugin)
        if failure_of(plugin) is not None:  # its worker is stuck: nothing more is asked of it
            return
        try:
            await call_async(plugin.key, "cleanup", self.selection.call_timeout, plugin.cleanup)
        except Exception:
            log.warning("cleanup of plugin %r failed", plugin, exc_info=True)
        retire(plugin)

    def _overran(self, record: PluginRecord, message: str) -> None:
        """A call into one of the record's plugins overran: the plugin is failed for good."""
        if record.status is PluginStatus.LOADED:
            record.mark(PluginStatus.FAILED, message)
            log.warning("plugin %s failed: %s", record.name, message)

    def _fail(self, record: PluginRecord, exc: BaseException, stage: str = "register") -> None:
        record.mark(PluginStatus.FAILED, _describe(exc), traceback.format_exc())
        log.warning("plugin %s failed on %s: %s", record.name, stage, record.error)

    # -- views --------------------------------------------------------------------------------

    @property
    def plugins(self) -> list[AbstractComputePlugin]:
        """Every usable plugin, in the order they were loaded."""
        return [
            p for r in self.records.values() if r.status is PluginStatus.LOADED for p in r.plugins
        ]

    def record_of(self, plugin: AbstractComputePlugin) -> PluginRecord:
        for record in self.records.values():
            if plugin in record.plugins:
                return record
        msg = f"{plugin!r} was not loaded by this loader"
        raise LookupError(msg)

    def notify_workload_event(self, event: WorkloadEvent) -> None:
        """Tell every observer of workloads; one observer's error never reaches the others.

        Each observer runs on a worker of its own and has ``call-timeout`` seconds; one that
        hangs is logged, left behind and not told again in this process.
        """
        limit = self.selection.call_timeout
        for impl in self.pm.hook.accelkit_workload_event.get_hookimpls():
            if impl.wrapper or impl.hookwrapper:
                continue
            name = impl.plugin_name
            if (worker := self._observers.get(name)) is None or worker.stopped:
                worker = self._observers[name] = PluginWorker(f"{name}-observer")
            if worker.failure is not None:
                continue
            hook = hook_of(self.pm, "accelkit_workload_event", name)
            call = functools.partial(hook, event=event)
            try:
                worker.run_blocking(name, "accelkit_workload_event", limit, call)
            except Exception:
                log.warning("workload observer %s failed", name, exc_info=True)
