"""Classes that distributions register through a hook, collected as hatchling's ``ClassRegister``.

Runtimes (``accelkit_runtimes``) and bridges (``accelkit_bridges``) are extension points of the
same shape: each distribution of the ``accelkit`` entry-point group returns classes from a hook,
and accelkit's own are registered through the very same hook under a name of their own.
:func:`collect_classes` asks each distribution on its own under the call timeout, checks every
class (a subclass of the base, a valid ``name``, nothing abstract left), collects accelkit's own
first (a name they use is theirs) and refuses a name claimed twice, naming both. What is
refused is said through ``warn`` and leaves the rest working.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from decimal import Decimal
from typing import Any

import pluggy

from accelkit.calls import call_blocking
from accelkit.registry import hook_of, one_result

__all__ = ["DEFAULT_TIMEOUT", "Warn", "collect_classes", "log_warning"]

log = logging.getLogger(__name__)

Warn = Callable[[str], None]

#: seconds a distribution's hook may take, where no call timeout is given
DEFAULT_TIMEOUT = 30.0


def log_warning(text: str) -> None:
    """The default ``warn``: a warning in the log."""
    log.warning("%s", text)


def _problem(
    kind: str, base: type, where: str, cls: object, reserved: Collection[str]
) -> str | None:
    """Why ``cls`` cannot be registered as a ``kind``, or ``None``."""
    if not isinstance(cls, type) or not issubclass(cls, base):
        return f"{where} returned {cls!r}, which is not a {base.__name__} subclass"
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name != name.strip():
        return f"{kind} {cls.__name__} of {where} has no valid 'name' (got {name!r})"
    if name in reserved:
        return f"{kind} {cls.__name__} of {where} takes the name {name!r} of an accelkit command"
    if abstract := getattr(cls, "__abstractmethods__", None):
        missing = ", ".join(sorted(abstract))
        return f"{kind} {name!r} of {where} does not implement {missing}"
    return None


def collect_classes(
    pm: pluggy.PluginManager,
    hook_name: str,
    base: type[Any],
    *,
    kind: str,
    builtin: str,
    reserved: Collection[str] = (),
    claimed: Mapping[str, str] | None = None,
    timeout: Decimal | float = DEFAULT_TIMEOUT,
    warn: Warn = log_warning,
) -> dict[str, type[Any]]:
    """Every subclass of ``base`` registered through ``hook_name``, by its ``name``, those of
    the plugin ``builtin`` first; a distribution that raises, returns something else, or
    claims a name taken (or one of ``reserved``) is named in ``warn`` and left out.

    With ``claimed`` (a name to its class's name) the plugin ``builtin`` is not asked: its
    names are taken as ``claimed`` says and only the other distributions' classes returned.
    """
    impls = [
        impl
        for impl in getattr(pm.hook, hook_name).get_hookimpls()
        if not (impl.wrapper or impl.hookwrapper)
        and (claimed is None or impl.plugin_name != builtin)
    ]
    impls.sort(key=lambda impl: impl.plugin_name != builtin)
    owners = {name: f"{cls} (plugin {builtin!r})" for name, cls in (claimed or {}).items()}
    found: dict[str, type[Any]] = {}
    for impl in impls:
        where = f"plugin {impl.plugin_name!r}"
        hook = hook_of(pm, hook_name, impl.plugin_name)
        try:
            produced = one_result(call_blocking(impl.plugin_name, hook_name, timeout, hook))
            classes = list(produced or ())
        except Exception as exc:
            warn(f"{where} failed to register its {kind}s: {type(exc).__name__}: {exc}")
            continue
        for cls in classes:
            if (problem := _problem(kind, base, where, cls, reserved)) is not None:
                warn(problem)
                continue
            name: str = cls.name
            if (prev := owners.get(name)) is not None:
                warn(
                    f"{kind} name {name!r} claimed by both {prev} "
                    f"and {cls.__name__} ({where}); the first is kept"
                )
                continue
            owners[name] = f"{cls.__name__} ({where})"
            found[name] = cls
    return found
