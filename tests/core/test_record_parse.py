"""A record's text is read strictly: anything but a valid record is a ``LedgerFormatError``
that names what is wrong, never another exception and never a record that is not one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.workload import LedgerFormatError, LedgerRecord

VALID: dict[str, Any] = {
    "format": "accelkit-ledger",
    "version": 3,
    "agent": "agent-1",
    "workload": {"id": "w", "type": "process_tree"},
    "order": ["cpu", "mem"],
    "allocation": {"cpu": {"cpu": {"0": "1", "1": "0.5"}}, "mem": {"mem": {"root": "1024"}}},
    "started": {"cpu": ["pre_create"]},
    "hooks": {"cpu": ["pre_create"]},
    "teardown": {"attempts": 0, "retry_after": None},
    "owner": {"pid": 7, "start_time": "12.5"},
    "leader": None,
    "handle": None,
    "data": {"cpu": {"X_SHARE_ENFORCEMENT": "advisory"}},
    "created_at": "2026-11-26T19:00:00Z",
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=4,
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*path, index))
    return found


PATHS = _paths(VALID)[1:]


def _replaced(path: tuple[Any, ...], new: Any) -> Any:
    data = json.loads(json.dumps(VALID))
    inner = data
    for step in path[:-1]:
        inner = inner[step]
    inner[path[-1]] = new
    return data


@given(st.sampled_from(PATHS), json_values)
def test_any_value_anywhere_reads_as_a_record_or_is_refused(path, new):
    data = _replaced(path, new)
    try:
        record = LedgerRecord.from_json(data)
    except LedgerFormatError:
        return
    assert LedgerRecord.from_json(json.loads(json.dumps(record.to_json()))) == record


@pytest.mark.parametrize(
    ("allocation", "said"),
    [
        ({"": {"cpu": {"0": "1"}}}, "plugin must be a non-empty string"),
        ({"cpu": {"": {"0": "x"}}}, "slot must be a non-empty string"),  # before its amounts
        ({"cpu": {"cpu": {"": "x"}}}, "device id must be a non-empty string"),
        ({"cpu": {"cpu": {"0": 1}}}, "amount must be a decimal string"),
        ({"cpu": {"cpu": {"0": "-1"}}}, "negative amount"),
        ({"cpu": {"cpu": ["0"]}}, "malformed ledger record"),
        ({"cpu": "cpu"}, "malformed ledger record"),
    ],
)
def test_a_bad_allocation_is_refused_naming_what_is_wrong(allocation, said):
    data = {**VALID, "allocation": allocation, "order": list(allocation), "started": {}}
    data |= {"hooks": {}, "data": {}}
    with pytest.raises(LedgerFormatError, match=said):
        LedgerRecord.from_json(data)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("order", ["cpu", ""], "plugin must be a non-empty string"),
        ("order", ["cpu", "cpu"], "does not list each allocated plugin once"),
        ("hooks", {"gpu": ["pre_create"]}, "hooks recorded for plugins without allocation"),
        ("started", {"gpu": []}, "hooks recorded for plugins without allocation"),
        ("data", {"gpu": {}}, "resource data recorded for plugins without allocation"),
        ("teardown", {"attempts": True, "retry_after": None}, "malformed teardown attempts"),
        ("teardown", {"attempts": -1, "retry_after": None}, "malformed teardown attempts"),
        ("teardown", [], "malformed ledger record"),
        ("agent", "", "agent must be a non-empty string"),
    ],
)
def test_a_bad_field_is_refused_naming_what_is_wrong(key, value, said):
    with pytest.raises(LedgerFormatError, match=said):
        LedgerRecord.from_json({**VALID, key: value})
