"""``accelkit ARGS`` run as its user runs it, for tests: a fresh interpreter, its own environment.

Every command a test runs this way finds no ``ACCELKIT_*`` variable of the shell that runs the
tests (so neither a config nor a state directory leaks in) but ``ACCELKIT_SYSTEM_CONFIG``, which
the tests' ``conftest.py`` points at a file that never exists (so no command reads the
machine's ``/etc/accelkit``); ``env`` adds what the test means,
``site`` puts a directory of installed distributions on ``PYTHONPATH``, and ``config`` is given
as ``--config`` after the command's name. Internal, like :mod:`accelkit.testing.fakehost`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["ACCELKIT", "cli_env", "run_accelkit"]

#: the ``accelkit`` console script, run by this interpreter
ACCELKIT = (sys.executable, "-c", "from accelkit.cli.app import run; run()")


def cli_env(env: Mapping[str, str] | None = None, site: Path | None = None) -> dict[str, str]:
    """This process's environment without ``ACCELKIT_*`` (``ACCELKIT_SYSTEM_CONFIG`` kept), then
    ``site`` on ``PYTHONPATH`` (replacing it) and ``env`` on top."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ACCELKIT_") or k == "ACCELKIT_SYSTEM_CONFIG"
    }
    if site is not None:
        base["PYTHONPATH"] = str(site)
    return {**base, **(env or {})}


def run_accelkit(
    *args: str | Path,
    config: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    site: Path | None = None,
    stdin: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``accelkit ARGS`` to its end; ``config``, when given, follows the command's name."""
    argv = [str(a) for a in args]
    if config is not None:
        argv[1:1] = ["--config", str(config)]
    return subprocess.run(  # noqa: S603 - our own command line
        [*ACCELKIT, *argv],
        capture_output=True,
        text=True,
        env=cli_env(env, site),
        input=stdin,
        timeout=timeout,
        check=False,
    )
