"""The launcher run for real, as a parent runs it: its plan pipe to write, its status to read."""

from __future__ import annotations

import os
import subprocess
import sys

from accelkit.runtime import launcher


def start_launcher() -> tuple[subprocess.Popen[bytes], int, int]:
    """The launcher waiting for its plan; the write end of its plan pipe and the read end of
    its status pipe."""
    plan_r, plan_w = os.pipe()
    status_r, status_w = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", launcher.__file__, str(plan_r), str(status_w)],
        pass_fds=(plan_r, status_w),
        stdout=subprocess.PIPE,
    )
    os.close(plan_r)
    os.close(status_w)
    return process, plan_w, status_r


def finish_launcher(
    process: subprocess.Popen[bytes], plan_w: int, status_r: int
) -> tuple[int, str, str]:
    """Close the plan pipe; the launcher's status, stdout and status-pipe message."""
    os.close(plan_w)
    out, _ = process.communicate(timeout=60)
    with os.fdopen(status_r, "rb") as status:
        message = status.read().decode()
    return process.returncode, out.decode(), message
