"""Which device each GRES index is, as the last ``gres.conf`` accelkit wrote says.

``accelkit slurm gres-conf --output`` records, per agent and GRES name, the devices of the lines
it wrote, in order (``<state-dir>/slurm/gres-index.json``); the prolog maps Slurm's indices
through that list (:func:`follow`). So a ``gres.conf`` that leaves unhealthy devices out
(``--leave-out-unhealthy``) still maps index ``i`` to the ``i``-th device it lists. Without a
record every whole device of the agent is listed, in accelkit's order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from accelkit.bridge.slurm.files import write_atomically
from accelkit.bridge.slurm.gres import GresDevice
from accelkit.errors import InvalidResourceArgument

__all__ = ["follow", "index_path", "record"]


def index_path(state_dir: Path | str) -> Path:
    """Where the devices of the last written ``gres.conf`` are recorded."""
    return Path(state_dir) / "slurm" / "gres-index.json"


def _label(device: GresDevice) -> str:
    return f"{device.plugin}/{device.device_id}"


def _read(state_dir: Path | str) -> dict[str, Any]:
    path = index_path(state_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        msg = f"cannot read {path}: {exc}; write gres.conf again with 'accelkit slurm gres-conf'"
        raise InvalidResourceArgument(msg) from None
    return data if isinstance(data, dict) else {}


def record(state_dir: Path | str, agent_id: str, devices: Sequence[GresDevice]) -> None:
    """Record the devices of the lines written for ``agent_id``."""
    data = _read(state_dir)
    listed: dict[str, list[str]] = {}
    for device in devices:
        listed.setdefault(device.name, []).append(_label(device))
    data[agent_id] = listed
    path = index_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, sort_keys=True, indent=1) + "\n")


def follow(state_dir: Path | str, agent_id: str, devices: Sequence[GresDevice]) -> list[GresDevice]:
    """``devices`` as the recorded ``gres.conf`` lists them (all of them without a record)."""
    listed = _read(state_dir).get(agent_id)
    if not isinstance(listed, dict):
        return list(devices)
    known = {(d.name, _label(d)): d for d in devices}
    found: list[GresDevice] = []
    for name, labels in listed.items():
        for label in labels:
            device = known.get((str(name), str(label)))
            if device is None:
                msg = (
                    f"the gres.conf accelkit wrote lists {name} device {label}, which this node "
                    "no longer has; write it again with 'accelkit slurm gres-conf --output'"
                )
                raise InvalidResourceArgument(msg)
            found.append(device)
    return found
