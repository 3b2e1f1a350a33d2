"""What attrs itself writes, to hold the shared methods of :mod:`accelkit.reprs` to."""

from __future__ import annotations

from typing import Any

import attrs


def attrs_own_repr(instance: Any) -> str:
    """The repr attrs generates for a class with ``instance``'s fields and repr options."""
    cls = type(instance)
    twin = attrs.make_class(
        cls.__name__,
        {a.name: attrs.field(repr=a.repr, default=None) for a in attrs.fields(cls)},
    )
    twin.__qualname__ = cls.__qualname__
    return repr(twin(*(getattr(instance, a.name) for a in attrs.fields(cls))))
