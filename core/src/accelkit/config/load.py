"""Reading a host configuration file into :class:`HostConfig`, collecting every problem.

Each problem is a :class:`ConfigError` naming the file, the key and, where there is one, the
agent; when there are several, :class:`ConfigErrors` carries them all.
"""

from __future__ import annotations

import enum
import re
import tomllib
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, TypeVar

from accelkit.config.model import (
    AgentConfig,
    AgentResources,
    AllocationMode,
    HostConfig,
    ResourceConfig,
    default_state_dir,
)
from accelkit.errors import ConfigError, ConfigErrors
from accelkit.selection import PluginSelection
from accelkit.sizes import parse_binary_size
from accelkit.types import AgentId

_TOP_KEYS = frozenset({"resource", "plugins", "agents"})
_RESOURCE_KEYS = frozenset(
    {
        "allocation-mode",
        "reserved-cpu",
        "reserved-mem",
        "memory-align-size",
        "affinity-policy",
        "state-dir",
    }
)
_PLUGINS_KEYS = frozenset(
    {"allowed", "blocked", "strict", "config", "call-timeout", "hook-timeout"}
)
_AGENT_KEYS = frozenset({"agent", "resource"})
_AGENT_ID_KEYS = frozenset({"id"})
_AGENT_RESOURCE_KEYS = frozenset({"cpu", "mem", "devices"})
#: plugin config keys with these endings are paths, resolved against the config file
_PATH_SUFFIXES = ("-file", "-dir", "-path")

