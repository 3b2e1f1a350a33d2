"""Every error accelkit raises on purpose; all derive from :class:`AccelkitError`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, TypeVar

_View = TypeVar("_View")

__all__ = [
    "AccelkitError",
    "ConfigError",
    "ConfigErrors",
    "FractionalResourceFragmented",
    "HookConflict",
    "InsufficientResource",
    "InvalidResourceArgument",
    "InvalidResourceCombination",
    "NotMultipleOfQuantum",
    "PluginContractError",
    "PluginError",
    "PluginLoadError",
    "PluginTimeout",
    "PluginUnavailable",
    "ResourceError",
    "UnknownAgent",
    "WorkloadCreationDeferred",
    "WorkloadCreationDenied",
    "WorkloadError",
]


class AccelkitError(Exception):
    """Base of every error accelkit raises on purpose."""


class ConfigError(AccelkitError):
    """A host or plugin configuration is malformed.

    The message names the file, the key and, where there is one, the agent and the line of
    the file where the key is written.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        key: str | None = None,
        agent: str | None = None,
        line: int | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.key = key
        self.agent = agent
        self.line = line
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.file:
            where.append(f"{self.file}:{self.line}" if self.line else str(self.file))
        if self.agent:
            where.append(f"agent {self.agent!r}")
        if self.key:
            where.append(f"key {self.key!r}")
        return f"{': '.join(where)}: {self.message}" if where else self.message


class PluginError(AccelkitError):
    """A compute plugin could not be used."""


class PluginUnavailable(PluginError):
    """The plugin's hardware, driver or library is absent: not a failure."""


class PluginLoadError(PluginError):
    """A plugin raised while importing, initialising or discovering devices."""


class PluginContractError(PluginError):
    """A plugin breaks the interface contract (duplicate key, unprefixed slot, ...)."""


class PluginTimeout(PluginError):
    """A call into a plugin did not return within its time limit (DESIGN §4)."""


class ResourceError(AccelkitError):
    """An allocation request cannot be honoured; nothing was changed."""


class InsufficientResource(ResourceError):
    """Not enough free capacity for the request: ``slot``, ``requested``, ``allocatable``.

    ``args`` holds ``(slot, requested, allocatable, context_tag)``. Failed allocations are
    routine (agents probe for room), so unless a ``message`` is given the text is rendered
    only when it is read.
    """

    # The fields live in ``args``, which ``BaseException.__new__`` fills in C: the alloc
    # maps' fast paths build a refusal with that one call (:func:`refusal`).
    __slots__ = ("_message",)

    def __init__(
        self,
        message: str | None = None,
        *,
        slot: str,
        requested: Decimal,
        allocatable: Decimal,
        context_tag: str | None = None,
    ) -> None:
        # No super().__init__(): it would set args to the positional message.
        self.args = (slot, requested, allocatable, context_tag)
        self._message = message

    @property
    def slot(self) -> str:
        """The slot that has too little free."""
        slot: str = self.args[0]
        return slot

    @property
    def requested(self) -> Decimal:
        """The amount asked for."""
        requested: Decimal = self.args[1]
        return requested

    @property
    def allocatable(self) -> Decimal:
        """What the map could still grant of the slot."""
        allocatable: Decimal = self.args[2]
        return allocatable

    @property
    def context_tag(self) -> str | None:
        """The caller's tag (an agent's name), shown first in the message."""
        tag: str | None = self.args[3]
        return tag

    def __str__(self) -> str:
        try:
            message = self._message
        except AttributeError:  # built by refusal(), which sets args only
            message = None
        if message is None:
            from accelkit.types import describe_amount

            slot, requested, allocatable, tag = self.args
            prefix = f"[{tag}] " if tag else ""
            message = self._message = (
                f"{prefix}slot {slot!r}: requested {describe_amount(requested)}, "
                f"only {describe_amount(allocatable)} allocatable"
            )
        return message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # copy.copy and copy.deepcopy: the fields go back into args, a given message with them
        # (the class's own keyword-only __init__ cannot take args positionally)
        message = getattr(self, "_message", None)
        return (type(self).__new__, (type(self), *self.args), {"_message": message})


#: ``refusal(InsufficientResource, slot, requested, allocatable, context_tag)`` builds the
#: refusal ``InsufficientResource(slot=..., ...)`` would, in one call into C (the keyword call
#: of the class costs three times as much, and refusals are routine: W3 of the benchmarks
#: refuses 5,625 of its 20,000 operations, W4 2,370). The alloc maps' fast paths raise it.
refusal = InsufficientResource.__new__


class InvalidResourceArgument(ResourceError):
    """The request or allocation is malformed (negative, unknown device, outside the mask, ...)."""


class UnknownAgent(InvalidResourceArgument):
    """An agent id the node does not have; the message names the agents it has."""

    def __init__(self, agent: str, known: Iterable[str]) -> None:
        self.agent = agent
        self.known = tuple(sorted(known))
        super().__init__(f"unknown agent {agent!r} (agents: {', '.join(self.known) or 'none'})")

    @classmethod
    def look_up(cls, agents: Mapping[Any, _View], agent: str) -> _View:
        """``agents[agent]``; this error, naming the agents there are, when it is not there."""
        found = agents.get(agent)
        if found is None:
            raise cls(agent, agents)
        return found


class NotMultipleOfQuantum(ResourceError):
    """A fractional request is not a whole multiple of the map's quantum."""


class InvalidResourceCombination(ResourceError):
    """Mutually exclusive slot types were requested together."""


class FractionalResourceFragmented(ResourceError):
    """A fractional request would be spread over more devices than it needs."""


class WorkloadError(AccelkitError):
    """A workload's lifecycle could not proceed."""


class WorkloadCreationDenied(WorkloadError):
    """A lifecycle hook refuses the workload for good."""


class WorkloadCreationDeferred(WorkloadError):
    """A lifecycle hook cannot admit the workload now; the caller may retry later."""


class HookConflict(WorkloadError):
    """Two plugins' hooks returned different values for the same key."""


class ConfigErrors(ConfigError):
    """Several configuration problems found in one pass; ``errors`` lists each of them."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = list(errors)
        summary = f"{len(self.errors)} problem(s) in the configuration:\n" + "\n".join(
            f"  - {e}" for e in self.errors
        )
        super().__init__(summary)
