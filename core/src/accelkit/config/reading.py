"""Reading a TOML file safely: a regular file, at most 16 MiB, UTF-8 (DESIGN §17).

A UTF-8 byte-order mark at the start is skipped; nesting too deep for the parser is a config
error like any other, not a crash.

``/dev/zero``, a FIFO or a directory is refused before a byte is read, and no read is larger
than the limit, so a bad path never grows memory without bound or blocks the command.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from accelkit.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "TomlDocument", "read_toml"]

MAX_CONFIG_BYTES = 16 * 1024 * 1024
_BOM = b"\xef\xbb\xbf"

#: the parsed table and the text it came from (for line numbers)
TomlDocument = tuple[dict[str, Any], str]


def read_toml(path: Path, what: str, *, key: str | None = None) -> TomlDocument:
    """Read and parse ``path``; every failure is a :class:`ConfigError` naming the file.

    ``what`` names the file in messages ("the host config"); ``key`` is the setting that named
    the file, if any (``config-file``).
    """
    raw = _read_bounded(path, what, key).removeprefix(_BOM)  # as Windows editors save it
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{what} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        raise ConfigError(msg, file=str(path), key=key) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        msg = f"malformed TOML: {exc}"
        line = re.search(r"at line (\d+)", str(exc))
        raise ConfigError(msg, file=str(path), line=int(line[1]) if line else None) from None
    except ValueError:  # Python's bound on the digits of an integer it converts
        msg = f"{what} holds an integer too long to read (more than 4,300 digits)"
        long = re.search(r"[0-9_]{4300}", text)
        at = text.count("\n", 0, long.start()) + 1 if long else None
        raise ConfigError(msg, file=str(path), key=key, line=at) from None
    except RecursionError:  # the parser recurses once per level of nested arrays or tables
        msg = f"{what} nests arrays or inline tables too deeply to be a configuration"
        raise ConfigError(msg, file=str(path), key=key) from None


def _read_bounded(path: Path, what: str, key: str | None) -> bytes:
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        msg = f"cannot read {what}: {exc.strerror or exc}"
        raise ConfigError(msg, file=str(path), key=key) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        msg = f"cannot read {what}: not a regular file"
        raise ConfigError(msg, file=str(path), key=key)
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            msg = f"cannot read {what}: {exc.strerror or exc}"
            raise ConfigError(msg, file=str(path), key=key) from None
    if len(data) > MAX_CONFIG_BYTES:
        msg = f"{what} is larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB"
        raise ConfigError(msg, file=str(path), key=key)
    return data
