"""The version of the plugin API and how a plugin's declared version is judged (DESIGN §3).

A plugin class declares ``api_version``, the ``major.minor`` of the plugin API it was written
against. A different major version cannot work: the plugin is refused. A newer minor version
than this accelkit provides may rely on something missing: the plugin loads with a warning. An
older minor version is fine, since minor versions only add. Optional capabilities (health,
rediscovery) are detected by the methods a plugin overrides, never by this number.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import attrs

from accelkit.errors import PluginContractError
from accelkit.reprs import attrs_repr

__all__ = ["PLUGIN_API_VERSION", "ApiVersion", "check_api_version"]

#: the plugin API this accelkit provides; plugins declare the one they were written against
PLUGIN_API_VERSION = "2.0"

_VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")


@attrs.frozen(order=True, repr=False)
class ApiVersion:
    """A ``major.minor`` plugin API version."""

    __repr__ = attrs_repr

    major: int
    minor: int

    @classmethod
    def parse(cls, text: object) -> ApiVersion:
        """Read ``"2.0"``; anything else is a :class:`ValueError` saying what was expected."""
        match = _VERSION.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            msg = f"an API version is 'major.minor', such as {PLUGIN_API_VERSION!r}, not {text!r}"
            raise ValueError(msg)
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


CURRENT = ApiVersion.parse(PLUGIN_API_VERSION)


def check_api_version(plugin: object, who: str | Callable[[], str]) -> str | None:
    """Judge the ``api_version`` of ``plugin``'s class; ``who`` names it in messages (called
    only for a message, when naming it costs: a distribution's metadata read).

    Raises :class:`PluginContractError` when the version is malformed or of another major
    version; returns a warning when the plugin declares none or a newer minor version, and
    ``None`` when it is compatible.
    """
    declared = getattr(type(plugin), "api_version", None)
    if isinstance(declared, str) and declared == PLUGIN_API_VERSION:  # nothing to say
        return None
    if callable(who):
        who = who()
    if declared is None:
        return (
            f"{who} declares no api_version; assuming plugin API {PLUGIN_API_VERSION} "
            f"(set api_version = {PLUGIN_API_VERSION!r} on the class)"
        )
    try:
        version = ApiVersion.parse(declared)
    except ValueError as exc:
        msg = f"{who} has a malformed api_version: {exc}"
        raise PluginContractError(msg) from None
    if version.major != CURRENT.major:
        msg = (
            f"{who} was written for plugin API {version}, but this accelkit provides "
            f"plugin API {CURRENT}; install a release of the plugin written for "
            f"API {CURRENT.major}.x"
        )
        raise PluginContractError(msg)
    if version > CURRENT:
        return (
            f"{who} was written for plugin API {version}, newer than the {CURRENT} this "
            "accelkit provides; upgrade accelkit if the plugin relies on what is missing"
        )
    return None
