"""The state directory is trusted only when it is ours and cannot be swapped (DESIGN §17, §18).

``state-dir`` and every file accelkit keeps in it must belong to the user running accelkit and
be writable by nobody else; otherwise another local user could plant symlinks (making accelkit
overwrite any file), forge ledger records, or move our files away.

:func:`open_state_dir` opens the directory **once**, one path component at a time from ``/``
(``O_DIRECTORY | O_NOFOLLOW`` relative to the component before), and returns the descriptor
that every file of it is then opened relative to: once opened, renaming or replacing the path
(a symbolic link swapped to another directory) no longer changes which directory accelkit uses.
On the way it refuses

* a directory on the path that others can write (group or world write, or owned by a user
  other than root and us), unless it is root's and sticky (``/tmp``): its owner or its writers
  could rename the next component and put another directory in its place;
* a symbolic link on the path that neither root nor we own (one planted in ``/tmp`` by another
  user); a link of ours or root's is followed, its target checked the same way;
* a state directory owned by another user, or writable by group or others.

A missing state directory (and missing parents) is created ``0700``. :func:`secure_file`
refuses a symlink, a non-regular file, a file of another user or one writable by others. All
raise :class:`~accelkit.errors.ConfigError` naming the path, its owner and the fix, under the
key ``resource.state-dir``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from pathlib import Path

from accelkit.config import STATE_DIR_KEY
from accelkit.errors import ConfigError

__all__ = ["dir_path", "open_state_dir", "secure_file", "secure_state_dir"]

KEY = STATE_DIR_KEY
#: symbolic links followed on the way to the state directory at most (the kernel's limit)
MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _check_on_the_way(path: Path, info: os.stat_result, source: str | None) -> None:
    """A directory the state directory is reached through: nobody else may swap its entries."""
    if info.st_uid == 0 and info.st_mode & stat.S_ISVTX:
        return  # root's sticky directory (/tmp): others cannot rename what is not theirs
    others = bool(info.st_mode & stat.S_IWOTH) or (
        bool(info.st_mode & stat.S_IWGRP) and info.st_gid != 0
    )
    if others or (not _trusted(info.st_uid) and info.st_mode & stat.S_IWUSR):
        raise _refuse(
            path,
            f"is reached through {str(path)!r}, which others can write (owner "
            f"{_owner(info.st_uid)}, mode {stat.filemode(info.st_mode)}): they could put another "
            "directory in its place",
            "choose a state-dir whose parents only root or you can write",
            source,
        )


def _open_dir(name: str, parent: int, create: bool) -> int:
    """Open ``name`` in ``parent`` without following a link; create it (0700) if missing."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):  # made meanwhile by another accelkit process
        os.mkdir(name, 0o700, dir_fd=parent)
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def open_state_dir(path: Path, *, source: str | None = None, create: bool = True) -> int:
    """The state directory's descriptor, opened component by component (module docstring).

    Missing directories are created ``0700`` (with ``create``; else ``FileNotFoundError``).
    The caller closes the descriptor.

    Raises:
        ConfigError: the directory cannot be opened, or is not safe to use.
        FileNotFoundError: it does not exist and ``create`` is false.
    """
    pending = list(Path(os.path.abspath(path)).parts[1:])
    current, shown, links = os.open("/", _DIR_FLAGS), Path("/"), 0
    try:
        while pending:
            name = pending.pop(0)
            _check_on_the_way(shown, os.fstat(current), source)
            try:
                opened = _open_dir(name, current, create)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                target = _followed_link(name, current, shown / name, Path(path), source)
                links += 1
                if links > MAX_LINKS:
                    msg = f"the state directory {str(path)!r}: too many symbolic links"
                    raise ConfigError(msg, file=source, key=KEY) from None
                pending[:0] = list(Path(target).parts)
                if target.startswith("/"):
                    pending.pop(0)
                    os.close(current)
                    current, shown = os.open("/", _DIR_FLAGS), Path("/")
                continue
            os.close(current)
            current = opened
            shown = shown.parent if name == ".." else shown / name
        _check(Path(path), os.fstat(current), source)
    except FileNotFoundError as exc:
        os.close(current)
        if not create:
            raise
        # made and gone at once, or a file system that makes no directories (/proc)
        msg = f"cannot create the state directory {str(path)!r}: {exc.strerror or exc}"
        raise ConfigError(msg, file=source, key=KEY) from None
    except ConfigError:
        os.close(current)
        raise
    except OSError as exc:
        os.close(current)
        reason = exc.strerror or type(exc).__name__
        msg = f"cannot use the state directory {str(path)!r}: {reason}"
        raise ConfigError(msg, file=source, key=KEY) from exc
    return current


