"""The state directory is trusted only when it is ours (DESIGN §17).

``state-dir`` and every file accelkit keeps in it must belong to the user running accelkit and
be writable by nobody else; otherwise another local user could plant symlinks (making accelkit
overwrite any file), forge ledger records, or move our files away. :func:`secure_state_dir`
creates the directory ``0700`` when it is missing and refuses one owned by another user or
writable by group or others; :func:`secure_file` refuses a symlink, a non-regular file, a file
of another user or one writable by others. Both raise :class:`~accelkit.errors.ConfigError`
naming the path, its owner and the fix, under the key ``resource.state-dir``.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from accelkit.config import STATE_DIR_KEY
from accelkit.errors import ConfigError

__all__ = ["secure_file", "secure_state_dir"]

KEY = STATE_DIR_KEY


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _refuse(path: Path, what: str, fix: str, source: str | None) -> ConfigError:
    return ConfigError(f"unsafe state directory: {str(path)!r} {what}; {fix}", file=source, key=KEY)


def _check(path: Path, info: os.stat_result, source: str | None) -> None:
    me = os.geteuid()
    if info.st_uid != me:
        raise _refuse(
            path,
            f"is owned by {_owner(info.st_uid)}, not by {_owner(me)} who runs accelkit",
            f"remove it, or 'chown {_owner(me).split()[0]} {path}' if it is really yours",
            source,
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(
            path,
            f"is writable by group or others (mode {stat.filemode(info.st_mode)})",
            f"'chmod go-w {path}'",
            source,
        )


def secure_state_dir(path: Path, *, source: str | None = None) -> Path:
    """Create ``path`` (mode 0700) or check the existing one; the directory to use.

    Raises:
        ConfigError: the directory cannot be created, or is not safe to use.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(path)  # a symlinked state-dir is allowed: its target is checked
    except FileExistsError as exc:  # something that is not a directory, or a link to nothing
        if path.is_symlink():
            msg = (
                f"the state directory {str(path)!r} is a symbolic link to "
                f"{os.readlink(path)!r}, which does not exist"
            )
        else:
            msg = f"the state directory {str(path)!r} is not a directory"
        raise ConfigError(msg, file=source, key=KEY) from exc
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        msg = f"cannot use the state directory {str(path)!r}: {reason}"
        raise ConfigError(msg, file=source, key=KEY) from exc
    if not stat.S_ISDIR(info.st_mode):
        msg = f"the state directory {str(path)!r} is not a directory"
        raise ConfigError(msg, file=source, key=KEY)
    _check(path, info, source)
    return path


def secure_file(path: Path, *, source: str | None = None, create: bool = False) -> bool:
    """Check a file of the state directory; ``False`` when it does not exist.

    With ``create``, a missing file is created empty (mode 0600) without following symlinks.
    """
    if create:
        try:
            fd = os.open(
                path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600
            )
        except OSError as exc:
            info = _lstat(path, source)
            if info is not None and stat.S_ISLNK(info.st_mode):
                raise _refuse(path, "is a symbolic link", f"remove {str(path)!r}", source) from exc
            msg = f"cannot open {str(path)!r}: {exc.strerror or exc}"
            raise ConfigError(msg, file=source, key=KEY) from exc
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
    else:
        found = _lstat(path, source)
        if found is None:
            return False
        info = found
    if stat.S_ISLNK(info.st_mode):
        raise _refuse(path, "is a symbolic link", f"remove {str(path)!r}", source)
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(path, "is not a regular file", f"remove {str(path)!r}", source)
    _check(path, info, source)
    return True


def _lstat(path: Path, source: str | None) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        msg = f"cannot use {str(path)!r}: {exc.strerror or exc}"
        raise ConfigError(msg, file=source, key=KEY) from exc
