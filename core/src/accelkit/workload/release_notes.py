"""Telling the accelkit process that runs a workload who released it.

``accelkit release`` ends a workload that another ``accelkit run`` runs by sending that process
SIGTERM, as anyone could; so that the run can say on its stderr that it was *released* (and by
whom) rather than only exit 143, release first leaves a note in the state directory,
``released/<owner pid>``, holding the owner's start time (a reused pid finds no note of its own)
and who released it. The run takes the note once its workload has ended. Notes are best effort:
one that cannot be written or read changes nothing but the message.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from accelkit.errors import ConfigError
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.workload.state_dir import open_state_dir

__all__ = ["drop_release_note", "note_release", "take_release_note"]

NOTES_DIR = "released"
_MAX_NOTE = 4096


def _notes(state_dir: Path, *, create: bool) -> int | None:
    """The notes directory's descriptor, or ``None`` where there is none to use."""
    try:
        top = open_state_dir(state_dir, create=False)
    except (ConfigError, OSError):
        return None
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(NOTES_DIR, 0o700, dir_fd=top)
        return os.open(NOTES_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    except OSError:
        return None
    finally:
        os.close(top)


def note_release(state_dir: Path, owner: ProcessStamp, by: str) -> None:
    """Leave ``owner`` the note that ``by`` releases its workload."""
    notes = _notes(state_dir, create=True)
    if notes is None:
        return
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        fd = os.open(str(owner.pid), flags, 0o600, dir_fd=notes)
        try:
            os.write(fd, f"{owner.start_time}\n{by}".encode())
        finally:
            os.close(fd)
    except OSError:
        pass
    finally:
        os.close(notes)


def take_release_note(state_dir: Path, me: ProcessStamp | None = None) -> str | None:
    """Who released this process's workload, if anyone did; the note is removed."""
    me = me or ProcessStamp.of(os.getpid())
    if me is None:
        return None
    notes = _notes(state_dir, create=False)
    if notes is None:
        return None
    try:
        fd = os.open(str(me.pid), os.O_RDONLY | os.O_NOFOLLOW, dir_fd=notes)
        try:
            text = os.read(fd, _MAX_NOTE).decode(errors="replace")
        finally:
            os.close(fd)
        os.unlink(str(me.pid), dir_fd=notes)
    except OSError:
        return None
    finally:
        os.close(notes)
    start, _, by = text.partition("\n")
    return by if start == me.start_time and by else None


def drop_release_note(state_dir: Path, owner: ProcessStamp) -> None:
    """Remove a note its owner will never take (it was killed, or already gone)."""
    notes = _notes(state_dir, create=False)
    if notes is None:
        return
    try:
        with contextlib.suppress(OSError):
            os.unlink(str(owner.pid), dir_fd=notes)
    finally:
        os.close(notes)
