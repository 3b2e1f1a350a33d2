"""Collecting configuration problems so one pass reports every one of them."""

from __future__ import annotations

from collections.abc import Sequence

from accelkit.errors import ConfigError, ConfigErrors


class ProblemList:
    """Configuration problems of one host config file, raised together at the end."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[ConfigError] = []

    def add(self, key: str, message: str, agent: str | None = None) -> None:
        """Record a problem with ``key`` (and ``agent``, where there is one)."""
        self.errors.append(ConfigError(message, file=self.source, key=key, agent=agent))

    def extend(self, errors: list[ConfigError]) -> None:
        """Record problems found elsewhere."""
        self.errors.extend(errors)

    def raise_any(self) -> None:
        """Raise the one problem found, or :class:`ConfigErrors` for several."""
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigErrors(self.errors)


def listing(ids: Sequence[str], limit: int = 8) -> str:
    """A short, readable list of ids for a message."""
    shown = ", ".join(repr(i) for i in ids[:limit])
    more = f", … ({len(ids) - limit} more)" if len(ids) > limit else ""
    return f"{shown}{more}" if ids else "none"
