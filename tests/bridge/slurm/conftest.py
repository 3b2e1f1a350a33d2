"""One real Slurm cluster per test session (see ``cluster.py``).

Where Slurm cannot run (not root, binaries missing) the tests skip with the reason; with
``ACCELKIT_REQUIRE_SLURM=1`` (set by ``.ci/run``) that is a failure instead.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import cluster as slurm_cluster

REQUIRE_SLURM = "ACCELKIT_REQUIRE_SLURM"


def unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_SLURM) == "1":
        pytest.fail(f"{reason} ({REQUIRE_SLURM}=1: CI must run these tests)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm() -> Iterator[slurm_cluster.Cluster]:
    reason = slurm_cluster.missing()
    if reason is not None:
        unavailable(reason)
    # not under pytest's 0700 temp dir: munged (as the munge user) must reach its socket
    root = Path(tempfile.mkdtemp(prefix="accelkit-slurm-"))
    root.chmod(0o755)
    try:
        started = slurm_cluster.start(root)
    except (OSError, RuntimeError) as exc:
        unavailable(f"Slurm cannot start here: {exc}")
        raise
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(root, ignore_errors=True)
