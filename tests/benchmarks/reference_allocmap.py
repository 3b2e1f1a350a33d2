"""Loads Backend.AI's agent alloc maps from a checkout, to measure them beside accelkit's.

The reference is never part of this repository: point ``--reference DIR`` (or the
``ACCELKIT_BENCH_REFERENCE`` environment variable) at a folder holding Backend.AI's
``alloc_map.py`` and ``affinity_map.py`` (``src/ai/backend/agent/`` of a checkout). Both files
are executed as they are, inside a private ``ai.backend.agent`` package, with two in-memory
changes only so that CPython 3.11 accepts them: the PEP 695 type parameter of
``distribute[T]`` is dropped and ``typing.override`` (3.12) becomes a no-op decorator. Neither
changes what the code does at run time.

The rest of Backend.AI is not loaded. Its imports are answered by small stand-ins:
``ai.backend.common.types`` (string ids and ``SlotTypes``), ``ai.backend.common.exception``
(``ConfigurationError``), ``ai.backend.logging`` (a logger adapter) and the agent's resource
errors, which keep the real constructors' arguments and, like them, render their message when
they are raised. The stand-ins do less than the real modules (no aiohttp responses), so they
can only make the reference look faster, never slower.

The reference needs ``networkx`` and ``more-itertools``.
"""

from __future__ import annotations

import enum
import importlib.machinery
import logging
import os
import sys
import types
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, NewType

ENV = "ACCELKIT_BENCH_REFERENCE"
PACKAGE = "ai.backend.agent"


class ReferenceUnavailable(Exception):
    """The reference cannot be loaded from the folder given (said why)."""


class SlotTypes(enum.StrEnum):
    """Stand-in for ``ai.backend.common.types.SlotTypes``."""

    COUNT = "count"
    BYTES = "bytes"
    UNIQUE = "unique"
    UNIFIED = "unified"


class _BraceStyleAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Stand-in for ``ai.backend.logging.BraceStyleAdapter`` (logging is off in benchmarks)."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger, {})


class ConfigurationError(Exception):
    """Stand-in for ``ai.backend.common.exception.ConfigurationError``."""


