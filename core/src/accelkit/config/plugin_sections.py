"""Plugin sections of the host config, ``[plugins.config.NAME]``, read by each plugin's schema.

A plugin declares its section as a frozen attrs class (``config_schema`` on the plugin class,
see :class:`accelkit.plugin.AbstractComputePlugin`) and reads it with :func:`read_section`::

    @attrs.frozen
    class CPUConfig:
        overcommit_factor: Annotated[int, int_between(1, 10)] = 1

    class CPUPlugin(AbstractComputePlugin):
        config_schema = CPUConfig

        def __init__(self, config):
            super().__init__(config)
            self.settings = read_section(CPUConfig, self.config)

The loader checks every section before any plugin starts; a problem there is a
:class:`~accelkit.errors.ConfigError` of the host config file, with the full key path
(``plugins.config.cpu.overcomit-factor``) and line, in every command: never a plugin silently
left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from accelkit.config.converter import renamed_keys, structure
from accelkit.config.reading import read_toml
from accelkit.errors import ConfigError, ConfigErrors
from accelkit.selection import DISABLE_ENV, PluginSelection

__all__ = [
    "errors_of",
    "place_in_host_config",
    "raise_all",
    "read_section",
    "renamed_key_warnings",
    "schema_problems",
    "unmatched_names",
]

T = TypeVar("T")


def errors_of(exc: ConfigError) -> list[ConfigError]:
    """The single problems a :class:`ConfigError` (or :class:`ConfigErrors`) stands for."""
    return list(exc.errors) if isinstance(exc, ConfigErrors) else [exc]


def raise_all(errors: Sequence[ConfigError]) -> None:
    """Raise the one error, or all of them as :class:`ConfigErrors`; nothing when empty."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(list(errors))


def read_section(schema: type[T], config: Mapping[str, Any]) -> T:
    """Read a plugin's section with its schema; keys in errors are relative to the section.

    Raises:
        ConfigError: the problem (:class:`ConfigErrors` when there are several).
    """
    value, errors = structure(config, schema, file=None)
    raise_all(errors)
    assert value is not None  # no errors means a value was built
    return value


def schema_problems(plugins: Iterable[object], config: Mapping[str, Any]) -> list[ConfigError]:
    """Every problem of ``config`` under the schemas the plugins of one distribution declare."""
    schemas: set[type[Any]] = {
        schema for p in plugins if (schema := getattr(type(p), "config_schema", None)) is not None
    }
    return [e for schema in schemas for e in structure(config, schema, file=None)[1]]


def renamed_key_warnings(
    name: str, plugins: Iterable[object], config: Mapping[str, Any], selection: PluginSelection
) -> list[str]:
    """A warning for each renamed key (``Renamed`` in a plugin's schema) the section still uses."""
    schemas: set[type[Any]] = {
        schema for p in plugins if (schema := getattr(type(p), "config_schema", None)) is not None
    }
    file = selection.source or "<config>"
    found = dict.fromkeys(pair for schema in schemas for pair in renamed_keys(config, schema))
    return [
        f"{file}: [plugins.config.{name}] {old!r} is deprecated, it is now spelt {new!r} "
        "(the old key is still read)"
        for old, new in found
    ]


def place_in_host_config(
    name: str, errors: Iterable[ConfigError], selection: PluginSelection
) -> list[ConfigError]:
    """Name the host config file, the full key path and the line in errors of a plugin section.

    Errors that already name a file of their own (a mock device file) are kept as they are.
    """
    file = selection.source or "<config>"
    own: list[ConfigError] = []
    placed: list[ConfigError] = []
    for error in errors:
        if error.file is not None and error.file != file:
            own.append(error)
            continue
        key = f"plugins.config.{name}" + (f".{error.key}" if error.key else "")
        placed.append(ConfigError(error.message, file=file, key=key, line=error.line))
    if selection.source is not None and placed:
        from accelkit.config.lines import with_lines

        try:
            _data, text = read_toml(Path(selection.source), "the host config")
            placed = with_lines(placed, text)
        except ConfigError:
            pass  # lines are a help, not a requirement
    return [*placed, *own]


def unmatched_names(selection: PluginSelection, installed: Iterable[str]) -> list[str]:
    """Warnings for plugin names in the config or the environment that no plugin answers to."""
    known = set(installed)
    where = {
        "plugins.allowed": selection.allowed or frozenset(),
        "plugins.blocked": selection.blocked,
        DISABLE_ENV: selection.disabled,
        "[plugins.config.NAME]": frozenset(selection.configs),
    }
    return [
        f"{origin} names {name!r}, which matches no installed plugin "
        f"(installed: {', '.join(sorted(known)) or 'none'})"
        for origin, names in where.items()
        for name in sorted(set(names) - known)
    ]
