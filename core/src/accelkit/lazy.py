"""Package names imported when first used (PEP 562).

A package whose ``__init__`` imports every module it exports makes a command that needs one of
them import all of them. Such a package instead names, for each exported name, the module that
defines it, and lets :func:`lazy_names` make its module ``__getattr__``::

    __getattr__ = lazy_names(__name__, {"Ledger": ".ledger", "Node": "accelkit.node.node"})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, module_of: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name of ``module_of`` from its module (relative
    names are relative to ``package``), any other an ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        return getattr(import_module(module, package), name)

    return __getattr__
