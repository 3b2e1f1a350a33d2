"""What ``Prolog=``, ``TaskProlog=`` and ``Epilog=`` do for a Slurm job on an accelkit node.

The prolog maps the job's GRES indices to accelkit devices (:mod:`.gres` gives Slurm the same
order), books them in the ledger as workload ``slurm:<jobid>`` (a process tree whose liveness the
``slurm-jobs`` runtime asks Slurm), runs the plugins' ``pre_create`` and keeps the merged
environment in ``<state-dir>/slurm/<jobid>.json`` for the task prolog, which prints it as
``export`` lines. The epilog runs the teardown and frees the devices; run twice, the second
finds nothing to do. The prolog run again for a job it booked (slurmd retrying) finds the same
devices booked and the environment kept, and does nothing. A job with no accelkit GRES passes
through untouched. Both remove the environments kept for jobs that have no booking any more
(a job whose epilog never ran, freed by a later reconciliation).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path

from accelkit.bridge.slurm.files import write_atomically
from accelkit.bridge.slurm.gres import GresDevice, gres_devices, indexed_devices
from accelkit.bridge.slurm.job_env import env_file, job_id_of
from accelkit.bridge.slurm.job_gres import gpu_indices, scontrol_indices
from accelkit.config.model import SlurmBridgeConfig
from accelkit.errors import InvalidResourceArgument
from accelkit.node import Node
from accelkit.runtime.slurm_jobs import run_slurm, slurm_handle
from accelkit.types import AgentId, DeviceAllocation, DeviceName, Workload, is_digits

__all__ = ["JobDevices", "epilog", "job_devices", "prolog", "sweep_env_files"]

#: a job's devices: per GRES name, the accelkit devices of the allocated indices
JobDevices = Mapping[str, list[GresDevice]]


def workload_id(job_id: str) -> str:
    """The ledger's workload id of a Slurm job."""
    return f"slurm:{job_id}"


async def job_devices(
    devices: list[GresDevice], env: Mapping[str, str], settings: SlurmBridgeConfig
) -> JobDevices:
    """The accelkit devices of the GRES indices Slurm allocated to the job on this node."""
    by_name = indexed_devices(devices)
    indices: dict[str, list[int]] = {}
    if "gpu" in by_name:
        indices["gpu"] = gpu_indices(env)
    if set(by_name) - {"gpu"}:
        job_id = job_id_of(env)
        try:
            code, text = await run_slurm(
                [settings.scontrol, "show", "job", "-d", job_id], env.get("SLURM_CONF")
            )
        except (OSError, TimeoutError) as exc:
            why = "it took too long" if isinstance(exc, TimeoutError) else str(exc)
            msg = f"cannot ask {settings.scontrol} about job {job_id}: {why}"
            raise InvalidResourceArgument(msg) from None
        if code != 0:
            msg = f"{settings.scontrol} show job -d {job_id} failed ({code}): {text.strip()}"
            raise InvalidResourceArgument(msg)
        found = scontrol_indices(text, env.get("SLURMD_NODENAME"))
        indices.update({name: found[name] for name in found if name != "gpu"})
    chosen: dict[str, list[GresDevice]] = {}
    for name, wanted in indices.items():
        known = by_name.get(name, [])
        outside = [i for i in wanted if i >= len(known)]
        if outside:
            msg = (
                f"Slurm allocated {name} indices {outside} but this node's gres.conf from "
                f"accelkit has {len(known)}; regenerate it with 'accelkit slurm gres-conf'"
            )
            raise InvalidResourceArgument(msg)
        if wanted:
            chosen[name] = [known[i] for i in wanted]
    return chosen


def _allocation(chosen: JobDevices) -> dict[DeviceName, DeviceAllocation]:
    alloc: dict[DeviceName, dict[str, dict[str, Decimal]]] = {}
    for devices in chosen.values():
        for d in devices:
            alloc.setdefault(d.plugin, {}).setdefault(d.slot, {})[d.device_id] = d.amount
    return alloc  # type: ignore[return-value]


