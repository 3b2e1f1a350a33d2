"""What ``Prolog=`` and ``Epilog=`` do for a Slurm job on an accelkit node.

The prolog maps the job's GRES indices to accelkit devices (:mod:`.gres` gives Slurm the same
order), refuses a device that is unhealthy or cordoned (draining the node, :mod:`.drains`),
books the devices in the ledger as workload ``slurm:<key>`` (``SLURM_JOB_SLUID`` where Slurm sets
it, else the job id, with the job's ``StartTime`` in the handle: a job id used again is another
job), runs the plugins' ``pre_create`` and keeps, in ``<state-dir>/slurm/<jobid>.env``, what the
task prolog (:mod:`.task_script`) needs to export the variables of each task's own devices
(:mod:`.task_views`). The epilog kills the job's processes still on the node, runs the teardown
and frees the devices; run twice, the second finds nothing to do. The prolog run again for the
job it booked (slurmd retrying) finds the same devices booked and the file kept, and does
nothing. A job with no accelkit GRES passes through untouched. Both remove the files kept for
jobs that have no booking any more (a job whose epilog never ran, freed by a reconciliation).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from pathlib import Path

from accelkit.bridge.slurm.drains import drain
from accelkit.bridge.slurm.files import write_atomically
from accelkit.bridge.slurm.gres import GresDevice, gres_devices, indexed_devices
from accelkit.bridge.slurm.gres_index import follow
from accelkit.bridge.slurm.job_env import SLUID, env_file, job_id_of, job_key, workload_id
from accelkit.bridge.slurm.job_gres import gpu_indices, scontrol_indices
from accelkit.bridge.slurm.task_views import JobDevice, job_file
from accelkit.calls import call_async
from accelkit.config.model import SlurmBridgeConfig
from accelkit.errors import InvalidResourceArgument
from accelkit.health import HealthState
from accelkit.host import AgentView
from accelkit.node import Node
from accelkit.runtime.slurm_jobs import JobInfo, job_info, slurm_handle
from accelkit.types import AgentId, DeviceAllocation, DeviceName, Workload, is_digits

__all__ = ["JobDevices", "epilog", "job_devices", "prolog", "sweep_env_files"]

#: a job's devices: per GRES name, the accelkit devices of the allocated indices
JobDevices = Mapping[str, list[GresDevice]]
#: the GRES name whose indices Slurm gives in the environment (SLURM_JOB_GPUS, SLURM_STEP_GPUS)
GPU = "gpu"


def _asker(settings: SlurmBridgeConfig, env: Mapping[str, str]) -> Callable[[], Awaitable[JobInfo]]:
    """``scontrol show job -d`` of the job, asked once, when first needed."""
    job_id = job_id_of(env)
    found: list[JobInfo] = []

    async def ask() -> JobInfo:
        if found:
            return found[0]
        try:
            info = await job_info(job_id, settings.scontrol, env.get("SLURM_CONF"), detail=True)
        except (OSError, TimeoutError) as exc:
            why = "it took too long" if isinstance(exc, TimeoutError) else str(exc)
            msg = f"cannot ask {settings.scontrol} about job {job_id}: {why}"
            raise InvalidResourceArgument(msg) from None
        except RuntimeError as exc:
            raise InvalidResourceArgument(str(exc)) from None
        found.append(info)
        return info

    return ask


async def job_devices(
    devices: list[GresDevice],
    env: Mapping[str, str],
    settings: SlurmBridgeConfig,
    ask: Callable[[], Awaitable[JobInfo]] | None = None,
) -> JobDevices:
    """The accelkit devices of the GRES indices Slurm allocated to the job on this node."""
    by_name = indexed_devices(devices)
    indices: dict[str, list[int]] = {}
    if GPU in by_name:
        indices[GPU] = gpu_indices(env)
    if set(by_name) - {GPU}:
        info = await (ask or _asker(settings, env))()
        found = scontrol_indices(info.text, env.get("SLURMD_NODENAME"))
        indices.update({name: found[name] for name in found if name != GPU})
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
    """Remove the files kept for jobs the ledger has no booking of; their job ids.

    The folder is listed before the ledger is read: the prolog writes a job's file only after
    its booking, so a file listed here whose booking is not found is one whose booking is gone.
    """
    folder = Path(node.config.resource.state_dir) / "slurm"
    try:
        kept = {p.stem: p for p in folder.glob("*.env") if is_digits(p.stem)}
    except OSError:
        return []
    if not kept:
        return []
    booked = {
        r.handle.ident
        for r in node.bookkeeper.ledger.read_all().values()
        if r.handle is not None and r.workload.id.startswith("slurm:")
    }
    removed = []
    for job_id, path in sorted(kept.items()):
        if job_id not in booked:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            removed.append(job_id)
    return removed


def _unfit(node: Node, chosen: JobDevices) -> list[tuple[str, str]]:
    """The chosen devices that take no work now (unhealthy, cordoned), with why."""
    node.health_keeper.sync_cordons()  # a cordon set since the node was opened
    found = []
    for devices in chosen.values():
        for d in devices:
            health = node.health.of(d.plugin, d.device_id)
            if health.state is HealthState.UNHEALTHY:
                found.append((f"{d.plugin}/{d.device_id}", health.reason or "unhealthy"))
    return found


async def _refuse_unfit(
    node: Node, settings: SlurmBridgeConfig, env: Mapping[str, str], chosen: JobDevices
) -> None:
    unfit = _unfit(node, chosen)
    if not unfit:
        return
    why = "; ".join(f"{device} unhealthy ({reason})" for device, reason in unfit)
    job_id = job_id_of(env)
    name = env.get("SLURMD_NODENAME", "")
    done = "the node is not drained by accelkit (no SLURMD_NODENAME)"
    if name:
        done = await drain(
            node.config.resource.state_dir,
            settings.scontrol,
            env.get("SLURM_CONF"),
            name,
            [device for device, _ in unfit],
            why,
        )
    msg = f"job {job_id} was allocated {why}: {done}; nothing booked"
    raise InvalidResourceArgument(msg)


async def _views(
    agent: AgentView, workload: Workload, chosen: JobDevices, timeout: Decimal
) -> list[JobDevice]:
    """Each device with the environment its plugin gives it alone (``pre_create`` asked for
    the variables only: nothing is started for it)."""
    found = []
    for name, devices in chosen.items():
        for d in devices:
            ctx = agent.contexts[d.plugin]
            hook = ctx.create_lifecycle_hook(workload, {d.slot: {d.device_id: d.amount}})
            config = await call_async(ctx.plugin.key, "pre_create", timeout, hook.pre_create)
            found.append(JobDevice(name, 0, d.plugin, d.device_id, dict(config.env_vars)))
    return found


def _indexed(views: list[JobDevice], devices: list[GresDevice]) -> list[JobDevice]:
    """``views`` with each device's GRES index (its place among the node's devices of its name)."""
    position = {
        (name, str(d.plugin), str(d.device_id)): i
        for name, known in indexed_devices(devices).items()
        for i, d in enumerate(known)
    }
    return [
        JobDevice(v.name, position[(v.name, v.plugin, v.device_id)], v.plugin, v.device_id, v.env)
        for v in views
    ]


def _keep(path: Path, text: str, env: Mapping[str, str]) -> None:
    """Write the job's file, readable by the job's user only (the task prolog runs as it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o755)
    write_atomically(path, text, mode=0o600)
    uid = env.get("SLURM_JOB_UID", "")
    if is_digits(uid) and os.geteuid() == 0:
        gid = env.get("SLURM_JOB_GID", "")
        os.chown(path, int(uid), int(gid) if is_digits(gid) else -1)


