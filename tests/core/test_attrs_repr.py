"""Every attrs class that shares :mod:`accelkit.reprs`'s methods reads, compares and hashes as
attrs's own methods would, and the classes every command imports share them (none has them
compiled at import)."""

from __future__ import annotations

import importlib
import pkgutil
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accelkit
import accelkit_mock
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr

from .attrs_support import attrs_own_repr

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
COMPARED = [
    cls
    for module in _modules()
    for cls in sorted(
        (c for c in vars(module).values() if isinstance(c, type) and attrs.has(c)),
        key=lambda c: c.__qualname__,
    )
    if cls.__eq__ is attrs_eq and cls.__module__ == module.__name__
]
#: values a field may hold in two instances compared: equal but not the same, NaN, unhashable
POOL = [0, 1, Decimal("1.0"), "a", "b", float("nan"), None, (1, "a"), frozenset({1})]


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
    assert repr(instance) == attrs_own_repr(instance)


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
    for cls in (CgroupFS, LaunchSpec, ComputeDevice, NodeInfo, SlotSpec, LedgerRecord, MockDevice):
        assert cls.__eq__ is attrs_eq, cls
        assert cls.__hash__ is attrs_hash, cls
    assert len(CLASSES) >= 60


def _twin_class(cls: type) -> type:
    """A class with ``cls``'s fields (their eq and hash options) whose methods attrs made."""
    return attrs.make_class(
        cls.__name__,
        {a.name: attrs.field(eq=a.eq, hash=a.hash) for a in attrs.fields(cls)},
        frozen=True,
        slots=False,
    )


def _with(cls: type, values: list[Any]) -> Any:
    instance = object.__new__(cls)
    for field, value in zip(attrs.fields(cls), values, strict=True):
        object.__setattr__(instance, field.name, value)
    return instance


def test_the_classes_compared_are_many():
    assert len(COMPARED) >= 70
    assert all(cls.__hash__ in (attrs_hash, None) for cls in COMPARED)


@pytest.mark.parametrize("cls", COMPARED, ids=lambda cls: f"{cls.__module__}.{cls.__qualname__}")
@given(data=st.data())
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a loaded machine
def test_a_class_compares_and_hashes_as_attrs_would(cls, data):
    count = len(attrs.fields(cls))
    pick = st.lists(st.sampled_from(POOL), min_size=count, max_size=count)
    left, right = data.draw(pick), data.draw(pick)
    twin = _twin_class(cls)
    ours = (_with(cls, left), _with(cls, right))
    theirs = (_with(twin, left), _with(twin, right))
    assert (ours[0] == ours[1]) == (theirs[0] == theirs[1])
    assert (ours[0] != ours[1]) == (theirs[0] != theirs[1])
    assert (ours[0] == ours[0]) == (theirs[0] == theirs[0])  # NaN: attrs has no identity rule
    assert ours[0] != theirs[0]  # another class is never equal
    if cls.__hash__ is attrs_hash and ours[0] == ours[1]:
        try:
            assert hash(ours[0]) == hash(ours[1])
        except TypeError:  # an unhashable value: attrs's hash raises too
            with pytest.raises(TypeError):
                hash(theirs[0])


def test_a_mutable_class_stays_unhashable_and_a_frozen_one_hashes():
    from accelkit.types import Workload

    assert Workload.__hash__ is None or Workload.__hash__ is attrs_hash
    frozen = [cls for cls in COMPARED if cls.__hash__ is attrs_hash]
    assert frozen
    for cls in frozen:
        instance = _with(cls, [1] * len(attrs.fields(cls)))
        assert hash(instance) == hash(_with(cls, [1] * len(attrs.fields(cls))))
