"""Reading a host configuration file into :class:`HostConfig`, collecting every problem.

The file is structured by the declarative schema of :mod:`accelkit.config.schema`; what a schema
cannot say about one value alone (an agent id given twice, per-agent resources outside MANUAL
mode) is checked here. Each problem is a :class:`ConfigError` naming the file, the key path, the
agent where there is one and the line where the key is written; :class:`ConfigErrors` carries
them all.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from accelkit.config.converter import KeyPath, format_key, structure
from accelkit.config.model import (
    AgentConfig,
    AgentResources,
    AllocationMode,
    BridgeConfig,
    HostConfig,
    ResourceConfig,
    default_state_dir,
)
from accelkit.config.reading import read_toml
from accelkit.config.schema import AgentEntry, HostFile, PluginsSection
from accelkit.errors import ConfigError, ConfigErrors
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.selection import PluginSelection
from accelkit.types import AgentId

__all__ = ["HostConfigDraft", "load_host_config", "parse_host_config", "read_host_config"]

#: plugin config keys with these endings are paths, resolved against the config file
_PATH_SUFFIXES = ("-file", "-dir", "-path")


@attrs.frozen(repr=False)
class HostConfigDraft:
    """A host config file as far as it could be read: for ``check``, which reports everything.

    ``plugins`` holds what could be read of ``[plugins]`` (at least each well-formed
    ``[plugins.config.NAME]`` table), so plugin sections can be checked even when other keys
    are wrong.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    config: HostConfig | None
    plugins: PluginSelection
    errors: tuple[ConfigError, ...]


def _resolve(path: Path, base: Path | None) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() or base is None else base / path


def _plugin_section(raw: Mapping[str, Any], base: Path | None) -> dict[str, Any]:
    return {
        key: str(_resolve(Path(value), base))
        if isinstance(value, str) and key.endswith(_PATH_SUFFIXES)
        else value
        for key, value in raw.items()
    }


def _agent_of(data: Any, path: KeyPath) -> str | None:
    """The id of the agent whose entry holds ``path``, when the file gives one."""
    if len(path) < 2 or path[0] != "agents" or not isinstance(path[1], int):
        return None
    agents = data.get("agents") if isinstance(data, Mapping) else None
    if not isinstance(agents, list) or not 0 <= path[1] < len(agents):
        return None
    entry = agents[path[1]]
    ident = entry.get("agent") if isinstance(entry, Mapping) else None
    agent_id = ident.get("id") if isinstance(ident, Mapping) else None
    return agent_id if isinstance(agent_id, str) and agent_id else None


def _mode_written(data: Mapping[str, Any]) -> AllocationMode:
    resource = data.get("resource")
    mode = resource.get("allocation-mode") if isinstance(resource, Mapping) else None
    if not isinstance(mode, str):
        return AllocationMode.SHARED
    try:
        return AllocationMode(mode)
    except ValueError:
        return AllocationMode.SHARED  # an unknown mode is reported on its own key


def _agent_problems(data: Mapping[str, Any]) -> Iterator[tuple[KeyPath, str]]:
    """What no single value shows: a duplicate id, per-agent resources outside MANUAL mode."""
    agents = data.get("agents")
    if not isinstance(agents, list):
        return
    mode = _mode_written(data)
    seen: set[str] = set()
    for index, entry in enumerate(agents):
        if not isinstance(entry, Mapping):
            continue
        if agent_id := _agent_of(data, ("agents", index)):
            if agent_id in seen:
                yield ("agents", index, "agent", "id"), f"duplicate agent id {agent_id!r}"
            seen.add(agent_id)
        resource = entry.get("resource")
        partition = [k for k in resource if k != "pids"] if isinstance(resource, Mapping) else []
        if (
            "resource" in entry
            and mode is not AllocationMode.MANUAL
            and (partition or not isinstance(resource, Mapping))
        ):
            msg = (
                "per-agent resources are for allocation-mode 'manual' only "
                f"(mode is {mode.value!r}); only 'pids' applies in every mode"
            )
            yield ("agents", index, "resource"), msg


def _problems(data: Any, file: str) -> tuple[HostFile | None, list[ConfigError]]:
    parsed, errors = structure(data, HostFile, file=file)
    if isinstance(data, Mapping):
        errors += [ConfigError(m, file=file, key=format_key(p)) for p, m in _agent_problems(data)]
    return parsed, [_with_agent(e, data) for e in errors]


def _with_agent(error: ConfigError, data: Any) -> ConfigError:
    if error.key is None or not error.key.startswith("agents["):
        return error
    index = int(error.key[len("agents[") : error.key.index("]")])
    if (agent := _agent_of(data, ("agents", index))) is None:
        return error
    return ConfigError(error.message, file=error.file, key=error.key, agent=agent, line=error.line)