def _plain(
    allocation: Mapping[DeviceName, DeviceAllocation],
) -> dict[str, dict[str, dict[str, Decimal]]]:
    return {
        str(plugin): {
            str(slot): {str(d): Decimal(a) for d, a in part.items()} for slot, part in slots.items()
        }
        for plugin, slots in allocation.items()
    }


def sweep_env_files(node: Node) -> list[str]:
    """Remove the environments kept for jobs the ledger has no booking of; their job ids.

    The folder is listed before the ledger is read: the prolog writes a job's file only after
    its booking, so a file listed here whose booking is not found is one whose booking is gone.
    """
    folder = Path(node.config.resource.state_dir) / "slurm"
    try:
        kept = {p.stem: p for p in folder.glob("*.json") if is_digits(p.stem)}
    except OSError:
        return []
    if not kept:
        return []
    booked = {w.removeprefix("slurm:") for _a, w in node.bookkeeper.ledger.read_all()}
    removed = []
    for job_id, path in sorted(kept.items()):
        if job_id not in booked:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            removed.append(job_id)
    return removed


async def prolog(
    node: Node, agent_id: AgentId, settings: SlurmBridgeConfig, env: Mapping[str, str]
) -> JobDevices:
    """Book the job's devices, run ``pre_create`` and keep the environment; what was booked
    (nothing for a job without accelkit GRES). A failure books nothing."""
    agent = node.agents[agent_id]
    devices = await gres_devices(agent, settings.gres_names, node.config.plugins.hook_timeout)
    chosen = await job_devices(devices, env, settings)
    if not chosen:
        return chosen
    job_id = job_id_of(env)
    sweep_env_files(node)
    path = env_file(node.config.resource.state_dir, job_id)
    allocation = _allocation(chosen)
    booked = node.bookkeeper.ledger.read(agent_id, workload_id(job_id))
    if booked is not None:
        if _plain(booked.allocation) == _plain(allocation) and path.is_file():
            return chosen  # run again for a job this prolog booked: nothing left to do
        held = ", ".join(
            f"{plugin}:{d}"
            for plugin, slots in booked.allocation.items()
            for part in slots.values()
            for d in part
        )
        msg = (
            f"job {job_id} is booked already (devices {held}) by a prolog that did not finish or "
            "for other devices; its epilog frees it, or 'accelkit release "
            f"{workload_id(job_id)} --force'"
        )
        raise InvalidResourceArgument(msg)
    handle = slurm_handle(job_id, settings.scontrol, env.get("SLURM_CONF"))
    record = await node.bookkeeper.book_devices(
        agent_id, Workload.process_tree(workload_id(job_id)), allocation, handle=handle
    )
    config = await node.lifecycle(record).prepare()  # a failure tears down and frees
    node.bookkeeper.hand_over(record.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"job": job_id, "agent": agent_id, "env": dict(config.env_vars)}
    write_atomically(path, json.dumps(body, sort_keys=True) + "\n", mode=0o600)
    return chosen


async def epilog(node: Node, env: Mapping[str, str]) -> bool:
    """Tear down the job's booking and free it; ``False`` when there was none (any more).

    The node must have been opened with a ``slurm-jobs`` runtime that counts the job as ended.
    """
    job_id = job_id_of(env)
    wanted = workload_id(job_id)
    # opening the node reconciled the ledger: the ended job may be torn down already
    released = any(t.workload_id == wanted for t in node.last_report.torn_down)
    try:
        await node.release(wanted)
        released = True
    except InvalidResourceArgument:
        pass  # no booking (left): not an accelkit job, or released already
    with contextlib.suppress(FileNotFoundError):
        os.unlink(env_file(node.config.resource.state_dir, job_id))
    sweep_env_files(node)
    return released
