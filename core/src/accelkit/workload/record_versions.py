"""Versions of the ledger record's JSON and a converter from each to the next.

Every record carries ``"format": "accelkit-ledger"`` and ``"version": N``. Records written
before versions were numbered say ``"format": "accelkit-ledger/1"`` and carry no version: they
are version 1. Reading a record converts it step by step, ``1 -> 2 -> ... ->``
:data:`CURRENT_VERSION`, then parses only the current shape, so the parser never guesses which
keys an older accelkit left out; a record newer than this accelkit is refused, naming both
versions (the kubelet's checkpoints and the DRA example driver keep their records the same way).

Version history:

1. ``format`` ``accelkit-ledger/1``; ``started`` (hook intents), ``teardown`` (attempts and
   back-off) and ``handle`` (the runtime's identity of the workload) may be absent or
   ``null``, meaning none.
2. ``format`` ``accelkit-ledger`` with ``version``; ``started``, ``teardown`` (an object) and
   ``handle`` always present.
3. ``data``: per plugin, the resource data its ``pre_create`` returned (what it says of the
   grant, such as how a GPU share is held); ``{}`` for records of version 2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "CONVERTERS",
    "CURRENT_VERSION",
    "FORMAT",
    "V1_FORMAT",
    "LedgerFormatError",
    "to_current",
    "version_of",
]

FORMAT = "accelkit-ledger"
#: the format string of the records that carry no version
V1_FORMAT = "accelkit-ledger/1"
CURRENT_VERSION = 3


class LedgerFormatError(ValueError):
    """A ledger file does not hold a valid record."""


def version_of(data: object) -> int:
    """The record version of ``data``; :class:`LedgerFormatError` when it is no ledger record."""
    if not isinstance(data, Mapping):
        msg = f"not a ledger record of format {FORMAT!r}"
        raise LedgerFormatError(msg)
    if "version" not in data:
        if data.get("format") == V1_FORMAT:
            return 1
        msg = f"not a ledger record of format {FORMAT!r}"
        raise LedgerFormatError(msg)
    version = data["version"]
    if data.get("format") != FORMAT:
        msg = f"not a ledger record of format {FORMAT!r} (format {data.get('format')!r})"
        raise LedgerFormatError(msg)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        msg = f"malformed ledger record version: {version!r}"
        raise LedgerFormatError(msg)
    return version


def _v1_to_v2(data: Mapping[str, Any]) -> dict[str, Any]:
    """Version 1 left out what a record did not yet need; version 2 says it."""
    converted = {k: v for k, v in data.items() if k != "format"}
    converted["format"] = FORMAT
    converted["version"] = 2
    if converted.get("started") is None:
        converted["started"] = {}
    if converted.get("teardown") is None:
        converted["teardown"] = {"attempts": 0, "retry_after": None}
    converted.setdefault("handle", None)
    return converted


def _v2_to_v3(data: Mapping[str, Any]) -> dict[str, Any]:
    """Version 3 keeps what each plugin's ``pre_create`` said of the grant: none yet."""
    return {**data, "version": 3, "data": {}}


#: version N -> the converter to version N + 1; one for every version before the current
CONVERTERS: Mapping[int, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
}


def to_current(data: object) -> Mapping[str, Any]:
    """``data`` converted to :data:`CURRENT_VERSION`, one version at a time."""
    if (
        data.__class__ is dict
        and (written := data.get("version")).__class__ is int
        and written == CURRENT_VERSION
        and data.get("format") == FORMAT
    ):
        return data  # as written now (nearly every record): what version_of would find
    version = version_of(data)
    if version > CURRENT_VERSION:
        msg = (
            f"a ledger record of version {version}, written by a newer accelkit; this one "
            f"reads versions 1 to {CURRENT_VERSION}"
        )
        raise LedgerFormatError(msg)
    assert isinstance(data, Mapping)  # version_of refuses anything else
    current: Mapping[str, Any] = data
    while version < CURRENT_VERSION:
        current = CONVERTERS[version](current)
        version += 1
    return current
