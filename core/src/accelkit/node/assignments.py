"""Writing the pinned AUTO_SPLIT assignment (``<state-dir>/assignments.json``).

The format and how every process applies it are in :mod:`accelkit.host.pinning`. A change
replaces the file (a temporary file, synced, renamed, the directory synced) under an exclusive
``flock`` of ``assignments.lock``, so a crash leaves the old or the new file, never half of one,
and two writers never lose each other's change: :func:`update_pinned` reads, changes and writes
under the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from accelkit.errors import ConfigError
from accelkit.host.pinning import ASSIGNMENTS_FILE, PinnedAssignment, read_pinned
from accelkit.workload.state_dir import KEY, secure_file, secure_state_dir

__all__ = ["update_pinned"]

LOCK_FILE = "assignments.lock"

Change = Callable[[PinnedAssignment | None], PinnedAssignment | None]


@contextlib.contextmanager
def _locked(state_dir: Path, source: str | None) -> Iterator[None]:
    secure_state_dir(state_dir, source=source)
    lock = state_dir / LOCK_FILE
    secure_file(lock, source=source, create=True)
    fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update_pinned(
    state_dir: Path | str, change: Change, *, source: str | None = None
) -> PinnedAssignment | None:
    """Apply ``change`` to the pinned assignment under the lock; what was written.

    ``change`` gets the current pin (``None``: none) and returns the new one, or ``None`` to
    leave the file as it is.
    """
    directory = Path(state_dir)
    with _locked(directory, source):
        new = change(read_pinned(directory, source=source))
        if new is not None:
            _write(directory, new, source)
        return new


def _write(directory: Path, pinned: PinnedAssignment, source: str | None) -> None:
    path = directory / ASSIGNMENTS_FILE
    tmp = path.with_name(f".{ASSIGNMENTS_FILE}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # left by a writer of this pid that was killed
        with os.fdopen(os.open(tmp, flags, 0o600), "wb") as out:
            out.write(json.dumps(pinned.to_json(), indent=1).encode() + b"\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        msg = f"assignments {str(path)!r}: cannot write it: {exc.strerror or exc}"
        raise ConfigError(msg, file=source, key=KEY) from exc
