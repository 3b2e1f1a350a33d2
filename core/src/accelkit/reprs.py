"""The methods attrs would generate for a class, written once for all classes.

attrs compiles a ``__repr__``, ``__eq__`` and ``__hash__`` for every class it makes when the
class's module is imported; on the ~80 classes every command imports that is a fair part of its
start. A class that sets them to these functions reads, compares and hashes as attrs's would
and has none of them compiled (attrs leaves a method the class defines itself)::

    @attrs.frozen(repr=False)
    class Grant:
        __repr__ = attrs_repr
        __eq__ = attrs_eq
        __hash__ = attrs_hash

        slot: str
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from operator import attrgetter
from typing import Any, cast

import attrs

__all__ = ["attrs_eq", "attrs_hash", "attrs_repr"]

_Getter = Callable[[object], tuple[Any, ...]]

#: the objects whose repr is being made, per thread (a cycle shows as ``...``, as in attrs)
_REPRING = threading.local()
#: per class, the fields its ``__eq__`` compares and the getter of those its ``__hash__`` hashes
_COMPARED: dict[type, tuple[tuple[str, ...], _Getter]] = {}


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


def _compared(cls: type) -> tuple[tuple[str, ...], _Getter]:
    """The fields attrs's ``__eq__`` of ``cls`` compares, and what its ``__hash__`` hashes."""
    known = _COMPARED.get(cls)
    if known is None:
        fields = attrs.fields(cast("type[attrs.AttrsInstance]", cls))
        hashed = [a.name for a in fields if (a.eq if a.hash is None else a.hash)]
        if len(hashed) > 1:
            get = cast("_Getter", attrgetter(*hashed))
        elif hashed:
            one = attrgetter(hashed[0])
            get = lambda instance: (one(instance),)  # noqa: E731
        else:
            get = lambda instance: ()  # noqa: E731
        known = _COMPARED[cls] = (tuple(a.name for a in fields if a.eq), get)
    return known


def attrs_eq(self: object, other: object) -> bool:
    """``self == other`` as attrs's generated ``__eq__`` says: the same class, and each field
    compared by ``eq`` equal, in order, up to the first that is not (its result returned). A
    class with ``__eq__ = attrs_eq`` (none of its fields with an ``eq`` key) has none compiled;
    a frozen one sets ``__hash__ = attrs_hash`` too."""
    if other.__class__ is not self.__class__:
        return cast("bool", NotImplemented)
    result: object = True
    for name in _compared(self.__class__)[0]:
        result = getattr(self, name) == getattr(other, name)
        if not result:
            break
    return cast("bool", result)


def attrs_hash(self: object) -> int:
    """attrs's hash of a frozen class: its hashed fields' with the class's (equal instances of
    one class hash alike; the number differs from attrs's, as it does between processes)."""
    return hash((self.__class__, *_compared(self.__class__)[1](self)))
