"""``accelkit`` run against a test's own container engine: its environment and one command."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

#: the ``accelkit`` console script, run by this interpreter
ACCELKIT = [sys.executable, "-c", "from accelkit.cli.app import run; run()"]


def environment(engine_url: str, state: Path) -> dict[str, str]:
    """This process's environment without ``ACCELKIT_*`` or ``DOCKER_*`` (neither a config nor
    another engine leaks in), then the engine at ``engine_url`` and the state directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKIT_", "DOCKER_"))}
    return env | {"DOCKER_HOST": engine_url, "ACCELKIT_STATE_DIR": str(state)}


def accelkit(
    engine_url: str, config: Path, *args: str, command: Sequence[str] = ACCELKIT
) -> subprocess.CompletedProcess[str]:
    """``accelkit ARGS`` (or ``command ARGS``) to its end, against the engine at
    ``engine_url``, with the state directory beside ``config``."""
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        env=environment(engine_url, config.parent / "state"),
        timeout=120,
        check=False,
    )