_E = TypeVar("_E", bound=enum.StrEnum)
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class _Problems:
    """Collects problems so one pass reports all of them."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[ConfigError] = []

    def add(self, key: str, message: str, agent: str | None = None) -> None:
        self.errors.append(ConfigError(message, file=self.source, key=key, agent=agent))

    def raise_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigErrors(self.errors)


def _table(
    problems: _Problems, value: Any, key: str, allowed: frozenset[str], agent: str | None = None
) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        problems.add(key, f"expected a table, got {type(value).__name__}", agent)
        return {}
    for unknown in sorted(set(value) - allowed):
        name = f"{key}.{unknown}" if key else unknown
        problems.add(name, f"unknown key (allowed: {', '.join(sorted(allowed))})", agent)
    return value


def _size(problems: _Problems, value: Any, key: str, agent: str | None = None) -> int | None:
    try:
        return parse_binary_size(value)
    except ValueError as exc:
        problems.add(key, str(exc), agent)
        return None


def _names(problems: _Problems, value: Any, key: str) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.add(key, f"expected a list of plugin names, got {value!r}")
        return None
    return tuple(value)


def _enum_value(
    problems: _Problems, table: Mapping[str, Any], key: str, *, default: _E, what: str
) -> _E:
    if key not in table:
        return default
    try:
        return type(default)(table[key])
    except ValueError:
        choices = ", ".join(repr(m.value) for m in type(default))
        problems.add(f"resource.{key}", f"unknown {what} {table[key]!r} (use {choices})")
        return default


def _reserved_cpu(
    problems: _Problems, table: Mapping[str, Any], default: int
) -> int | tuple[str, ...]:
    value = table.get("reserved-cpu", default)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    problems.add(
        "resource.reserved-cpu",
        f'expected a non-negative count or a list of core ids like ["0"], got {value!r}',
    )
    return default


def _resource_size(problems: _Problems, table: Mapping[str, Any], key: str, default: int) -> int:
    if key not in table:
        return default
    parsed = _size(problems, table[key], f"resource.{key}")
    return default if parsed is None else parsed


def _resource(problems: _Problems, raw: Any, base: Path | None) -> ResourceConfig:
    table = _table(problems, raw, "resource", _RESOURCE_KEYS)
    defaults = ResourceConfig()
    mode = _enum_value(
        problems, table, "allocation-mode", default=defaults.allocation_mode, what="mode"
    )
    policy = _enum_value(
        problems, table, "affinity-policy", default=defaults.affinity_policy, what="policy"
    )
    align = _resource_size(problems, table, "memory-align-size", defaults.memory_align_size)
    if align == 0:
        problems.add("resource.memory-align-size", "must be greater than zero")
        align = defaults.memory_align_size
    state_dir = default_state_dir()
    if "state-dir" in table:
        value = table["state-dir"]
        if isinstance(value, str) and value:
            state_dir = _resolve(Path(value), base)
        else:
            problems.add("resource.state-dir", f"expected a directory path, got {value!r}")
    return ResourceConfig(
        allocation_mode=mode,
        reserved_cpu=_reserved_cpu(problems, table, 1),
        reserved_mem=_resource_size(problems, table, "reserved-mem", defaults.reserved_mem),
        memory_align_size=align,
        affinity_policy=policy,
        state_dir=state_dir,
    )


def _resolve(path: Path, base: Path | None) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() or base is None else base / path


def _plugin_config(raw: Mapping[str, Any], base: Path | None) -> dict[str, Any]:
    config = dict(raw)
    for key, value in raw.items():
        if isinstance(value, str) and key.endswith(_PATH_SUFFIXES):
            config[key] = str(_resolve(Path(value), base))
    return config


def _plugins(problems: _Problems, raw: Any, base: Path | None) -> PluginSelection:
    table = _table(problems, raw, "plugins", _PLUGINS_KEYS)
    allowed = _names(problems, table["allowed"], "plugins.allowed") if "allowed" in table else None
    blocked = _names(problems, table.get("blocked", []), "plugins.blocked") or ()
    strict = table.get("strict", False)
    if not isinstance(strict, bool):
        problems.add("plugins.strict", f"expected true or false, got {strict!r}")
        strict = False
    configs: dict[str, dict[str, Any]] = {}
    raw_configs = table.get("config", {})
    if not isinstance(raw_configs, Mapping):
        problems.add("plugins.config", "expected tables [plugins.config.NAME]")
        raw_configs = {}
    for name, section in raw_configs.items():
        if not isinstance(section, Mapping):
            problems.add(f"plugins.config.{name}", "expected a table")
            continue
        configs[name] = _plugin_config(section, base)
    defaults = PluginSelection()
    return PluginSelection(
        allowed=allowed,
        blocked=blocked,
        strict=strict,
        configs=configs,
        call_timeout=_seconds(problems, table, "call-timeout", defaults.call_timeout),
        hook_timeout=_seconds(problems, table, "hook-timeout", defaults.hook_timeout),
    )


#: a time limit beyond a day is a typo, not a wish
_MAX_SECONDS = Decimal(86400)


def _seconds(problems: _Problems, table: Mapping[str, Any], key: str, default: Decimal) -> Decimal:
    """A positive number of seconds (``plugins.call-timeout`` = 30 or "2.5")."""
    if key not in table:
        return default
    value = table[key]
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise InvalidOperation
        seconds = Decimal(str(value))
    except InvalidOperation:
        problems.add(f"plugins.{key}", f"expected a number of seconds, got {value!r}")
        return default
    if not seconds.is_finite() or not 0 < seconds <= _MAX_SECONDS:
        problems.add(f"plugins.{key}", f"expected seconds between 0 and 86400, got {value!r}")
        return default
    return seconds


def _agent_resources(problems: _Problems, raw: Any, key: str, agent: str) -> AgentResources:
    table = _table(problems, raw, key, _AGENT_RESOURCE_KEYS, agent)
    cpu: tuple[str, ...] | None = None
    if "cpu" in table:
        value = table["cpu"]
        if isinstance(value, int) and not isinstance(value, bool):
            problems.add(
                f"{key}.cpu",
                f"Old integer format detected for 'cpu' ({value}); list the core ids instead, "
                'for example cpu = ["0", "1", "2", "3"]',
                agent,
            )
        elif isinstance(value, list) and all(isinstance(v, str | int) for v in value):
            cpu = tuple(str(v) for v in value)
            if not cpu:
                problems.add(f"{key}.cpu", "an agent needs at least one cpu core", agent)
        else:
            problems.add(f"{key}.cpu", f"expected a list of core ids, got {value!r}", agent)
    mem = _size(problems, table["mem"], f"{key}.mem", agent) if "mem" in table else None
    devices: dict[str, tuple[str, ...]] = {}
    raw_devices = table.get("devices", {})
    if not isinstance(raw_devices, Mapping):
        problems.add(f"{key}.devices", 'expected a table such as { cuda = ["cuda0"] }', agent)
        raw_devices = {}
    for name, ids in raw_devices.items():
        where = f"{key}.devices.{name}"
        if name in ("cpu", "mem"):
            problems.add(
                where,
                f"give {name!r} as its own key under [agents.resource], not in devices",
                agent,
            )
        elif (
            "." in name
            or not isinstance(ids, list)
            or any(isinstance(i, int | float) and not isinstance(i, bool) for i in ids)
        ):
            device_name = name.split(".", 1)[0]
            problems.add(
                where,
                "Old slot-based format detected; give device ids per device name instead, "
                f'for example devices = {{ {device_name} = ["{device_name}0", "{device_name}1"] }}',
                agent,
            )
        elif not all(isinstance(i, str) and i for i in ids):
            problems.add(where, f"expected a list of device ids, got {ids!r}", agent)
        else:
            devices[name] = tuple(ids)
    return AgentResources(cpu, mem, devices)


def _agents(problems: _Problems, raw: Any, mode: AllocationMode) -> tuple[AgentConfig, ...]:
    if not isinstance(raw, list):
        problems.add("agents", "expected an array of tables [[agents]]")
        return ()
    agents: list[AgentConfig] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw):
        where = f"agents[{index}]"
        table = _table(problems, entry, where, _AGENT_KEYS)
        ident = _table(problems, table.get("agent", {}), f"{where}.agent", _AGENT_ID_KEYS)
        agent_id = ident.get("id")
        if not isinstance(agent_id, str) or not agent_id:
            problems.add(f"{where}.agent.id", "every agent needs a non-empty string id")
            continue
        if not _AGENT_ID.fullmatch(agent_id):
            # ids name ledger files, metric labels and CDI kinds: keep them plain
            msg = (
                f"agent id {agent_id!r} must start with a letter or digit and hold only "
                "letters, digits, '.', '_' and '-' (at most 64 characters)"
            )
            problems.add(f"{where}.agent.id", msg, agent_id)
            continue
        if agent_id in seen:
            problems.add(f"{where}.agent.id", f"duplicate agent id {agent_id!r}", agent_id)
        seen.add(agent_id)
        resources = None
        if "resource" in table:
            resources = _agent_resources(problems, table["resource"], f"{where}.resource", agent_id)
            if mode is not AllocationMode.MANUAL:
                problems.add(
                    f"{where}.resource",
                    "per-agent resources are for allocation-mode 'manual' only "
                    f"(mode is {mode.value!r})",
                    agent_id,
                )
        agents.append(AgentConfig(AgentId(agent_id), resources))
    return tuple(agents)


def parse_host_config(data: Mapping[str, Any], source: Path | None = None) -> HostConfig:
    """Build a :class:`HostConfig` from parsed TOML; ``source`` anchors relative paths."""
    problems = _Problems(str(source) if source else "<config>")
    base = source.parent if source else None
    _table(problems, data, "", _TOP_KEYS)
    resource = _resource(problems, data.get("resource", {}), base)
    plugins = _plugins(problems, data.get("plugins", {}), base)
    agents = _agents(problems, data.get("agents", []), resource.allocation_mode)
    problems.raise_any()
    if not agents:
        return HostConfig(resource=resource, plugins=plugins, source=source)
    return HostConfig(resource=resource, plugins=plugins, agents=agents, source=source)


def load_host_config(path: str | Path) -> HostConfig:
    """Read and validate a host configuration file.

    Raises:
        ConfigError: for an unreadable or malformed file (with the TOML line), or a bad value;
            :class:`ConfigErrors` when there are several problems.
    """
    source = Path(path).absolute()
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"cannot read the host config: {exc.strerror or exc}"
        raise ConfigError(msg, file=str(source)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"malformed TOML: {exc}"
        raise ConfigError(msg, file=str(source)) from None
    return parse_host_config(data, source)
