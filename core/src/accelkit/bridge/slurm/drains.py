"""Draining the node for a job allocated a device that takes no work, and lifting that drain.

The prolog drains the node (``scontrol update nodename=N state=drain reason="accelkit: ..."``)
and records the drain in ``<state-dir>/slurm/drains.json``. :func:`resume_recovered` (run by
``accelkit serve`` with ``[bridge.slurm] resume = true``) lifts a recorded drain once each device
it names is healthy and uncordoned, and only while Slurm still shows accelkit's reason: a node
drained, resumed or re-drained by anyone else is forgotten, never touched.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from accelkit.bridge.slurm.files import write_atomically
from accelkit.errors import InvalidResourceArgument
from accelkit.health import HealthState
from accelkit.node import Node
from accelkit.runtime.slurm_jobs import run_slurm

__all__ = ["REASON_PREFIX", "drain", "recorded", "resume_recovered"]

REASON_PREFIX = "accelkit: "
_REASON = re.compile(r"\bReason=(.*?)(?:\s+\[[^\]]*\])?\s*$")
_STATE = re.compile(r"\bState=(\S+)")


def _path(state_dir: Path | str) -> Path:
    return Path(state_dir) / "slurm" / "drains.json"


def recorded(state_dir: Path | str) -> dict[str, dict[str, Any]]:
    """The drains accelkit set and has not lifted, by node name."""
    try:
        data = json.loads(_path(state_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): dict(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _record(state_dir: Path | str, drains: Mapping[str, Mapping[str, Any]]) -> None:
    path = _path(state_dir)
    if not drains:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(drains, sort_keys=True, indent=1) + "\n", mode=0o600)


async def drain(  # noqa: PLR0917 (each the Slurm command's own)
    state_dir: Path | str,
    scontrol: str,
    slurm_conf: str | None,
    node_name: str,
    devices: Sequence[str],
    why: str,
) -> str:
    """Drain ``node_name`` for ``devices``; what happened, for the prolog's error line."""
    reason = f"{REASON_PREFIX}{why}"[:200]
    argv = [scontrol, "update", f"nodename={node_name}", "state=drain", f"reason={reason}"]
    try:
        code, text = await run_slurm(argv, slurm_conf)
    except (OSError, TimeoutError) as exc:
        return f"the node is not drained by accelkit ({scontrol}: {exc or 'timed out'})"
    if code != 0:
        return f"the node is not drained by accelkit ({scontrol} failed: {text.strip()})"
    drains = recorded(state_dir)
    drains[node_name] = {"reason": reason, "devices": list(devices), "slurm-conf": slurm_conf}
    _record(state_dir, drains)
    return f"node {node_name} drained"


def _fit(node: Node, device: str) -> bool:
    plugin, _, device_id = device.partition("/")
    try:
        return node.health.of(plugin, device_id).state is not HealthState.UNHEALTHY
    except InvalidResourceArgument:
        return False  # a device gone from the node has not recovered


async def resume_recovered(node: Node, scontrol: str) -> list[str]:
    """Lift the drains accelkit set whose devices recovered; one line per node touched or
    forgotten. A Slurm that cannot be asked is tried again at the next call."""
    state_dir = node.config.resource.state_dir
    drains = recorded(state_dir)
    lines: list[str] = []
    for name, entry in sorted(drains.items()):
        conf = entry.get("slurm-conf")
        try:
            code, text = await run_slurm([scontrol, "show", "node", "-o", name], conf)
        except (OSError, TimeoutError):
            continue
        found = _REASON.search(text) if code == 0 else None
        state = _STATE.search(text) if code == 0 else None
        drained = state is not None and "DRAIN" in state.group(1)
        if found is None or not drained or found.group(1) != entry.get("reason"):
            del drains[name]
            lines.append(f"node {name}: the drain accelkit set is gone or changed; left alone")
            continue
        devices = [str(d) for d in entry.get("devices", [])]
        if not all(_fit(node, d) for d in devices):
            continue
        argv = [scontrol, "update", f"nodename={name}", "state=resume"]
        try:
            code, text = await run_slurm(argv, conf)
        except (OSError, TimeoutError):
            continue
        if code == 0:
            del drains[name]
            lines.append(f"node {name} resumed: {', '.join(devices)} take work again")
        else:
            lines.append(f"node {name}: {scontrol} resume failed: {text.strip()}")
    if lines:
        _record(state_dir, drains)
    return lines
