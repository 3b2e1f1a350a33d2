"""Which host config a command reads: the same search for every command, unit and bridge.

``--config FILE``, else ``$ACCELKIT_CONFIG``, else ``/etc/accelkit/host.toml`` when it exists,
else the built-in defaults (DESIGN §18, "§7 Config search"). An empty ``--config`` or
``ACCELKIT_CONFIG`` is an error, never the working directory or a silent fallback.

``ACCELKIT_SYSTEM_CONFIG`` moves the system-wide file (as ``GIT_CONFIG_SYSTEM`` does for git):
a test suite points it at a file that does not exist, so that no test reads the machine's
``/etc/accelkit``; an unusual layout can point it elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import attrs

from accelkit.errors import ConfigError
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr

__all__ = ["CONFIG_ENV", "SYSTEM_CONFIG", "SYSTEM_CONFIG_ENV", "ConfigChoice", "find_host_config"]

CONFIG_ENV = "ACCELKIT_CONFIG"
SYSTEM_CONFIG_ENV = "ACCELKIT_SYSTEM_CONFIG"
SYSTEM_CONFIG = Path("/etc/accelkit/host.toml")


@attrs.frozen(repr=False)
class ConfigChoice:
    """The file to read (``None``: the built-in defaults) and what chose it."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    path: Path | None
    #: ``--config``, ``ACCELKIT_CONFIG``, ``the system config`` or ``no config file``
    found_by: str

    def checked(self) -> Path | None:
        """``path``, where ``ACCELKIT_CONFIG`` named a regular file; else an error naming
        the variable (the file's own errors name only the file, set by whom unsaid)."""
        if self.path is not None and self.found_by == CONFIG_ENV and not self.path.is_file():
            if self.path.is_dir():
                what = "a directory"
            elif os.path.lexists(self.path):
                what = "no regular file"
            else:
                what = "a file that does not exist"
            msg = f"{CONFIG_ENV} names {what}: {str(self.path)!r}"
            raise ConfigError(msg)
        return self.path


def _named(value: str, where: str) -> Path:
    if not value.strip():
        msg = f"{where} is empty: name a host config file, or leave it out"
        raise ConfigError(msg, key=where)
    return Path(value).expanduser().absolute()


def find_host_config(
    explicit: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> ConfigChoice:
    """The host config a command reads (see the module docstring).

    Raises:
        ConfigError: ``explicit``, ``ACCELKIT_CONFIG`` or ``ACCELKIT_SYSTEM_CONFIG`` is empty.
    """
    env = os.environ if environ is None else environ
    if explicit is not None:
        return ConfigChoice(_named(str(explicit), "--config"), "--config")
    if (named := env.get(CONFIG_ENV)) is not None:
        return ConfigChoice(_named(named, CONFIG_ENV), CONFIG_ENV)
    system = SYSTEM_CONFIG
    if (moved := env.get(SYSTEM_CONFIG_ENV)) is not None:
        system = _named(moved, SYSTEM_CONFIG_ENV)
    if os.path.lexists(system):  # a broken link or unreadable file is an error, not absent
        return ConfigChoice(system, "the system config")
    searched = f"no --config, no {CONFIG_ENV}, no {system}"
    return ConfigChoice(None, searched)