def _selection(data: Any, parsed: HostFile | None, source: Path | None) -> PluginSelection:
    """``[plugins]`` as read; when the file has errors, as much of it as is well-formed."""
    base = source.parent if source else None
    name = str(source) if source else None
    plugins = data.get("plugins", {}) if isinstance(data, Mapping) else {}
    section = (
        parsed.plugins if parsed is not None else structure(plugins, PluginsSection, file=name)[0]
    )
    if section is None:  # keep at least the well-formed plugin tables
        tables = plugins.get("config") if isinstance(plugins, Mapping) else None
        configs = {
            str(n): _plugin_section(c, base)
            for n, c in (tables.items() if isinstance(tables, Mapping) else ())
            if isinstance(c, Mapping)
        }
        return PluginSelection(configs=configs, source=name)
    return PluginSelection(
        allowed=section.allowed,
        blocked=section.blocked,
        strict=section.strict,
        configs={n: _plugin_section(c, base) for n, c in section.config.items()},
        call_timeout=section.call_timeout,
        hook_timeout=section.hook_timeout,
        source=name,
    )


def _bridges(bridge: BridgeConfig, base: Path | None) -> BridgeConfig:
    """The bridges' paths resolved against the config file, like every path in it (a bare
    ``scontrol`` stays a command looked up on ``PATH``)."""
    k8s, slurm = bridge.k8s, bridge.slurm
    if k8s is not None:
        k8s = attrs.evolve(
            k8s,
            kubelet_dir=_resolve(k8s.kubelet_dir, base),
            pod_resources_socket=_resolve(k8s.pod_resources_socket, base),
        )
    if slurm is not None and "/" in slurm.scontrol:
        slurm = attrs.evolve(slurm, scontrol=str(_resolve(Path(slurm.scontrol), base)))
    return BridgeConfig(k8s=k8s, slurm=slurm)


def _agent(entry: AgentEntry) -> AgentConfig:
    section = entry.resource
    # an agent that gives only its pids has nothing to partition (any mode)
    partitioned = section is not None and (
        section.pids is None or section.cpu is not None or section.mem is not None
    )
    partitioned = partitioned or bool(section is not None and section.devices)
    resources = (
        AgentResources(section.cpu, section.mem, section.devices)
        if section is not None and partitioned
        else None
    )
    pids = None if section is None else section.pids
    return AgentConfig(AgentId(entry.agent.id), resources, pids)


def _host_config(parsed: HostFile, plugins: PluginSelection, source: Path | None) -> HostConfig:
    written = parsed.resource
    state_dir = (
        default_state_dir()
        if written.state_dir is None
        else _resolve(Path(written.state_dir), source.parent if source else None)
    )
    resource = ResourceConfig(
        allocation_mode=written.allocation_mode,
        reserved_cpu=written.reserved_cpu,
        reserved_mem=written.reserved_mem,
        memory_align_size=written.memory_align_size,
        affinity_policy=written.affinity_policy,
        state_dir=state_dir,
        numa_aware_split=written.numa_aware_split,
        pids=written.pids,
    )
    config = HostConfig(
        resource=resource,
        plugins=plugins,
        source=source,
        health=parsed.health,
        bridge=_bridges(parsed.bridge, source.parent if source else None),
    )
    if parsed.agents:
        config = attrs.evolve(config, agents=tuple(_agent(e) for e in parsed.agents))
    return config


def _draft(data: Any, source: Path | None, text: str | None) -> HostConfigDraft:
    file = str(source) if source else "<config>"
    parsed, errors = _problems(data, file)
    if text is not None and errors:  # the lines' scanner is imported where there are errors
        from accelkit.config.lines import with_lines

        errors = with_lines(errors, text)
    plugins = _selection(data, parsed, source)
    config = None if errors or parsed is None else _host_config(parsed, plugins, source)
    return HostConfigDraft(config, plugins, tuple(errors))


def _raise(errors: tuple[ConfigError, ...]) -> None:
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(list(errors))


def parse_host_config(data: Mapping[str, Any], source: Path | None = None) -> HostConfig:
    """Build a :class:`HostConfig` from parsed TOML; ``source`` anchors relative paths."""
    draft = _draft(data, source, None)
    _raise(draft.errors)
    assert draft.config is not None
    return draft.config


def read_host_config(path: str | Path) -> HostConfigDraft:
    """Read a host configuration file as far as it goes, keeping every problem.

    Raises:
        ConfigError: only when the file cannot be read or parsed as TOML at all.
    """
    source = Path(path).absolute()
    data, text = read_toml(source, "the host config")
    return _draft(data, source, text)


def load_host_config(path: str | Path) -> HostConfig:
    """Read and validate a host configuration file.

    Raises:
        ConfigError: for an unreadable, oversized, non-UTF-8 or malformed file (with the TOML
            line), or a bad value; :class:`ConfigErrors` when there are several problems.
    """
    draft = read_host_config(path)
    _raise(draft.errors)
    assert draft.config is not None
    return draft.config
