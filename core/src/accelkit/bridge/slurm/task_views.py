"""The per-job file the task prolog reads: the job's devices and how each variable is made.

A job's environment is the plugins' ``pre_create`` of all its devices; a task or step sees a
part of them. Each variable is told apart by comparing it with ``pre_create`` of each device
alone (:func:`job_file`):

- ``list``: the job's value is the devices' own values joined by ``,`` (``cuda0,cuda2``,
  GPU UUIDs): a task gets the values of its devices, joined the same way;
- ``same``: every device alone gives the job's value: a task with any of them gets it;
- ``whole``: anything else: only a task with all of the job's devices of that variable gets it.

A task with none of a variable's devices gets ``unset``. Lines are tab-separated; the first is
``accelkit-slurm-job<TAB>1``; then ``N name source`` per GRES name (``gpu``: indices from the
task's environment, ``scontrol``: from ``scontrol show step -d``), ``D name index plugin
device`` per device in index order, ``E var kind value`` per variable, ``O var name index
value`` per device a variable is made of, ``F path`` per device node of the job (the epilog
kills what still holds one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from accelkit.errors import InvalidResourceArgument

__all__ = ["HEADER", "JobDevice", "job_file", "kept_files", "kinds"]

HEADER = "accelkit-slurm-job\t1"


@attrs.frozen
class JobDevice:
    """One device of the job under its GRES name and index, with its environment alone."""

    name: str
    index: int
    plugin: str
    device_id: str
    env: Mapping[str, str]


def kinds(
    job_env: Mapping[str, str], devices: Sequence[JobDevice]
) -> dict[str, tuple[str, list[JobDevice]]]:
    """Per variable, its kind and the devices it is made of (in the job's order)."""
    found: dict[str, tuple[str, list[JobDevice]]] = {}
    for var, value in job_env.items():
        owners = [d for d in devices if var in d.env]
        if owners and ",".join(d.env[var] for d in owners) == value:
            found[var] = ("list", owners)
        elif owners and all(d.env[var] == value for d in owners):
            found[var] = ("same", owners)
        else:
            found[var] = ("whole", owners or list(devices))
    return found


def _checked(job: str, var: str, value: str) -> str:
    if not var.isidentifier() or not var.isascii() or any(c in value for c in "\t\r\n"):
        msg = f"job {job}: variable {var!r} cannot be exported by a task prolog"
        raise InvalidResourceArgument(msg)
    return value


def job_file(
    job: str,
    job_env: Mapping[str, str],
    devices: Sequence[JobDevice],
    sources: Mapping[str, str],
    files: Sequence[str] = (),
) -> str:
    """The file's text; ``InvalidResourceArgument`` for a variable a task prolog cannot export
    (a line break or tab in its value, a name that is not an identifier)."""
    ordered = sorted(devices, key=lambda d: (d.name, d.index))
    lines = [HEADER]
    lines += [f"N\t{name}\t{sources[name]}" for name in sorted({d.name for d in ordered})]
    lines += [f"D\t{d.name}\t{d.index}\t{d.plugin}\t{d.device_id}" for d in ordered]
    for var, (kind, owners) in sorted(kinds(job_env, ordered).items()):
        lines.append(f"E\t{var}\t{kind}\t{_checked(job, var, job_env[var])}")
        for d in owners:
            own = _checked(job, var, d.env.get(var, ""))
            lines.append(f"O\t{var}\t{d.name}\t{d.index}\t{own}")
    lines += [f"F\t{_checked(job, 'F', path)}" for path in files]
    return "".join(f"{line}\n" for line in lines)


def kept_files(text: str) -> list[str]:
    """The device nodes a job file names."""
    return [line[2:] for line in text.splitlines() if line.startswith("F\t")]
