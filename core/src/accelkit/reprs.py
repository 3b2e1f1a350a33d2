"""One ``__repr__`` for attrs classes, written as attrs would write it.

attrs compiles a ``__repr__`` for every class it makes when the class's module is imported; on
the ~60 classes every command imports that is a fair part of its start. A class made with
``repr=False`` and ``__repr__ = attrs_repr`` reads the same and has none compiled::

    @attrs.frozen(repr=False)
    class Grant:
        __repr__ = attrs_repr

        slot: str
"""

from __future__ import annotations

import threading
from typing import cast

import attrs

__all__ = ["attrs_repr"]

#: the objects whose repr is being made, per thread (a cycle shows as ``...``, as in attrs)
_REPRING = threading.local()


def attrs_repr(self: object) -> str:
    """The repr attrs would generate for ``self`` (``Name(a=1, b='x')``, fields shown as their
    ``repr`` option says), from one function: a class made with ``repr=False`` and
    ``__repr__ = attrs_repr`` has no repr compiled for it when its module is imported."""
    busy: set[int] = _REPRING.__dict__.setdefault("ids", set())
    if id(self) in busy:
        return "..."
    busy.add(id(self))
    try:
        shown = ", ".join(
            f"{a.name}={(a.repr if callable(a.repr) else repr)(getattr(self, a.name))}"
            for a in attrs.fields(cast("type[attrs.AttrsInstance]", self.__class__))
            if a.repr
        )
        return f"{self.__class__.__qualname__.rsplit('>.', 1)[-1]}({shown})"
    finally:
        busy.discard(id(self))
