"""``--runtime NAME``: a choice among the runtimes registered on this machine (DESIGN §14, §18).

The built-in runtimes that start workloads are accepted at once; any other name is checked
against what the installed distributions register, and a wrong one is refused listing them
all, so the choice offers what is installed rather than a fixed list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from accelkit.discovery import PluginLoader
from accelkit.runtime.registry import launching_names, runtime_classes
from accelkit.selection import PluginSelection

__all__ = ["BUILTIN_LAUNCHING", "RuntimeChoice", "registered_launching_runtimes"]

if TYPE_CHECKING:  # generic from click 8.2 on; accelkit supports 8.1
    _ParamType = click.ParamType[str, Any]
else:
    _ParamType = click.ParamType

#: accelkit's own runtimes that start workloads (the others only track them)
BUILTIN_LAUNCHING = ("process", "docker")


def registered_launching_runtimes() -> list[str]:
    """The names ``accelkit run --runtime`` accepts: every registered runtime that starts
    workloads, the built-ins first, from the installed distributions."""
    loader = PluginLoader(PluginSelection().with_environment())
    loader.load_entry_points()
    return launching_names(runtime_classes(loader.pm, timeout=loader.selection.call_timeout))


class RuntimeChoice(_ParamType):
    """A runtime name; a name no installed distribution registers is a usage error."""

    name = "runtime"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "NAME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if value in BUILTIN_LAUNCHING:  # no need to import every plugin to know these
            return str(value)
        names = registered_launching_runtimes()
        if value not in names:
            self.fail(f"{value!r} is not a registered runtime (registered: {', '.join(names)})")
        return str(value)