def _followed_link(name: str, parent: int, shown: Path, final: Path, source: str | None) -> str:
    """The target of the link ``name`` in ``parent``, when it may be followed."""
    info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if not stat.S_ISLNK(info.st_mode):
        msg = f"the state directory {str(shown)!r} is not a directory"
        if shown != final:
            msg = f"{str(shown)!r}, on the way to the state directory {str(final)!r}, "
            msg += "is not a directory"
        raise ConfigError(msg, file=source, key=KEY)
    target = os.readlink(name, dir_fd=parent)
    if not _trusted(info.st_uid):
        raise _refuse(
            shown,
            f"is a symbolic link (to {target!r}) owned by {_owner(info.st_uid)}, who could point "
            "it at another directory",
            f"set state-dir to a directory of yours, not through {str(shown)!r}",
            source,
        )
    with contextlib.suppress(FileNotFoundError):
        os.stat(name, dir_fd=parent)  # a link to nothing: say so rather than create its target
        return target
    msg = (
        f"the state directory {str(shown)!r} is a symbolic link to {target!r}, which does not exist"
    )
    raise ConfigError(msg, file=source, key=KEY)


def dir_path(fd: int) -> Path:
    """A path that reaches the directory of descriptor ``fd`` for a library that needs a path
    (SQLite): ``/proc/self/fd/N``. The kernel resolves it to the directory the descriptor
    holds, whatever its path has become since it was opened."""
    return Path(f"/proc/self/fd/{fd}")


def secure_state_dir(path: Path, *, source: str | None = None) -> Path:
    """Create ``path`` (mode 0700) or check the existing one; the directory to use.

    Raises:
        ConfigError: the directory cannot be created, or is not safe to use.
    """
    try:
        fd = open_state_dir(path, source=source)
    except FileNotFoundError as exc:  # pragma: no cover - created above
        msg = f"cannot use the state directory {str(path)!r}: {exc.strerror}"
        raise ConfigError(msg, file=source, key=KEY) from exc
    os.close(fd)
    return path


def secure_file(
    path: Path,
    *,
    source: str | None = None,
    create: bool = False,
    dir_fd: int | None = None,
) -> bool:
    """Check a file of the state directory; ``False`` when it does not exist.

    With ``dir_fd``, ``path`` is the file's name in that directory (messages show it as is).
    With ``create``, a missing file is created empty (mode 0600) without following symlinks.
    """
    name = path.name if dir_fd is not None else path
    if create:
        try:
            fd = os.open(
                name,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                0o600,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            info = _lstat(path, source, dir_fd)
            if info is not None and stat.S_ISLNK(info.st_mode):
                raise _refuse(path, "is a symbolic link", f"remove {str(path)!r}", source) from exc
            msg = f"cannot open {str(path)!r}: {exc.strerror or exc}"
            raise ConfigError(msg, file=source, key=KEY) from exc
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
    else:
        found = _lstat(path, source, dir_fd)
        if found is None:
            return False
        info = found
    if stat.S_ISLNK(info.st_mode):
        raise _refuse(path, "is a symbolic link", f"remove {str(path)!r}", source)
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(path, "is not a regular file", f"remove {str(path)!r}", source)
    _check(path, info, source)
    return True


def _lstat(path: Path, source: str | None, dir_fd: int | None = None) -> os.stat_result | None:
    try:
        if dir_fd is not None:
            return os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        msg = f"cannot use {str(path)!r}: {exc.strerror or exc}"
        raise ConfigError(msg, file=source, key=KEY) from exc
