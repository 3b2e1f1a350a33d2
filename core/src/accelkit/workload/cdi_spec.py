"""The CDI spec of one agent's devices, from the plugins' own hooks.

Each accelerator device of the agent (every plugin but ``cpu`` and ``mem``, whose cpusets and
limits CDI cannot express) becomes a CDI device named ``<plugin>-<device id>``: its plugin's hook
runs ``pre_create`` for an allocation of that whole device, and the config it returns becomes the
device's ``containerEdits``. A device named ``all`` carries the merged edits of every such device
at once. Each hook whose ``pre_create`` ran gets its ``post_terminate``; nothing is booked.

CDI runtimes apply the edits of every requested device in turn and an environment variable set
twice keeps the **last** value, while device nodes and mounts add up. So a variable whose value
differs between the devices (``CUDA_VISIBLE_DEVICES=0`` and ``=1``) is left out of the single
devices and kept in ``all`` only, with the combined value; variables every device sets alike stay
on each device.

Every single device also sets a variable naming only itself, ``ACCELKIT_CDI_<NAME>=<name>``
(the device name in capitals, other characters ``_``; ``cuda-cuda0`` sets
``ACCELKIT_CDI_CUDA_CUDA0=cuda-cuda0``), and ``all`` sets every device's. So each device is
listed whatever the count, also one of a plugin that configures nothing but environment
variables (the CDI library refuses a device without edits), and the container can tell which
devices it was given. A runtime asked for several single devices (``--device kind=cuda-cuda0
--device kind=cuda-cuda1``) gives the container the device nodes and mounts of each, their own
variables, and the variables they all set alike, but no list variable of the plugin: a list
naming exactly the requested devices exists only in ``all`` (every device) or in what
``accelkit run`` books. Request ``<kind>=all`` for the plugin's lists.

A device node or bind mount that several devices share (two devices on one ``/dev/accel0``) is
written once per CDI device, ``all`` included: the runtime mounts it once.

Characters a CDI name cannot hold become ``-``. When two devices end up with the same name
(``gpu 0`` and ``gpu-0``), the later one in the plugins' listing order gets ``-2`` (``-3`` …)
appended, a suffix no other device's name uses.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from accelkit.errors import WorkloadError
from accelkit.plugin import AbstractAgentContext, PluginRole
from accelkit.runtime.render.cdi import cdi_device_name, render_cdi_spec
from accelkit.types import AgentId, DeviceAllocation, DeviceId, DeviceName, Workload, WorkloadConfig
from accelkit.workload.lifecycle import HookTarget, WorkloadLifecycle

#: the device carrying every device's edits at once
ALL = "all"
_CLASS_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_CLASS_AS_IS = re.compile(r"[A-Za-z][A-Za-z0-9_-]*[A-Za-z0-9]")
_ENV_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def default_cdi_kind(agent_id: str) -> str:
    """``accelkit.io/<agent>``: the agent id as the CDI class where the CDI library accepts it.

    Otherwise the id is made valid (other characters become ``-``, ``agent-`` goes before one
    that does not start with a letter; dots are replaced, as a class with a dot needs spec
    0.6.0) and a digest of the original id is appended, so ``x`` and ``x-`` get distinct kinds
    and file names.
    """
    if _CLASS_AS_IS.fullmatch(agent_id):
        return f"accelkit.io/{agent_id}"
    klass = _CLASS_UNSAFE.sub("-", agent_id).strip("-_")
    if not klass[:1].isalpha():
        klass = f"agent-{klass}".rstrip("-")
    digest = hashlib.sha256(agent_id.encode()).hexdigest()[:8]
    return f"accelkit.io/{klass}-{digest}"


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
    """The CDI spec (a JSON object) of the agent's accelerator devices.

    The cores and memory plugins are left out: what they configure (cpusets, memory limits)
    is not a container edit.
    """
    listed: list[tuple[DeviceName, AbstractAgentContext, list[DeviceId]]] = []
    for key, ctx in contexts.items():
        if ctx.plugin.role is not PluginRole.ACCELERATOR:
            continue
        ids = [d.device_id for d in ctx.list_devices() if d.device_id in ctx.alloc_map.device_slots]
        if ids:
            listed.append((key, ctx, ids))
    names = iter(unique_names([cdi_device_name(key, i) for key, _ctx, ids in listed for i in ids]))
    singles: list[tuple[str, WorkloadConfig]] = []
    every: list[HookTarget] = []
    for key, ctx, ids in listed:
        for device_id in ids:
            target = HookTarget(key, ctx, _whole(ctx, [device_id]))
            name = next(names)
            singles.append((name, await _edits(agent_id, f"cdi-{name}", [target])))
        every.append(HookTarget(key, ctx, _whole(ctx, ids)))
    if not every:
        msg = f"agent {agent_id!r} has no device a CDI spec can describe"
        raise WorkloadError(msg)
    combined: WorkloadConfig = await _edits(agent_id, "cdi-all", every)
    return render_cdi_spec(kind, with_own_variables(singles, combined))


def own_variable(name: str) -> str:
    """The variable a single device sets to name itself: ``ACCELKIT_CDI_<NAME>``."""
    return "ACCELKIT_CDI_" + _ENV_UNSAFE.sub("_", name).upper()


def with_own_variables(
    singles: Sequence[tuple[str, WorkloadConfig]], combined: WorkloadConfig
) -> list[tuple[str, WorkloadConfig]]:
    """The spec's devices: each single without colliding variables, with its own; then ``all``.

    Two names that give the same variable (``gpu-0`` and ``gpu.0``) get ``_2`` (``_3`` …)
    appended in order, so each device's variable names it alone.
    """
    variables = dict(zip((n for n, _c in singles), _unique_variables(singles), strict=True))
    devices = [
        (name, attrs.evolve(config, env_vars={**config.env_vars, variables[name]: name}))
        for name, config in without_colliding_env(singles, combined)
    ]
    every = {variables[name]: name for name, _c in singles}
    return [*devices, (ALL, attrs.evolve(combined, env_vars={**combined.env_vars, **every}))]


def _unique_variables(singles: Sequence[tuple[str, WorkloadConfig]]) -> list[str]:
    wanted = [own_variable(name) for name, _c in singles]
    taken = set(wanted)
    seen: set[str] = set()
    result = []
    for variable in wanted:
        unique = variable
        if variable in seen:
            n = 2
            while (unique := f"{variable}_{n}") in taken:
                n += 1
            taken.add(unique)
        seen.add(variable)
        result.append(unique)
    return result


def without_colliding_env(
    devices: Sequence[tuple[str, WorkloadConfig]], combined: WorkloadConfig
) -> list[tuple[str, WorkloadConfig]]:
    """``devices`` without the variables that another device or ``combined`` sets differently."""
    values: dict[str, set[str]] = {}
    for config in [*(c for _n, c in devices), combined]:
        for env_name, value in config.env_vars.items():
            values.setdefault(env_name, set()).add(value)
    return [
        (
            name,
            attrs.evolve(
                config,
                env_vars={k: v for k, v in config.env_vars.items() if len(values[k]) == 1},
            ),
        )
        for name, config in devices
    ]


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
