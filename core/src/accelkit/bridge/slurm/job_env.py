"""A Slurm job's identity and where the prolog keeps what its task prolog reads.

Kept apart from the node's modules so that the commands that only need a job's id import little.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from accelkit.errors import InvalidResourceArgument
from accelkit.types import is_digits

__all__ = ["SLUID", "env_file", "job_id_of", "job_key", "workload_id"]

#: the cluster-unique job id Slurm 25.11 and later export next to SLURM_JOB_ID
SLUID = "SLURM_JOB_SLUID"


def job_id_of(env: Mapping[str, str]) -> str:
    """``SLURM_JOB_ID``; ``InvalidResourceArgument`` when it is missing or not a job id."""
    job_id = env.get("SLURM_JOB_ID", "")
    if not is_digits(job_id):
        msg = f"SLURM_JOB_ID is {job_id!r}, not a job id: run this from Slurm's Prolog/Epilog"
        raise InvalidResourceArgument(msg)
    return job_id


def job_key(env: Mapping[str, str]) -> str:
    """What a booking is keyed by: ``SLURM_JOB_SLUID`` where Slurm sets it, else the job id
    (whose reuse the booking's recorded ``StartTime`` tells apart)."""
    job_id = job_id_of(env)
    sluid = env.get(SLUID, "")
    if not sluid:
        return job_id
    if not sluid.isascii() or not sluid.replace("-", "").replace("_", "").isalnum():
        msg = f"{SLUID} is {sluid[:80]!r}, not a job id"
        raise InvalidResourceArgument(msg)
    return sluid


def workload_id(key: str) -> str:
    """The ledger's workload id of a Slurm job."""
    return f"slurm:{key}"


def env_file(state_dir: Path | str, job_id: str) -> Path:
    """Where the prolog keeps the job's devices and variables for the task prolog."""
    return Path(state_dir) / "slurm" / f"{job_id}.env"
