"""Enforced GPU shares through CUDA MPS: one MPS control daemon per GPU with share workloads.

NVIDIA's Multi-Process Service (``nvidia-cuda-mps-control``, shipped with the driver) is how a
GPU's memory and SMs are split among processes with limits the driver enforces: each client's
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (its memory, by device ordinal) and
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (its share of the SMs). A client reaches its daemon through
``CUDA_MPS_PIPE_DIRECTORY``.

Per GPU (by UUID) this module keeps ``<root>/<uuid>/``:

- ``pipe/`` and ``log/``: the daemon's pipe and log directories;
- ``users/``: one file per share workload of the GPU (its workload id, hashed into the name);
- ``lock``: taken (``flock``) around every start and stop, so that processes of one node
  (``accelkit run``, ``accelkit serve``) never start two daemons or stop one another's.

A daemon is started (``nvidia-cuda-mps-control -d``, with ``CUDA_VISIBLE_DEVICES`` set to the
GPU) when the first share workload of the GPU arrives, unless one already answers there
(``get_server_list``): then it is adopted, as after a restart of accelkit. It is stopped
(``quit``) when the last share workload of the GPU is gone. Every call to the executable is
bounded by :data:`TIMEOUT` seconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs

log = logging.getLogger(__name__)

#: seconds one call of ``nvidia-cuda-mps-control`` may take
TIMEOUT = 30
CONTROL = "nvidia-cuda-mps-control"
#: the longest pipe directory whose sockets fit a unix socket address (107 bytes): the daemon
#: names them ``<pipe>/control...``; a longer one makes it exit with status 1 and no word
MAX_PIPE_DIR = 88
#: the end of the daemon's own log quoted when it fails without saying why
LOG_TAIL = 400


class MPSError(Exception):
    """The MPS control daemon could not be started or asked."""


def find_control(name: str) -> Path | None:
    """The control executable: ``name`` as a path, or looked up on ``PATH``."""
    found = shutil.which(name)
    return Path(found) if found else None


@attrs.frozen
class MPS:
    """The MPS daemons of one node, under ``root``, run with the ``control`` executable."""

    control: Path
    root: Path

    def pipe_dir(self, uuid: str) -> Path:
        return self.root / uuid / "pipe"

    def log_dir(self, uuid: str) -> Path:
        return self.root / uuid / "log"

    def _users(self, uuid: str) -> Path:
        return self.root / uuid / "users"

    @contextmanager
    def _locked(self, uuid: str) -> Iterator[None]:
        base = self.root / uuid
        for path in (base, self.pipe_dir(uuid), self.log_dir(uuid), self._users(uuid)):
            path.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(base / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _ask(
        self, uuid: str, *args: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": uuid,
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir(uuid)),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir(uuid)),
        }
        try:
            return subprocess.run(  # noqa: S603 - the configured MPS executable, no shell
                [str(self.control), *args],
                input=stdin,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            msg = f"{self.control}: {exc}"
            raise MPSError(msg) from exc

    def running(self, uuid: str) -> bool:
        """Whether a control daemon answers on the GPU's pipe directory."""
        return self._ask(uuid, stdin="get_server_list\n").returncode == 0

    def join(self, uuid: str, workload_id: str) -> bool:
        """Count ``workload_id`` among the GPU's share workloads, starting the daemon if none
        answers; ``True`` when this call started it. Raises :class:`MPSError` when it cannot."""
        with self._locked(uuid):
            started = False
            if not self.running(uuid):
                self._check_pipe_length(uuid)
                done = self._ask(uuid, "-d")
                if done.returncode != 0:
                    why = (done.stderr or done.stdout).strip() or self._log_tail(uuid)
                    why = why or f"exit status {done.returncode}"
                    msg = f"cannot start the MPS control daemon of {uuid}: {why}"
                    raise MPSError(msg)
                started = True
                log.info("cuda: started the MPS control daemon of %s", uuid)
            (self._users(uuid) / _user_name(workload_id)).write_text(workload_id + "\n")
            return started

    def _check_pipe_length(self, uuid: str) -> None:
        pipe = os.fsencode(self.pipe_dir(uuid))
        if len(pipe) > MAX_PIPE_DIR:
            msg = (
                f"the MPS pipe directory {self.pipe_dir(uuid)} is {len(pipe)} bytes long and its"
                f" sockets would not fit a unix socket address: set mps-directory to a path of"
                f" at most {MAX_PIPE_DIR - (len(pipe) - len(os.fsencode(self.root)))} bytes"
            )
            raise MPSError(msg)

    def _log_tail(self, uuid: str) -> str:
        try:
            text = (self.log_dir(uuid) / "control.log").read_text(errors="replace").strip()
        except OSError:
            return ""
        return f"its log ends: {text[-LOG_TAIL:]}" if text else ""

    def leave(self, uuid: str, workload_id: str) -> bool:
        """Stop counting ``workload_id``; stop the daemon when no share workload is left.
        ``True`` when this call stopped it. Safe to call more than once."""
        with self._locked(uuid):
            (self._users(uuid) / _user_name(workload_id)).unlink(missing_ok=True)
            if any(self._users(uuid).iterdir()) or not self.running(uuid):
                return False
            done = self._ask(uuid, stdin="quit\n")
            if done.returncode != 0:
                why = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
                log.warning("cuda: the MPS control daemon of %s did not quit: %s", uuid, why)
                return False
            log.info("cuda: stopped the MPS control daemon of %s", uuid)
            return True

    def users(self, uuid: str) -> list[str]:
        """The workload ids counted on the GPU."""
        folder = self._users(uuid)
        if not folder.is_dir():
            return []
        return sorted(p.read_text().strip() for p in folder.iterdir())


def _user_name(workload_id: str) -> str:
    return hashlib.sha256(workload_id.encode()).hexdigest()[:32]