class ResourceError(Exception):
    """Base of the stand-in agent resource errors (the real ones also build HTTP replies)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args)
        self.extra_msg = str(self)


class UnsupportedResource(ResourceError):
    pass


class InvalidResourceCombination(ResourceError):
    pass


class InvalidResourceArgument(ResourceError):
    pass


class NotMultipleOfQuantum(InvalidResourceArgument):
    pass


class ResourceAllocationError(ResourceError):
    pass


class InsufficientResource(ResourceError):
    """Same arguments and message as the real one, rendered at construction like it."""

    def __init__(
        self,
        msg: str,
        slot_name: str,
        requested_alloc: Decimal,
        total_allocatable: Decimal | int,
        allocation: Mapping[str, Any],
        context_tag: str | None = None,
    ) -> None:
        self.msg = msg
        self.slot_name = slot_name
        self.requested_alloc = requested_alloc
        self.total_allocatable = total_allocatable
        self.allocation = allocation
        self.context_tag = context_tag
        super().__init__(msg)

    def __str__(self) -> str:
        tag = f" (tag: {self.context_tag!r}), " if self.context_tag else ", "
        return (
            f"InsufficientResource: {self.msg} ({self.slot_name}{tag}"
            f"allocating {self.requested_alloc} out of {self.total_allocatable})"
        )


class FractionalResourceFragmented(ResourceError):
    """Same arguments as the real one."""

    def __init__(
        self,
        msg: str,
        slot_name: str,
        requested_alloc: Decimal,
        dev_allocs: Any,
        context_tag: str | None = None,
    ) -> None:
        self.msg = msg
        self.slot_name = slot_name
        self.requested_alloc = requested_alloc
        self.dev_allocs = dev_allocs
        self.context_tag = context_tag
        super().__init__(msg)


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


def _stand_ins() -> dict[str, types.ModuleType]:
    errors = _module(
        f"{PACKAGE}.errors",
        ResourceError=ResourceError,
        UnsupportedResource=UnsupportedResource,
        InvalidResourceCombination=InvalidResourceCombination,
        InvalidResourceArgument=InvalidResourceArgument,
        NotMultipleOfQuantum=NotMultipleOfQuantum,
        InsufficientResource=InsufficientResource,
        FractionalResourceFragmented=FractionalResourceFragmented,
        ResourceAllocationError=ResourceAllocationError,
    )
    common_types = _module(
        "ai.backend.common.types",
        DeviceId=NewType("DeviceId", str),
        DeviceName=NewType("DeviceName", str),
        SlotName=NewType("SlotName", str),
        SlotTypes=SlotTypes,
    )
    agent = _module(PACKAGE, __path__=[])
    return {
        "ai": _module("ai", __path__=[]),
        "ai.backend": _module("ai.backend", __path__=[]),
        "ai.backend.common": _module("ai.backend.common", __path__=[]),
        "ai.backend.common.types": common_types,
        "ai.backend.common.exception": _module(
            "ai.backend.common.exception", ConfigurationError=ConfigurationError
        ),
        "ai.backend.logging": _module("ai.backend.logging", BraceStyleAdapter=_BraceStyleAdapter),
        PACKAGE: agent,
        f"{PACKAGE}.errors": errors,
    }


def _for_py311(source: str) -> str:
    """The two in-memory changes that let CPython 3.11 run the reference (see the module doc)."""
    source = source.replace("def distribute[T](", "def distribute(")
    if sys.version_info < (3, 12):
        source = source.replace("    override,\n", "")
        source = source.replace("from typing import override\n", "")
    return source


def _exec(name: str, path: Path) -> types.ModuleType:
    mod = types.ModuleType(f"{PACKAGE}.{name}")
    mod.__file__ = str(path)
    mod.__package__ = PACKAGE
    mod.__spec__ = importlib.machinery.ModuleSpec(mod.__name__, None, origin=str(path))
    mod.__dict__["override"] = lambda f: f
    sys.modules[mod.__name__] = mod
    code = compile(_for_py311(path.read_text(encoding="utf-8")), str(path), "exec")
    exec(code, mod.__dict__)
    setattr(sys.modules[PACKAGE], name, mod)
    return mod


class Reference:
    """The loaded reference: its map classes, strategies and the errors its maps raise."""

    def __init__(self, folder: Path) -> None:
        missing = [n for n in ("alloc_map.py", "affinity_map.py") if not (folder / n).is_file()]
        if missing:
            msg = f"{folder} lacks {', '.join(missing)} (give src/ai/backend/agent of Backend.AI)"
            raise ReferenceUnavailable(msg)
        for dep in ("networkx", "more_itertools"):
            try:
                __import__(dep)
            except ImportError as exc:
                msg = f"the reference needs {dep!r}: pip install networkx more-itertools"
                raise ReferenceUnavailable(msg) from exc
        saved = {k: v for k, v in sys.modules.items() if k == "ai" or k.startswith("ai.")}
        sys.modules.update(_stand_ins())
        try:
            _exec("affinity_map", folder / "affinity_map.py")
            self.alloc_map = _exec("alloc_map", folder / "alloc_map.py")
        finally:
            for k in [k for k in sys.modules if k == "ai" or k.startswith("ai.")]:
                del sys.modules[k]
            sys.modules.update(saved)
        self.folder = folder
        self.errors: tuple[type[Exception], ...] = (ResourceError,)

    def discrete(self, devices: Mapping[Any, Any], strategy: str) -> Callable[[], Any]:
        """A factory of fresh reference discrete maps over ``devices`` (accelkit infos)."""
        am = self.alloc_map
        slots = self._slots(devices)
        strat = am.AllocationStrategy[strategy]
        return lambda: am.DiscretePropertyAllocMap(
            device_slots=slots, device_mask=slots.keys(), allocation_strategy=strat
        )

    def fraction(
        self, devices: Mapping[Any, Any], strategy: str, quantum: Decimal
    ) -> Callable[[], Any]:
        """A factory of fresh reference fraction maps over ``devices`` (accelkit infos)."""
        am = self.alloc_map
        slots = self._slots(devices)
        strat = am.AllocationStrategy[strategy]
        return lambda: am.FractionAllocMap(
            device_slots=slots,
            device_mask=slots.keys(),
            allocation_strategy=strat,
            quantum_size=quantum,
        )

    def _slots(self, devices: Mapping[Any, Any]) -> dict[str, Any]:
        info = self.alloc_map.DeviceSlotInfo
        return {
            d: info(SlotTypes(i.slot_type.value), i.slot_name, i.amount) for d, i in devices.items()
        }


def load(folder: str | None) -> Reference | None:
    """The reference from ``folder`` (else ``$ACCELKIT_BENCH_REFERENCE``); ``None`` if neither."""
    where = folder or os.environ.get(ENV)
    if not where:
        return None
    return Reference(Path(where).expanduser().resolve())
