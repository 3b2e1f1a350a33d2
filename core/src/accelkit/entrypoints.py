"""The installed entry points of a group, found without importing ``importlib.metadata``.

Importing ``importlib.metadata`` (and the email, zip and csv modules it needs) and walking
every installed distribution's entry points through it is about a twentieth of a short
command's time. :func:`entry_points` reads the same directories in the same order, the first
distribution of a name winning, and parses only a file that names the group; where the
interpreter could find distributions some other way (a zip or an egg on the path, a finder of
its own on ``sys.meta_path``), ``importlib.metadata`` answers.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from importlib.metadata import Distribution

    class EntryPoint(Protocol):
        """What the loader uses of an entry point (``importlib.metadata.EntryPoint`` has it)."""

        @property
        def name(self) -> str: ...
        @property
        def value(self) -> str: ...
        @property
        def dist(self) -> Distribution | None: ...
        def load(self) -> Any: ...


__all__ = ["entry_points"]

#: ``module[:attr]`` of an entry point's value, as ``importlib.metadata`` reads it (compiled
#: by ``re`` on first use: most commands load one distribution or none)
_ENTRY_VALUE = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"


class _FoundEntryPoint:
    """An entry point found by :func:`entry_points` in a metadata directory's
    ``entry_points.txt``; loaded and identified as ``importlib.metadata.EntryPoint``."""

    __slots__ = ("_path", "name", "value")

    def __init__(self, name: str, value: str, path: str) -> None:
        self.name, self.value, self._path = name, value, path

    def load(self) -> Any:
        """The object the value names: its module imported, its attributes looked up."""
        match = re.match(_ENTRY_VALUE, self.value)
        if match is None:
            msg = f"entry point {self.name!r}: {self.value!r} names no module"
            raise ValueError(msg)
        attributes = filter(None, (match.group("attr") or "").split("."))
        return functools.reduce(getattr, attributes, importlib.import_module(match["module"]))

    @property
    def dist(self) -> Distribution:
        """The distribution that declares it (its metadata read only when asked for)."""
        from importlib.metadata import PathDistribution
        from pathlib import Path

        return PathDistribution(Path(self._path))


def entry_points(group: str) -> list[EntryPoint]:
    """The installed entry points of ``group``, as ``importlib.metadata.entry_points(group=)``
    gives them, in its order."""
    found = _scan_entry_points(group)
    if found is None:
        from importlib import metadata

        return list(metadata.entry_points(group=group))
    return found


def _scan_entry_points(group: str) -> list[EntryPoint] | None:
    """:func:`entry_points` read from the path's directories; ``None`` where that could miss
    distributions that ``importlib.metadata`` would find."""
    from importlib.machinery import PathFinder

    finders = [f for f in sys.meta_path if hasattr(f, "find_distributions")]
    if finders != [PathFinder]:
        return None
    header = f"[{group}]"
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for root in sys.path:
        infos = _metadata_dirs(root)
        if infos is None:
            return None
        for name, path in infos:
            if name in seen:
                continue
            seen.add(name)
            try:
                with open(os.path.join(path, "entry_points.txt"), encoding="utf-8") as file:
                    text = file.read()
            except OSError:  # none, or an egg-info file (no entry points), or unreadable
                continue
            if header in text:
                found += _group_entries(text, group, path)
    return found


def _metadata_dirs(root: str) -> Iterator[tuple[str, str]] | None:
    """The normalized name and path of each metadata directory under ``root``, grouped by
    name in the order ``importlib.metadata`` takes them; ``None`` for what only it reads."""
    try:
        children = os.listdir(root or ".")
    except OSError:
        # a zip file (importlib.metadata reads those) or no directory at all
        return None if os.path.isfile(root) else iter(())
    if os.path.basename(root).lower().endswith(".egg"):
        return None
    infos: dict[str, list[str]] = {}
    for child in children:
        low = child.lower()
        if low.endswith((".dist-info", ".egg-info")):
            if not child.endswith((".dist-info", ".egg-info")):  # its name from its metadata
                return None
            name = low.rpartition(".")[0].partition("-")[0]
            normalized = re.sub(r"[-_.]+", "-", name).replace("-", "_")
            infos.setdefault(normalized, []).append(os.path.join(root, child))
    return ((name, path) for name, paths in infos.items() for path in paths)


def _group_entries(text: str, group: str, path: str) -> list[EntryPoint]:
    """The entries of ``[group]`` in an ``entry_points.txt``, read as ``importlib.metadata``
    reads it."""
    section = None
    entries: list[EntryPoint] = []
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section == group:
            name, value = line.split("=", 1)
            entries.append(_FoundEntryPoint(name.strip(), value.strip(), path))
    return entries
