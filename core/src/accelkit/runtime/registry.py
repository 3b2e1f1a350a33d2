"""The runtimes a node offers, by name (``accelkit run --runtime NAME``; DESIGN §14, §18).

Runtimes are an extension point like compute plugins: a distribution of the ``accelkit``
entry-point group implements ``accelkit_runtimes()`` returning runtime classes, and accelkit's
own are registered the same way (:mod:`accelkit.runtime.builtin`). :func:`runtime_classes`
collects them the way hatchling's ``ClassRegister`` does: each distribution asked on its own
under the call timeout, every class checked, a name claimed twice refused naming both. What is
refused is said as a warning and leaves the rest working.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from decimal import Decimal

import pluggy

from accelkit.calls import call_blocking
from accelkit.registry import hook_of, one_result
from accelkit.runtime import builtin
from accelkit.runtime.base import Runtime, TrackingRuntime

__all__ = [
    "default_runtimes",
    "installed_runtimes",
    "launching_names",
    "register_builtin",
    "runtime_classes",
]

log = logging.getLogger(__name__)

Warn = Callable[[str], None]

#: seconds a distribution's ``accelkit_runtimes`` may take, where no call timeout is given
DEFAULT_TIMEOUT = 30.0


def register_builtin(pm: pluggy.PluginManager) -> None:
    """Register accelkit's own runtimes on ``pm``, once."""
    if pm.get_plugin(builtin.NAME) is None:
        pm.register(builtin, name=builtin.NAME)


def _log_warning(text: str) -> None:
    log.warning("%s", text)


def _problem(where: str, cls: object) -> str | None:
    """Why ``cls`` cannot be a runtime, or ``None``."""
    if not isinstance(cls, type) or not issubclass(cls, Runtime):
        return f"{where} returned {cls!r}, which is not a Runtime subclass"
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name != name.strip():
        return f"runtime {cls.__name__} of {where} has no valid 'name' (got {name!r})"
    if getattr(cls, "__abstractmethods__", None):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        return f"runtime {name!r} of {where} does not implement {missing}"
    return None


def runtime_classes(
    pm: pluggy.PluginManager,
    *,
    timeout: Decimal | float = DEFAULT_TIMEOUT,
    warn: Warn = _log_warning,
) -> dict[str, type[Runtime]]:
    """Every registered runtime class by name, the built-ins first (a name they use is
    theirs); a distribution that raises, returns something else, or claims a name taken is
    named in ``warn`` and left out."""
    register_builtin(pm)
    impls = [
        impl
        for impl in pm.hook.accelkit_runtimes.get_hookimpls()
        if not (impl.wrapper or impl.hookwrapper)
    ]
    impls.sort(key=lambda impl: impl.plugin_name != builtin.NAME)
    found: dict[str, tuple[str, type[Runtime]]] = {}
    for impl in impls:
        where = f"plugin {impl.plugin_name!r}"
        hook = hook_of(pm, "accelkit_runtimes", impl.plugin_name)
        try:
            produced = one_result(
                call_blocking(impl.plugin_name, "accelkit_runtimes", timeout, hook)
            )
            classes = list(produced or ())
        except Exception as exc:
            warn(f"{where} failed to register its runtimes: {type(exc).__name__}: {exc}")
            continue
        for cls in classes:
            if (problem := _problem(where, cls)) is not None:
                warn(problem)
                continue
            if (prev := found.get(cls.name)) is not None:
                warn(
                    f"runtime name {cls.name!r} claimed by both {prev[1].__name__} "
                    f"({prev[0]}) and {cls.__name__} ({where}); the first is kept"
                )
                continue
            found[cls.name] = (where, cls)
    return {name: cls for name, (_, cls) in found.items()}


def installed_runtimes(
    pm: pluggy.PluginManager,
    *,
    timeout: Decimal | float = DEFAULT_TIMEOUT,
    warn: Warn = _log_warning,
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
