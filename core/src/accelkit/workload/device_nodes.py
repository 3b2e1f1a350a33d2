"""The accelerator device nodes of a node, and those one allocation grants, as plugins name them.

A plugin whose devices are device nodes says which through its optional ``device_nodes(devices)``
method: asked once over all of its devices (every node of the node) and, where those have any,
once over the devices the workload was given (the nodes it may open), on the plugin's own worker
under the time limit, every plugin at once. The process runtime denies the difference. Nothing
else of the plugin runs: no lifecycle hook is asked about a workload that does not exist (a hook
that blocks would stall every run).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from accelkit.calls import call_sync
from accelkit.errors import PluginContractError
from accelkit.plugin import AbstractComputePlugin
from accelkit.types import ComputeDevice, DeviceAllocation, DeviceName

__all__ = ["denied_device_nodes", "device_nodes_of", "names_device_nodes"]


def names_device_nodes(plugin: AbstractComputePlugin) -> bool:
    """Whether the plugin overrides ``device_nodes`` (the default names none)."""
    method = getattr(type(plugin), "device_nodes", None)
    return method is not None and method is not AbstractComputePlugin.device_nodes


def _granted(plugin: AbstractComputePlugin, alloc: DeviceAllocation) -> tuple[ComputeDevice, ...]:
    wanted = {d for per_device in alloc.values() for d, amount in per_device.items() if amount > 0}
    return tuple(d for d in plugin.devices if d.device_id in wanted)


def _paths(found: object) -> list[str]:
    if isinstance(found, str | bytes) or not isinstance(found, Iterable):
        msg = f"device_nodes returned {type(found).__name__}, not a sequence of paths"
        raise PluginContractError(msg)
    paths = list(found)
    if bad := [p for p in paths if not isinstance(p, str) or not p.startswith("/")]:
        msg = f"device_nodes returned {bad[0]!r}, not an absolute path"
        raise PluginContractError(msg)
    return list(dict.fromkeys(paths))


async def device_nodes_of(
    key: DeviceName,
    plugin: AbstractComputePlugin,
    devices: Sequence[ComputeDevice],
    timeout: Decimal,
) -> list[str]:
    """The device nodes a workload given ``devices`` may open, as the plugin names them, each
    once and in its order; none for no device or a plugin without ``device_nodes``.

    Raises:
        PluginContractError: the plugin answered something other than absolute paths.
        PluginTimeout: it did not answer within ``timeout`` seconds.
    """
    if not devices or not names_device_nodes(plugin):
        return []
    ask = functools.partial(plugin.device_nodes, devices)
    return _paths(await call_sync(key, "device_nodes", timeout, ask))


async def denied_device_nodes(
    plugins: Mapping[DeviceName, AbstractComputePlugin],
    allocation: Mapping[DeviceName, DeviceAllocation],
    timeout: Decimal,
) -> tuple[frozenset[str], list[str]]:
    """The nodes of the node's devices that ``allocation`` does not grant, and problems.

    A plugin that cannot say (it raises, overruns ``timeout`` or answers something else than
    paths) is left out, with a line saying so: its nodes are then not denied.
    """
    asked = [(key, plugin) for key, plugin in plugins.items() if names_device_nodes(plugin)]
    # each plugin on its own worker: all of them at once
    answers = await asyncio.gather(
        *(_denied_by(key, plugin, allocation.get(key, {}), timeout) for key, plugin in asked)
    )
    denied = frozenset(path for nodes, _ in answers for path in nodes)
    return denied, [problem for _, problem in answers if problem]


async def _denied_by(
    key: DeviceName, plugin: AbstractComputePlugin, alloc: DeviceAllocation, timeout: Decimal
) -> tuple[set[str], str]:
    """The nodes of ``plugin``'s devices ``alloc`` does not grant, or none and the problem."""
    try:
        every = await device_nodes_of(key, plugin, plugin.devices, timeout)
        # none to deny when its devices have none: the grant's nodes need no asking
        granted = (
            await device_nodes_of(key, plugin, _granted(plugin, alloc), timeout) if every else []
        )
    except Exception as exc:  # a plugin's failure must not stop the run
        return set(), f"cannot tell the device nodes of plugin {key!r}: {exc}"
    return set(every) - set(granted), ""
