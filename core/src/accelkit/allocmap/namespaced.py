"""Copies of a module's functions that read one map's state as their globals.

The fast paths of the alloc maps run at a few hundred nanoseconds a call, and a closure pays
for each of its cells on every call: the interpreter copies them into the frame and clears
them on return (13 cells were a twentieth of what W4's allocate and free cost). A global name
costs nothing until it is read, and then one look-up the interpreter specialises. So a fast
path is written as module-level functions over module-level names (placeholders, which no call
reads), and :func:`copies` gives each map copies of those functions whose globals are a
namespace of the map's own, with a code object each: the interpreter keeps its specialised
look-ups per code object, and two maps used in turn must not undo each other's.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from typing import Any


def copies(
    module: Mapping[str, Any], functions: Iterable[str], values: Mapping[str, Any]
) -> dict[str, Any]:
    """A copy of ``module``'s globals with ``values`` in place of its own, where each of
    ``functions`` is a copy of the module's function that reads that namespace."""
    space = dict(module)
    unknown = values.keys() - space.keys()
    if unknown:  # a name the functions do not read: a slip, and a new key would slow look-ups
        msg = f"not names of the module: {', '.join(sorted(unknown))}"
        raise ValueError(msg)
    space.update(values)
    for name in functions:
        function = module[name]
        code = function.__code__.replace()
        copy = types.FunctionType(code, space, function.__name__, function.__defaults__)
        copy.__kwdefaults__ = function.__kwdefaults__
        copy.__qualname__ = function.__qualname__
        copy.__doc__ = function.__doc__
        space[name] = copy
    return space
