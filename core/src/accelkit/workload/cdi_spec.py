"""The CDI spec of one agent's devices, from the plugins' own hooks.

Each accelerator device of the agent (every plugin but ``cpu`` and ``mem``, whose cpusets and
limits CDI cannot express) becomes a CDI device named ``<plugin>-<device id>``: its plugin's hook
runs ``pre_create`` for an allocation of that whole device, and the config it returns becomes the
device's ``containerEdits``. A device named ``all`` carries the merged edits of every such device
at once. Each hook whose ``pre_create`` ran gets its ``post_terminate``; nothing is booked.

Characters a CDI name cannot hold become ``-``. When two devices end up with the same name
(``gpu 0`` and ``gpu-0``), the later one in the plugins' listing order gets ``-2`` (``-3`` …)
appended, a suffix no other device's name uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from accelkit.plugin import AbstractAgentContext
from accelkit.types import AgentId, DeviceAllocation, DeviceId, DeviceName, Workload
from accelkit.workload.lifecycle import HookTarget, WorkloadLifecycle
from accelkit.workload.render.cdi import cdi_device_name, render_cdi_spec

#: plugins left out of CDI specs: what they configure is not a container edit
NOT_CDI = frozenset({"cpu", "mem"})
#: the device carrying every device's edits at once
ALL = "all"
_CLASS_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def default_cdi_kind(agent_id: str) -> str:
    """``accelkit.io/<agent>``, the agent id made a valid CDI class."""
    klass = _CLASS_UNSAFE.sub("-", agent_id).strip("-_.") or "agent"
    return f"accelkit.io/{klass}"


def _whole(ctx: AbstractAgentContext, device_ids: list[DeviceId]) -> DeviceAllocation:
    slots = ctx.alloc_map.device_slots
    alloc: dict[Any, dict[DeviceId, Any]] = {}
    for device_id in device_ids:
        info = slots[device_id]
        alloc.setdefault(info.slot_name, {})[device_id] = info.amount
    return alloc


async def _edits(agent_id: AgentId, workload_id: str, targets: list[HookTarget]) -> Any:
    driver = WorkloadLifecycle(agent_id, Workload.container(workload_id), targets, release=list)
    config = await driver.prepare()
    await driver.terminate()
    return config


async def agent_cdi_spec(
    agent_id: AgentId, contexts: Mapping[DeviceName, AbstractAgentContext], kind: str
) -> dict[str, Any]:
    """The CDI spec (a JSON object) of the agent's accelerator devices."""
    listed: list[tuple[DeviceName, AbstractAgentContext, list[DeviceId]]] = []
    for key, ctx in contexts.items():
        if key in NOT_CDI:
            continue
        ids = [d.device_id for d in ctx.list_devices() if d.device_id in ctx.alloc_map.device_slots]
        if ids:
            listed.append((key, ctx, ids))
    names = iter(unique_names([cdi_device_name(key, i) for key, _ctx, ids in listed for i in ids]))
    devices = []
    every: list[HookTarget] = []
    for key, ctx, ids in listed:
        for device_id in ids:
            target = HookTarget(key, ctx, _whole(ctx, [device_id]))
            name = next(names)
            devices.append((name, await _edits(agent_id, f"cdi-{name}", [target])))
        every.append(HookTarget(key, ctx, _whole(ctx, ids)))
    if every:
        devices.append((ALL, await _edits(agent_id, "cdi-all", every)))
    return render_cdi_spec(kind, devices)


def unique_names(names: Sequence[str]) -> list[str]:
    """``names`` made unique in order: a repeated name gets the first free ``-2``, ``-3`` …

    A suffixed name never takes a name given in ``names`` or :data:`ALL`, so every device keeps
    the same name however the others are suffixed.
    """
    taken = {ALL, *names}
    seen: set[str] = set()
    result = []
    for name in names:
        unique = name
        if name in seen or name == ALL:
            n = 2
            while (unique := f"{name}-{n}") in taken:
                n += 1
            taken.add(unique)
        seen.add(name)
        result.append(unique)
    return result
