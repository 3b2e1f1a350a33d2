"""Finding the line of a TOML file where a key path is written, for error messages.

A light scan of the text (table headers, ``[[array]]`` headers and ``key =`` lines), not a
second parser: it knows where a key is written, or the line of the inline table holding it,
and answers ``None`` when it cannot tell.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from accelkit.config.converter import KeyPath
from accelkit.errors import ConfigError

__all__ = ["line_of", "with_lines"]

_PART = r'(?:[A-Za-z0-9_-]+|"[^"]*"|\'[^\']*\')'
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?")
_KEY = re.compile(rf"^\s*({_DOTTED})\s*=")
_SPLIT = re.compile(_PART)


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip("\"'") for p in _SPLIT.findall(dotted))


class _Tables:
    """The key path of each header, with the current index of every array of tables."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, ...], int] = {}

    def resolve(self, names: tuple[str, ...]) -> KeyPath:
        path: list[str | int] = []
        for depth, name in enumerate(names):
            path.append(name)
            if (index := self.index.get(names[: depth + 1])) is not None:
                path.append(index)
        return tuple(path)

    def next_element(self, names: tuple[str, ...]) -> None:
        self.index[names] = self.index.get(names, -1) + 1
        for other in [n for n in self.index if len(n) > len(names) and n[: len(names)] == names]:
            del self.index[other]  # a new [[kinds]] starts its [[kinds.devices]] afresh


def line_of(text: str, path: KeyPath) -> int | None:
    """The 1-based line where ``path`` is written (or the line holding it), else ``None``."""
    tables = _Tables()
    current: KeyPath = ()
    holder: int | None = None
    depth = 0
    # TOML ends lines with \n only; str.splitlines would also split at \x85 or \u2028
    for number, line in enumerate(text.split("\n"), 1):
        if header := _HEADER.match(line):
            names = _parts(header[2])
            if header[1] == "[[":
                tables.next_element(names)
            current = tables.resolve(names)
            written = current
        elif key := _KEY.match(line):
            written = (*current, *_parts(key[1]))
        else:
            continue
        if written == path:
            return number
        if len(written) > depth and path[: len(written)] == written:
            holder, depth = number, len(written)  # the deepest table or key holding it
    return holder


def with_lines(errors: Iterable[ConfigError], text: str) -> list[ConfigError]:
    """The same errors, each with the line of its key where it can be found in ``text``."""
    located = []
    for error in errors:
        line = error.line
        if line is None and error.key is not None:
            line = line_of(text, _key_path(error.key))
        located.append(_with_line(error, line))
    return located


def _with_line(error: ConfigError, line: int | None) -> ConfigError:
    if line == error.line:
        return error
    return ConfigError(error.message, file=error.file, key=error.key, agent=error.agent, line=line)


_INDEX = re.compile(r"\[(\d+)\]")


def _key_path(key: str) -> KeyPath:
    """Split ``agents[0].resource.cpu`` back into parts (plugin names hold no dots)."""
    parts: list[str | int] = []
    for piece in key.split("."):
        name, *indexes = _INDEX.split(piece)
        if name:
            parts.append(name)
        parts.extend(int(i) for i in indexes if i)
    return tuple(parts)
