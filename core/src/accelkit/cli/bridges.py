"""accelkit's own bridges, registered through the hook a third party uses, and the register.

Every plugin manager that collects bridges registers this module (as ``accelkit-bridges``), so
the built-ins and a distribution's bridges are found, checked and listed the same way. Each
built-in's command module is imported only when that command runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Collection, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, ClassVar

import click

from accelkit.bridge import Bridge
from accelkit.hookspecs import hookimpl

if TYPE_CHECKING:
    import pluggy

    from accelkit.runtime.class_register import Warn

__all__ = [
    "NAME",
    "DraDriverBridge",
    "K8sDevicePluginBridge",
    "SlurmBridge",
    "accelkit_bridges",
    "bridge_classes",
    "builtin_bridges",
    "registered_bridges",
]

#: the name this module is registered under
NAME = "accelkit-bridges"


class _BuiltinBridge(Bridge):
    """A bridge of accelkit's own: its command is ``attribute`` of the module ``module``,
    imported when it runs."""

    module: ClassVar[str]
    attribute: ClassVar[str]

    @classmethod
    def command(cls) -> click.Command:
        command: click.Command = getattr(importlib.import_module(cls.module), cls.attribute)
        return command


class K8sDevicePluginBridge(_BuiltinBridge):
    name = "k8s-device-plugin"
    summary = "Kubernetes device plugin (kubelet v1beta1)"
    module, attribute = "accelkit.cli.k8s_cmd", "k8s_device_plugin"


class DraDriverBridge(_BuiltinBridge):
    name = "dra-driver"
    summary = "Kubernetes DRA driver (resource.k8s.io/v1)"
    module, attribute = "accelkit.cli.dra_cmd", "dra_driver"


class SlurmBridge(_BuiltinBridge):
    name = "slurm"
    summary = "Slurm gres.conf, prolog and epilog"
    module, attribute = "accelkit.cli.slurm_cmd", "slurm"


@hookimpl
def accelkit_bridges() -> Sequence[type[Bridge]]:
    """The Kubernetes device plugin, the DRA driver and the Slurm bridge."""
    return [K8sDevicePluginBridge, DraDriverBridge, SlurmBridge]


def bridge_classes(
    pm: pluggy.PluginManager,
    *,
    reserved: Collection[str] = (),
    timeout: Decimal | float | None = None,
    warn: Warn | None = None,
) -> dict[str, type[Bridge]]:
    """Every registered bridge class by name, the built-ins first; one whose name is taken
    (by a bridge, or by one of ``reserved``, accelkit's own commands) is named in ``warn``
    (the log by default)."""
    from accelkit.runtime.class_register import DEFAULT_TIMEOUT, collect_classes, log_warning

    if pm.get_plugin(NAME) is None:
        pm.register(sys.modules[__name__], name=NAME)
    return collect_classes(
        pm, "accelkit_bridges", Bridge, kind="bridge", builtin=NAME, reserved=reserved,
        timeout=DEFAULT_TIMEOUT if timeout is None else timeout, warn=warn or log_warning,
    )  # fmt: skip


def builtin_bridges() -> dict[str, type[Bridge]]:
    """accelkit's own bridges alone, as their hook returns them: nothing else is imported to
    find them, so a bridge's command (a Slurm prolog, say) starts as fast as any other."""
    return {cls.name: cls for cls in accelkit_bridges()}


def registered_bridges(
    reserved: Collection[str] = (), warn: Warn | None = None
) -> dict[str, type[Bridge]]:
    """Every bridge of the installed distributions (those ``ACCELKIT_DISABLE_PLUGINS`` leaves
    in), the built-ins first."""
    from accelkit.discovery import PluginLoader
    from accelkit.selection import PluginSelection

    loader = PluginLoader(PluginSelection().with_environment())
    loader.load_entry_points()
    return bridge_classes(
        loader.pm, reserved=reserved, timeout=loader.selection.call_timeout, warn=warn
    )
