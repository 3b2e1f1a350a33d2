"""CDI specs (Container Device Interface, spec version 1.1.0) from merged configs.

A spec has one ``kind`` (``vendor.com/class``) and named devices, each with ``containerEdits``:
``env`` (``NAME=value``), ``deviceNodes`` (from device mounts), ``mounts`` (bind mounts, with
``ro``/``rw``, ``nosuid``, ``nodev``, ``bind`` options) and ``additionalGids``. CPU sets, memory
limits and CDI names of other vendors have no place in a CDI spec and are left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from accelkit.types import MountType, WorkloadConfig
from accelkit.workload.validate import CDI_DEVICE, CDI_KIND

CDI_VERSION = "1.1.0"
_INVALID = re.compile(r"[^A-Za-z0-9_.:-]+")


def cdi_device_name(*parts: str) -> str:
    """A valid CDI device name from free-form parts: ``("cuda", "GPU 0")`` → ``"cuda-GPU-0"``."""
    joined = "-".join(_INVALID.sub("-", p) for p in parts if p)
    name = joined.strip("-_.:")
    if not name:
        msg = f"cannot make a CDI device name from {parts!r}"
        raise ValueError(msg)
    return name


def cdi_container_edits(config: WorkloadConfig) -> dict[str, Any]:
    """The ``containerEdits`` object of one device; empty lists are left out."""
    edits: dict[str, Any] = {}
    if config.env_vars:
        edits["env"] = [f"{name}={value}" for name, value in config.env_vars.items()]
    nodes = [
        {"path": m.target, "hostPath": m.source, "permissions": "r" if m.read_only else "rwm"}
        for m in config.mounts
        if m.type is MountType.DEVICE
    ]
    if nodes:
        edits["deviceNodes"] = nodes
    mounts = [
        {
            "hostPath": m.source,
            "containerPath": m.target,
            "type": "bind",
            "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "bind"],
        }
        for m in config.mounts
        if m.type is MountType.BIND
    ]
    if mounts:
        edits["mounts"] = mounts
    if config.extra_gids:
        edits["additionalGids"] = list(config.extra_gids)
    return edits


def render_cdi_spec(
    kind: str,
    devices: Sequence[tuple[str, WorkloadConfig]],
    *,
    common: WorkloadConfig | None = None,
) -> dict[str, Any]:
    """A whole CDI spec: one entry per ``(device name, config)``, ``common`` edits at the top.

    Raises ``ValueError`` for a kind or device name the CDI spec does not allow, or a device
    named twice.
    """
    if CDI_KIND.fullmatch(kind) is None:
        msg = f"{kind!r} is not a CDI kind (vendor.com/class)"
        raise ValueError(msg)
    entries = []
    seen: set[str] = set()
    for name, config in devices:
        if CDI_DEVICE.fullmatch(name) is None or name in seen:
            msg = f"{name!r} is not a valid CDI device name or is not unique in the spec"
            raise ValueError(msg)
        seen.add(name)
        entries.append({"name": name, "containerEdits": cdi_container_edits(config)})
    spec: dict[str, Any] = {"cdiVersion": CDI_VERSION, "kind": kind, "devices": entries}
    if common is not None and (edits := cdi_container_edits(common)):
        spec["containerEdits"] = edits
    return spec
