"""What an ``accelkit`` command imports: for the tests that keep a command's start-up lean."""

from __future__ import annotations

import subprocess
import sys

from accelkit.testing.cli_runner import cli_env

#: the command of ``sys.argv``, printing every module imported once the command is done
LISTING_MODULES = """
import atexit, sys
atexit.register(lambda: print(*sorted(sys.modules), file=sys.stderr))
from accelkit.cli.app import run
sys.argv = ["accelkit", *sys.argv[1:]]
run()
"""


def modules_of(*argv: str) -> set[str]:
    """Every module ``accelkit ARGV`` has imported by its end (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-c", LISTING_MODULES, *argv],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(done.stderr.split())
