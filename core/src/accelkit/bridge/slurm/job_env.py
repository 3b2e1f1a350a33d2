"""A Slurm job's identity and the environment the prolog keeps for its task prolog.

Kept apart from the node's modules so that the task prolog, run before every task of a job,
imports little.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from accelkit.errors import InvalidResourceArgument
from accelkit.types import is_digits

__all__ = ["env_file", "export_lines", "job_id_of"]


def job_id_of(env: Mapping[str, str]) -> str:
    """``SLURM_JOB_ID``; ``InvalidResourceArgument`` when it is missing or not a job id."""
    job_id = env.get("SLURM_JOB_ID", "")
    if not is_digits(job_id):
        msg = f"SLURM_JOB_ID is {job_id!r}, not a job id: run this from Slurm's Prolog/Epilog"
        raise InvalidResourceArgument(msg)
    return job_id


def env_file(state_dir: Path | str, job_id: str) -> Path:
    """Where the prolog keeps the job's merged environment for the task prolog."""
    return Path(state_dir) / "slurm" / f"{job_id}.json"


def export_lines(state_dir: Path | str, env: Mapping[str, str]) -> list[str]:
    """The task prolog's ``export KEY=VALUE`` lines (none for a job the prolog did not book).

    Slurm takes everything after ``=`` as the value, so values are printed as they are; a
    value with a line break cannot be passed this way and is refused.
    """
    job_id = job_id_of(env)
    try:
        data = json.loads(env_file(state_dir, job_id).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        msg = f"cannot read the environment of job {job_id}: {exc}"
        raise InvalidResourceArgument(msg) from None
    lines: list[str] = []
    for key, value in sorted(dict(data.get("env", {})).items()):
        if not str(key).isidentifier() or "\n" in str(value) or "\r" in str(value):
            msg = f"job {job_id}: variable {key!r} cannot be exported by a task prolog"
            raise InvalidResourceArgument(msg)
        lines.append(f"export {key}={value}")
    return lines
