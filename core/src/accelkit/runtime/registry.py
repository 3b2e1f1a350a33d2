"""The runtimes a node offers, by name (``accelkit run --runtime NAME``; DESIGN §14, §18).

Runtimes are an extension point like compute plugins: a distribution of the ``accelkit``
entry-point group implements ``accelkit_runtimes()`` returning runtime classes, and accelkit's
own are registered the same way (:mod:`accelkit.runtime.builtin`). :func:`runtime_classes`
collects them (:func:`~accelkit.runtime.class_register.collect_classes`): each distribution
asked on its own under the call timeout, every class checked, a name claimed twice refused
naming both. What is refused is said as a warning and leaves the rest working.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal

import pluggy

from accelkit.runtime import builtin
from accelkit.runtime.base import Runtime, TrackingRuntime
from accelkit.runtime.class_register import DEFAULT_TIMEOUT, Warn, collect_classes, log_warning

log = logging.getLogger(__name__)

__all__ = [
    "RuntimesByName",
    "RuntimesOnDemand",
    "default_runtimes",
    "installed_runtimes",
    "installed_runtimes_by_name",
    "launching_names",
    "register_builtin",
    "runtime_classes",
]


def register_builtin(pm: pluggy.PluginManager) -> None:
    """Register accelkit's own runtimes on ``pm``, once."""
    if pm.get_plugin(builtin.NAME) is None:
        pm.register(builtin, name=builtin.NAME)


def runtime_classes(
    pm: pluggy.PluginManager,
    *,
    timeout: Decimal | float = DEFAULT_TIMEOUT,
    warn: Warn = log_warning,
) -> dict[str, type[Runtime]]:
    """Every registered runtime class by name, the built-ins first (a name they use is
    theirs); a distribution that raises, returns something else, or claims a name taken is
    named in ``warn`` and left out."""
    register_builtin(pm)
    return collect_classes(
        pm, "accelkit_runtimes", Runtime, kind="runtime", builtin=builtin.NAME,
        timeout=timeout, warn=warn,
    )  # fmt: skip


def installed_runtimes(
    pm: pluggy.PluginManager,
    *,
    timeout: Decimal | float = DEFAULT_TIMEOUT,
    warn: Warn = log_warning,
) -> dict[str, Runtime]:
    """One instance of every registered runtime; one whose constructor raises is named in
    ``warn`` and left out (nothing connects or starts yet)."""
    runtimes: dict[str, Runtime] = {}
    for name, cls in runtime_classes(pm, timeout=timeout, warn=warn).items():
        try:
            runtimes[name] = cls()
        except Exception as exc:
            warn(f"runtime {name!r} ({cls.__name__}) failed to start: {type(exc).__name__}: {exc}")
    return runtimes


def installed_runtimes_by_name(
    pm: pluggy.PluginManager,
    *,
    timeout: Decimal | float = DEFAULT_TIMEOUT,
    warn: Warn = log_warning,
) -> RuntimesByName:
    """Every registered runtime, as :func:`installed_runtimes` gives them, but accelkit's own
    imported and built the first time each is asked for: a node that runs a process imports
    no container engine's or tracker's code. The other distributions' are built now (one
    whose constructor raises is named in ``warn`` and left out)."""
    register_builtin(pm)
    claimed = {name: cls for name, (_, cls) in builtin.CLASSES.items()}
    others = collect_classes(
        pm, "accelkit_runtimes", Runtime, kind="runtime", builtin=builtin.NAME,
        claimed=claimed, timeout=timeout, warn=warn,
    )  # fmt: skip
    makers: dict[str, Callable[[], Runtime]] = {
        name: functools.partial(_built_in, name) for name in builtin.CLASSES
    }
    for name, cls in others.items():
        try:
            makers[name] = functools.partial(_same, cls())
        except Exception as exc:
            warn(f"runtime {name!r} ({cls.__name__}) failed to start: {type(exc).__name__}: {exc}")
    return RuntimesByName(makers)


def _built_in(name: str) -> Runtime:
    return builtin.builtin_class(name)()


def _same(runtime: Runtime) -> Runtime:
    return runtime


class RuntimesByName(Mapping[str, Runtime]):
    """Runtimes by name, each made by its maker the first time it is asked for."""

    def __init__(self, makers: Mapping[str, Callable[[], Runtime]]) -> None:
        self._makers = dict(makers)
        self._built: dict[str, Runtime] = {}

    def __getitem__(self, name: str) -> Runtime:
        if (runtime := self._built.get(name)) is None:
            runtime = self._built[name] = self._makers[name]()
        return runtime

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)

    def built(self) -> list[Runtime]:
        """The runtimes made so far (those to close)."""
        return list(self._built.values())


class RuntimesOnDemand(Mapping[str, Runtime]):
    """Runtimes by name, built by ``build`` (say, :func:`installed_runtimes`) on first use.

    A command that may need no runtime at all (``status``, where every workload's owner
    process runs and the ledger noted no container engine) then imports and builds none.
    """

    def __init__(self, build: Callable[[], Mapping[str, Runtime]]) -> None:
        self._build = build
        self._built: Mapping[str, Runtime] | None = None

    def _runtimes(self) -> Mapping[str, Runtime]:
        if self._built is None:
            self._built = self._build()
        return self._built

    def __getitem__(self, name: str) -> Runtime:
        return self._runtimes()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._runtimes())

    def __len__(self) -> int:
        return len(self._runtimes())

    @property
    def built(self) -> bool:
        """Whether the runtimes were asked for (and so built)."""
        return self._built is not None

    async def close(self) -> None:
        """Close the runtimes built, if any; a failure is logged, the others still closed."""
        for runtime in (self._built or {}).values():
            try:
                await runtime.close()
            except Exception:
                log.warning("closing runtime %r failed", runtime.name, exc_info=True)


def launching_names(classes: dict[str, type[Runtime]]) -> list[str]:
    """The runtimes that start workloads (``accelkit run`` offers them), not those that only
    track what a kubelet or Slurm runs."""
    return [name for name, cls in classes.items() if not issubclass(cls, TrackingRuntime)]


@functools.cache
def _builtin_classes() -> tuple[type[Runtime], ...]:
    return tuple(builtin.accelkit_runtimes())


def default_runtimes() -> dict[str, Runtime]:
    """The runtimes shipped with accelkit, ready to use; built on demand, nothing starts yet."""
    return {cls.name: cls() for cls in _builtin_classes()}