async def prolog(
    node: Node, agent_id: AgentId, settings: SlurmBridgeConfig, env: Mapping[str, str]
) -> JobDevices:
    """Book the job's devices, run ``pre_create`` and keep the task prolog's file; what was
    booked (nothing for a job without accelkit GRES). A failure books nothing."""
    job_id = job_id_of(env)
    key = job_key(env)
    path = env_file(node.config.resource.state_dir, job_id)
    agent = node.agents[agent_id]
    found = await gres_devices(agent, settings.gres_names, node.config.plugins.hook_timeout)
    devices = follow(node.config.resource.state_dir, agent_id, found)
    ask = _asker(settings, env)
    chosen = await job_devices(devices, env, settings, ask)
    if not chosen:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # kept for an earlier job of this id whose epilog never ran
        return chosen
    await _refuse_unfit(node, settings, env, chosen)
    sluid = env.get(SLUID, "")
    start = "" if sluid else (await ask()).start
    sweep_env_files(node)
    allocation = _allocation(chosen)
    wanted = workload_id(key)
    booked = node.bookkeeper.ledger.read(agent_id, wanted)
    if booked is not None:
        same = booked.handle is not None and booked.handle.details.get("start", "") == start
        if same and _plain(booked.allocation) == _plain(allocation) and path.is_file():
            return chosen  # run again for a job this prolog booked: nothing left to do
        held = ", ".join(
            f"{plugin}:{d}"
            for plugin, slots in booked.allocation.items()
            for part in slots.values()
            for d in part
        )
        msg = (
            f"job {job_id} is booked already (devices {held}) by a prolog that did not finish, "
            f"for other devices or for an earlier job {job_id}; its epilog frees it, or "
            f"'accelkit release {wanted} --force'"
        )
        raise InvalidResourceArgument(msg)
    files = [d.file for ds in chosen.values() for d in ds if d.file]
    handle = slurm_handle(
        job_id, settings.scontrol, env.get("SLURM_CONF"), start=start, sluid=sluid, files=files
    )
    workload = Workload.process_tree(wanted)
    record = await node.bookkeeper.book_devices(agent_id, workload, allocation, handle=handle)
    lifecycle = node.lifecycle(record)
    config = await lifecycle.prepare()  # a failure tears down and frees
    try:
        timeout = node.config.plugins.hook_timeout
        views = _indexed(await _views(agent, workload, chosen, timeout), devices)
        sources = {name: "gpu" if name == GPU else "scontrol" for name in chosen}
        _keep(path, job_file(job_id, dict(config.env_vars), views, sources, files), env)
    except BaseException:
        await lifecycle.terminate()
        node.bookkeeper.release(record.key)
        raise
    node.bookkeeper.hand_over(record.key)
    return chosen


async def epilog(node: Node, env: Mapping[str, str]) -> bool:
    """Tear down the job's booking and free it; ``False`` when there was none (any more).

    The node must have been opened with a ``slurm-jobs`` runtime that counts the job as ended,
    after the job's processes left on the node were killed.
    """
    job_id = job_id_of(env)
    wanted = workload_id(job_key(env))
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
