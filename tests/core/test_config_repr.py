"""The config classes' repr is attrs's own, made by one function instead of one compiled per
class: the same text, cycles shown as ``...``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from accelkit.config import converter, model, schema
from accelkit.config.converter import attrs_repr
from accelkit.config.load import load_host_config

from .attrs_support import attrs_own_repr

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
CLASSES = [
    cls
    for module in (model, schema, converter)
    for cls in vars(module).values()
    if isinstance(cls, type) and attrs.has(cls) and cls.__repr__ is attrs_repr
]


def _instances(value: Any) -> list[Any]:
    found = [value] if attrs.has(type(value)) else []
    if attrs.has(type(value)):
        for a in attrs.fields(type(value)):
            found += _instances(getattr(value, a.name))
    elif isinstance(value, list | tuple):
        for item in value:
            found += _instances(item)
    return found


def test_every_config_class_uses_it():
    assert {c.__name__ for c in CLASSES} >= {"HostConfig", "HostFile", "ResourceSection", "Rule"}


@pytest.mark.parametrize("name", ["demo.toml", "manual.toml", "auto-split.toml"])
def test_a_loaded_config_reads_as_attrs_would_write_it(name):
    config = load_host_config(EXAMPLES / name)
    seen = {type(i) for i in _instances(config)}
    assert model.HostConfig in seen
    assert model.AgentConfig in seen
    for instance in _instances(config):
        assert repr(instance) == attrs_own_repr(instance)


def test_each_class_with_its_defaults_reads_as_attrs_would_write_it():
    for cls in CLASSES:
        try:
            instance = cls()
        except TypeError:  # a required field: these are covered by the loaded configs
            continue
        assert repr(instance) == attrs_own_repr(instance)


def test_a_cycle_shows_as_dots_and_the_guard_is_left_clean():
    rule = converter.Rule(parse=lambda value: value)
    cyclic = converter.Rule(parse=[rule])  # type: ignore[arg-type]
    object.__setattr__(rule, "parse", [cyclic])
    assert repr(rule) == "Rule(parse=[Rule(parse=[...])])"
    assert repr(converter.Renamed("old")) == "Renamed(old='old')"
