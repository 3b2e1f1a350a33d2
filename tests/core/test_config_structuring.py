"""A well-formed table is read through the converter's hooks without generating cattrs's code;
any other gets cattrs's generated structuring, so every problem is reported as before."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
from cattrs.gen import make_dict_structure_fn, override
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.config import converter
from accelkit.config.converter import problems_of, toml_key
from accelkit.config.schema import HostFile

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"


def _generated_code_only() -> Any:
    """The converter as it was: every table through cattrs's generated function."""
    conv = converter._make_converter()

    def factory(cls: type[Any], c: Any) -> Any:
        fields = attrs.fields(attrs.resolve_types(cls, include_extras=True))
        renames = {a.name: override(rename=toml_key(a.name)) for a in fields}
        build = make_dict_structure_fn(cls, c, _cattrs_forbid_extra_keys=True, **renames)

        def hook(value: Any, type_: Any) -> Any:
            if not isinstance(value, Mapping):
                msg = f"expected a table, got {converter._toml_type(value)}"
                raise ValueError(msg)
            return build(value, type_)

        return hook

    conv.register_structure_hook_factory(attrs.has, factory)
    return conv


def _outcome(conv: Any, data: Any) -> Any:
    try:
        return conv.structure(data, HostFile)
    except Exception as exc:
        return sorted(problems_of(exc), key=repr)


@pytest.mark.parametrize("name", ["demo.toml", "manual.toml", "auto-split.toml"])
def test_a_valid_file_is_read_without_generating_code(monkeypatch, name):
    data = tomllib.loads((EXAMPLES / name).read_text(encoding="utf-8"))
    expected = _generated_code_only().structure(data, HostFile)

    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("cattrs code generated for a valid table")

    monkeypatch.setattr(converter, "make_dict_structure_fn", refused)
    assert converter._make_converter().structure(data, HostFile) == expected


def test_a_problem_is_reported_by_cattrs_generated_code(monkeypatch):
    made: list[type[Any]] = []
    real = converter.make_dict_structure_fn

    def counted(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
        made.append(cls)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(converter, "make_dict_structure_fn", counted)
    data = {"resource": {"reserved-cpu": -1}, "agents": [{"agent": {}}]}
    assert sorted(problems_of_first(data), key=repr) == sorted(
        problems_of_first(data, _generated_code_only()), key=repr
    )
    assert made  # the tables with a problem, and those around them


def problems_of_first(data: Any, conv: Any = None) -> list[tuple[Any, str]]:
    result = _outcome(conv or converter._make_converter(), data)
    assert isinstance(result, list)
    return result


VALUES = st.one_of(
    st.integers(-2, 3),
    st.booleans(),
    st.sampled_from(["", "1G", "16M", "x", "shared", "manual", "auto-split", "0", "agent-1"]),
    st.lists(st.sampled_from(["0", "1", "mock", ""]), max_size=3),
)
RESOURCE_KEYS = st.sampled_from(
    ["allocation-mode", "reserved-cpu", "reserved-mem", "memory-align-size", "pids", "nope"]
)
DOCUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "resource": st.one_of(VALUES, st.dictionaries(RESOURCE_KEYS, VALUES, max_size=4)),
        "plugins": st.dictionaries(
            st.sampled_from(["allowed", "strict", "call-timeout", "other"]), VALUES, max_size=3
        ),
        "agents": st.one_of(
            VALUES,
            st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "agent": st.one_of(
                            VALUES, st.dictionaries(st.sampled_from(["id", "idx"]), VALUES)
                        ),
                        "resource": st.dictionaries(
                            st.sampled_from(["cpu", "mem", "pids", "devices"]), VALUES
                        ),
                    },
                ),
                max_size=2,
            ),
        ),
        "health": st.one_of(VALUES, st.dictionaries(st.sampled_from(["x"]), VALUES)),
    },
)


@settings(max_examples=300, deadline=None)
@given(DOCUMENTS)
def test_every_document_reads_as_cattrs_generated_code_reads_it(data):
    """The same value for a valid document, the same problems at the same keys otherwise."""
    assert _outcome(converter._make_converter(), data) == _outcome(_generated_code_only(), data)
