"""CDI specs (Container Device Interface) from merged configs, as runtimes load them.

A spec has one ``kind`` (``vendor.com/class``) and named devices, each with ``containerEdits``:
``env`` (``NAME=value``), ``deviceNodes`` (from device mounts), ``mounts`` (bind mounts, with
``ro``/``rw``, ``nosuid``, ``nodev``, ``bind`` options) and ``additionalGids``. CPU sets, memory
limits and CDI names of other vendors have no place in a CDI spec and are left out.

The rules are those of the CDI reference library (``tags.cncf.io/container-device-interface``),
which podman, containerd, CRI-O and Docker use to load specs:

- ``cdiVersion`` is the **lowest** version the contents need (:func:`minimum_cdi_version`), never
  below ``0.3.0``, so runtimes that vendor an older library load the spec too;
- vendor and class start with a letter, hold only letters, digits, ``_``, ``-``, ``.`` and end
  with a letter or digit; device names may also start with a digit and hold ``:``;
- a device with no edits makes the library refuse the whole spec, and so does a spec without
  devices: :func:`render_cdi_spec` refuses both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from accelkit.types import MountType, WorkloadConfig

__all__ = [
    "CDI_VERSIONS",
    "cdi_container_edits",
    "cdi_device_name",
    "cdi_kind_problem",
    "minimum_cdi_version",
    "render_cdi_spec",
]

#: released spec versions, oldest first; the reference library reads nothing older than 0.3.0
CDI_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
_INVALID = re.compile(r"[^A-Za-z0-9_.:-]+")
_QUALIFIER = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")


def cdi_kind_problem(kind: str) -> str | None:
    """Why ``kind`` is not a CDI kind the reference library accepts, or ``None`` when it is."""
    vendor, slash, klass = kind.partition("/")
    if not slash or not vendor or not klass:
        return f"{kind!r} is not a CDI kind (vendor.com/class)"
    for part, what in ((vendor, "vendor"), (klass, "class")):
        if _QUALIFIER.fullmatch(part) is None or len(part) < 2:
            return (
                f"{kind!r} is not a CDI kind: the {what} {part!r} must start with a letter, "
                "hold only letters, digits, '_', '-' and '.', end with a letter or digit and "
                "be at least two characters long"
            )
    return None


def cdi_device_name(*parts: str) -> str:
    """A valid CDI device name from free-form parts: ``("cuda", "GPU 0")`` → ``"cuda-GPU-0"``."""
    joined = "-".join(_INVALID.sub("-", p) for p in parts if p)
    name = joined.strip("-_.:")
    if not name:
        msg = f"cannot make a CDI device name from {parts!r}"
        raise ValueError(msg)
    return name


def cdi_container_edits(config: WorkloadConfig) -> dict[str, Any]:
    """The ``containerEdits`` object of one device; empty lists are left out.

    ``hostPath`` of a device node is written only where it differs from ``path``: the field
    needs spec 0.5.0, and the runtime reads ``path`` on the host when it is absent.

    A device node or bind mount given more than once (devices sharing one node, merged) is
    written once, at its first place: runtimes refuse a mount target that appears twice. Two
    entries for one container path that differ in anything else stay, for the runtime to refuse.
    """
    edits: dict[str, Any] = {}
    if config.env_vars:
        edits["env"] = [f"{name}={value}" for name, value in config.env_vars.items()]
    nodes = []
    for m in config.mounts:
        if m.type is MountType.DEVICE:
            node = {"path": m.target, "permissions": "r" if m.read_only else "rwm"}
            if m.source != m.target:
                node["hostPath"] = m.source
            nodes.append(node)
    if nodes:
        edits["deviceNodes"] = _once(nodes)
    mounts = _once(
        [
            {
                "hostPath": m.source,
                "containerPath": m.target,
                "type": "bind",
                "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "bind"],
            }
            for m in config.mounts
            if m.type is MountType.BIND
        ]
    )
    if mounts:
        edits["mounts"] = mounts
    if config.extra_gids:
        edits["additionalGids"] = list(config.extra_gids)
    return edits


def _once(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` without repeats of an identical entry, in order."""
    kept: list[dict[str, Any]] = []
    for entry in entries:
        if entry not in kept:
            kept.append(entry)
    return kept


def _all_edits(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])]


def _any(edits: Iterable[Mapping[str, Any]], key: str, test: Any = bool) -> bool:
    return any(test(item) for e in edits for item in e.get(key, ()))


def _needs(spec: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    """(version, whether the spec uses a feature of it), as the reference library decides."""
    edits = _all_edits(spec)
    devices = spec["devices"]
    _vendor, _, klass = spec["kind"].partition("/")
    yield (
        "1.1.0",
        _any(edits, "netDevices")
        or any(
            (rdt := e.get("intelRdt")) and ("schemata" in rdt or rdt.get("enableMonitoring"))
            for e in edits
        ),
    )
    yield "0.7.0", any("intelRdt" in e or e.get("additionalGids") for e in edits)
    yield (
        "0.6.0",
        bool(spec.get("annotations")) or "." in klass or any(d.get("annotations") for d in devices),
    )
    yield (
        "0.5.0",
        any(not d["name"][:1].isalpha() for d in devices)
        or _any(edits, "deviceNodes", lambda node: bool(node.get("hostPath"))),
    )
    yield "0.4.0", _any(edits, "mounts", lambda mount: bool(mount.get("type")))


def minimum_cdi_version(spec: Mapping[str, Any]) -> str:
    """The lowest ``cdiVersion`` whose features cover ``spec``; ``0.3.0`` at least."""
    return next((version for version, needed in _needs(spec) if needed), CDI_VERSIONS[0])


def render_cdi_spec(
    kind: str,
    devices: Sequence[tuple[str, WorkloadConfig]],
    *,
    common: WorkloadConfig | None = None,
) -> dict[str, Any]:
    """A whole CDI spec: one entry per ``(device name, config)``, ``common`` edits at the top.

    Raises ``ValueError`` for a kind or device name the CDI library does not allow, a device
    named twice, a device without edits, or no device at all.
    """
    if (problem := cdi_kind_problem(kind)) is not None:
        raise ValueError(problem)
    if not devices:
        msg = f"a CDI spec needs at least one device; {kind!r} has none"
        raise ValueError(msg)
    entries = []
    seen: set[str] = set()
    for name, config in devices:
        if _DEVICE.fullmatch(name) is None or name in seen:
            msg = f"{name!r} is not a valid CDI device name or is not unique in the spec"
            raise ValueError(msg)
        seen.add(name)
        if not (edits := cdi_container_edits(config)):
            msg = f"CDI device {name!r} has no container edits; the CDI library refuses such specs"
            raise ValueError(msg)
        entries.append({"name": name, "containerEdits": edits})
    spec: dict[str, Any] = {"cdiVersion": "", "kind": kind, "devices": entries}
    if common is not None and (edits := cdi_container_edits(common)):
        spec["containerEdits"] = edits
    spec["cdiVersion"] = minimum_cdi_version(spec)
    return spec
