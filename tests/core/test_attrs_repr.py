"""Every attrs class that shares :func:`accelkit.reprs.attrs_repr` reads as attrs's own repr
would, and the classes every command imports share it (none has a repr compiled at import)."""

from __future__ import annotations

import importlib
import pkgutil
from decimal import Decimal
from typing import Any

import attrs
import pytest

import accelkit
import accelkit_mock
from accelkit.reprs import attrs_repr

SKIPPED = ("accelkit.testing", "accelkit.bridge", "accelkit.__main__")


def _modules() -> list[Any]:
    found = []
    for package in (accelkit, accelkit_mock):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not info.name.startswith(SKIPPED):
                found.append(importlib.import_module(info.name))
    return found


CLASSES = sorted(
    {
        cls
        for module in _modules()
        for cls in vars(module).values()
        if isinstance(cls, type) and attrs.has(cls) and cls.__repr__ is attrs_repr
    },
    key=lambda cls: f"{cls.__module__}.{cls.__qualname__}",
)


def _attrs_own_repr(instance: Any) -> str:
    cls = type(instance)
    twin = attrs.make_class(
        cls.__name__,
        {a.name: attrs.field(repr=a.repr, default=None) for a in attrs.fields(cls)},
    )
    twin.__qualname__ = cls.__qualname__
    return repr(twin(*(getattr(instance, a.name) for a in attrs.fields(cls))))


def _filled(cls: type) -> Any:
    """An instance of ``cls`` whose fields hold distinct values, made without its __init__."""
    instance = object.__new__(cls)
    for number, field in enumerate(attrs.fields(cls)):
        value = (field.name, Decimal(number), [number], None)[number % 4]
        object.__setattr__(instance, field.name, value)
    return instance


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: f"{cls.__module__}.{cls.__qualname__}")
def test_a_class_reads_as_attrs_would_write_it(cls):
    instance = _filled(cls)
    assert repr(instance) == _attrs_own_repr(instance)


def test_a_field_hidden_from_the_repr_stays_hidden():
    from accelkit.registry import PluginRecord

    assert not attrs.fields_dict(PluginRecord)["_identify"].repr
    text = repr(_filled(PluginRecord))
    assert text.startswith("PluginRecord(")
    assert "_identify=" not in text


def test_the_classes_every_command_imports_share_it():
    from accelkit.cgroup import CgroupFS
    from accelkit.config import attrs_repr as exported
    from accelkit.runtime.base import LaunchSpec
    from accelkit.types import ComputeDevice, NodeInfo, SlotSpec, Workload, WorkloadConfig
    from accelkit.workload.ledger_rows import LedgerScan
    from accelkit.workload.record import LedgerRecord
    from accelkit_mock.spec import DeviceEntry, MockDevice

    assert exported is attrs_repr
    for cls in (CgroupFS, LaunchSpec, ComputeDevice, NodeInfo, SlotSpec, Workload):
        assert cls.__repr__ is attrs_repr, cls
    for cls in (WorkloadConfig, LedgerScan, LedgerRecord, DeviceEntry, MockDevice):
        assert cls.__repr__ is attrs_repr, cls
    assert len(CLASSES) >= 60
