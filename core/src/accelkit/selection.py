"""Which installed plugins to load: allow and block lists, strict mode, per-plugin config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import attrs

from accelkit.errors import ConfigError
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr

__all__ = ["DISABLE_ENV", "STRICT_ENV", "PluginSelection"]

DISABLE_ENV = "ACCELKIT_DISABLE_PLUGINS"
STRICT_ENV = "ACCELKIT_STRICT_PLUGINS"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _flag(environ: Mapping[str, str], name: str) -> bool | None:
    """A boolean environment variable: ``None`` when unset.

    Raises:
        ConfigError: set to anything but 1/0, true/false, yes/no or on/off (an empty value too).
    """
    if name not in environ:
        return None
    value = environ[name].strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    msg = f"{name}={environ[name]!r}: expected 1 or 0 (true/false, yes/no, on/off)"
    raise ConfigError(msg, key=name)


def _names(value: Any) -> frozenset[str]:
    return frozenset(str(v) for v in value)


def _optional_names(value: Any) -> frozenset[str] | None:
    return None if value is None else _names(value)


def _configs(value: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
    return {str(k): dict(v) for k, v in value.items()}


@attrs.frozen(repr=False)
class PluginSelection:
    """The ``[plugins]`` section of a host config, by entry-point name.

    ``allowed`` of ``None`` allows every installed plugin; ``blocked`` and ``disabled`` (from
    ``ACCELKIT_DISABLE_PLUGINS``) always win over ``allowed``.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    allowed: frozenset[str] | None = attrs.field(default=None, converter=_optional_names)
    blocked: frozenset[str] = attrs.field(default=frozenset(), converter=_names)
    disabled: frozenset[str] = attrs.field(default=frozenset(), converter=_names)
    strict: bool = False
    configs: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict, converter=_configs)
    #: seconds a call into a plugin may take (``call-timeout``, DESIGN §4)
    call_timeout: Decimal = Decimal(30)
    #: seconds a lifecycle hook may take (``hook-timeout``)
    hook_timeout: Decimal = Decimal(60)
    #: the host config file these settings came from, named in errors about plugin sections
    source: str | None = None

    def with_environment(self, environ: Mapping[str, str] | None = None) -> PluginSelection:
        """Apply ``ACCELKIT_DISABLE_PLUGINS=a,b`` and ``ACCELKIT_STRICT_PLUGINS=1``.

        Raises:
            ConfigError: ``ACCELKIT_STRICT_PLUGINS`` is not a boolean, or
                ``ACCELKIT_DISABLE_PLUGINS`` is set but empty.
        """
        env = os.environ if environ is None else environ
        if DISABLE_ENV in env and not env[DISABLE_ENV].strip():
            msg = f"{DISABLE_ENV} is set but empty: name plugins (a,b), or unset it"
            raise ConfigError(msg, key=DISABLE_ENV)
        disabled = {n.strip() for n in env.get(DISABLE_ENV, "").split(",") if n.strip()}
        # read even where the config is strict already: a value that is no boolean is an error
        strict = bool(_flag(env, STRICT_ENV)) or self.strict
        return attrs.evolve(self, disabled=self.disabled | disabled, strict=strict)

    def block_reason(self, name: str) -> str | None:
        """Why the plugin registered as ``name`` is not to be loaded, or ``None``."""
        if name in self.disabled:
            return f"disabled by {DISABLE_ENV}"
        if name in self.blocked:
            return "listed in plugins.blocked"
        if self.allowed is not None and name not in self.allowed:
            return "not listed in plugins.allowed"
        return None

    def config_for(self, name: str) -> Mapping[str, Any]:
        """The ``[plugins.config.NAME]`` section, empty when absent."""
        return self.configs.get(name, {})
