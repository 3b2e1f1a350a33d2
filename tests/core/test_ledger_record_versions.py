"""Ledger records carry a schema version; every earlier version is converted when read.

``tests/fixtures/ledger/record-v1*.json`` are records as earlier accelkit releases wrote them
(``accelkit-ledger/1``, no version; the earliest without ``started``, ``teardown`` and
``handle``); they must read the same forever.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.events import WorkloadPhase
from accelkit.runtime.base import WorkloadHandle
from accelkit.types import AgentId, DeviceName, Workload, WorkloadType
from accelkit.workload import LedgerFormatError, LedgerRecord, ProcessStamp
from accelkit.workload.record_versions import (
    CONVERTERS,
    CURRENT_VERSION,
    FORMAT,
    V1_FORMAT,
    to_current,
    version_of,
)

STORED = Path(__file__).resolve().parents[1] / "fixtures" / "ledger"

names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.:", min_size=1, max_size=12)
amounts = st.decimals(
    min_value=Decimal("0.000001"),
    max_value=Decimal(10**9),
    places=6,
    allow_nan=False,
    allow_infinity=False,
)
times = st.integers(0, 2**40).map(lambda n: f"{n // 100}.{n % 100:02d}")
stamps = st.none() | st.builds(ProcessStamp, st.integers(1, 2**22), times)
handles = st.none() | st.builds(
    WorkloadHandle, names, st.text(max_size=20), st.dictionaries(names, st.text(max_size=8))
)
phases = st.lists(st.sampled_from(list(WorkloadPhase)), unique=True).map(tuple)


@st.composite
def records(draw: st.DrawFn) -> LedgerRecord:
    plugins = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    allocation = {
        DeviceName(p): draw(
            st.dictionaries(names, st.dictionaries(names, amounts, max_size=3), max_size=2)
        )
        for p in plugins
    }
    order = tuple(DeviceName(p) for p in draw(st.permutations(plugins)))
    return LedgerRecord(
        agent_id=AgentId(draw(names)),
        workload=Workload(draw(names), draw(st.sampled_from(list(WorkloadType)))),
        allocation=allocation,
        order=order,
        hooks=draw(st.dictionaries(st.sampled_from(order), phases)),
        started=draw(st.dictionaries(st.sampled_from(order), phases)),
        attempts=draw(st.integers(0, 1000)),
        retry_after=draw(st.none() | times),
        owner=draw(stamps),
        leader=draw(stamps),
        handle=draw(handles),
        data=draw(
            st.dictionaries(
                st.sampled_from(order), st.dictionaries(names, st.text(max_size=8), max_size=2)
            )
        ),
        created_at=draw(st.sampled_from(["2024-06-10T06:13:20Z", "2026-11-26T19:00:00Z"])),
    )


def as_version_2(data: dict[str, Any]) -> dict[str, Any]:
    """What an accelkit of version-2 records wrote for the same record: no plugin data."""
    old = {k: v for k, v in data.items() if k != "data"}
    old["version"] = 2
    return old


def as_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """What an accelkit of version-1 records wrote for the same record."""
    old = {k: v for k, v in as_version_2(data).items() if k != "version"}
    old["format"] = V1_FORMAT
    return old


def as_early_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """The earliest version-1 writers left out what was empty."""
    old = as_version_1(data)
    if not old["started"]:
        del old["started"]
    if old["teardown"] == {"attempts": 0, "retry_after": None}:
        del old["teardown"]
    if old["handle"] is None:
        del old["handle"]
    return old


@given(records())
def test_a_record_reads_back_as_written(record):
    data = json.loads(json.dumps(record.to_json()))
    assert (data["format"], data["version"]) == (FORMAT, CURRENT_VERSION)
    assert LedgerRecord.from_json(data) == record


@given(records())
def test_the_same_record_written_by_earlier_versions_reads_the_same(record):
    current = record.to_json()
    without_data = attrs.evolve(record, data={})  # what versions before 3 could not keep
    assert LedgerRecord.from_json(as_version_2(current)) == without_data
    assert LedgerRecord.from_json(as_version_1(current)) == without_data
    assert LedgerRecord.from_json(as_early_version_1(current)) == without_data


@given(records())
def test_a_converted_record_is_written_in_the_current_version(record):
    record = attrs.evolve(record, data={})
    old = as_early_version_1(record.to_json())
    assert LedgerRecord.from_json(old).to_json() == record.to_json()


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ([], "malformed resource data: []"),
        ({"cpu": {"K": 1}}, "malformed resource data of 'cpu'"),
        ({"cpu": "K=V"}, "malformed resource data of 'cpu'"),
        ({"gpu": {"K": "V"}}, "resource data recorded for plugins without allocation: ['gpu']"),
    ],
)
def test_malformed_plugin_data_is_refused(data, said):
    record = LedgerRecord(AgentId("a"), Workload("w"), {DeviceName("cpu"): {}}, ("cpu",))
    written = {**record.to_json(), "data": data}
    with pytest.raises(LedgerFormatError) as raised:
        LedgerRecord.from_json(written)
    assert said in str(raised.value)


def test_every_earlier_version_has_a_converter():
    assert sorted(CONVERTERS) == list(range(1, CURRENT_VERSION))


def test_the_stored_early_version_1_record_reads():
    data = json.loads((STORED / "record-v1-early.json").read_text())
    assert version_of(data) == 1
    record = LedgerRecord.from_json(data)
    assert record.key == ("agent-1", "pid:4242")
    assert record.order == ("cuda", "cpu")
    assert record.allocation["cpu"]["cpu"] == {"0": Decimal(1), "1": Decimal("0.5")}
    assert record.hooks["cpu"] == (WorkloadPhase.PRE_CREATE,)
    assert (record.started, record.attempts, record.retry_after) == ({}, 0, None)
    assert record.handle is None
    assert record.leader == ProcessStamp(4242, "1718000000.61")
    assert record.to_json()["version"] == CURRENT_VERSION


def test_the_stored_version_1_record_reads():
    record = LedgerRecord.from_json(json.loads((STORED / "record-v1.json").read_text()))
    assert record.key == ("trainers", "accelkit-9f2e")
    assert record.workload.type is WorkloadType.CONTAINER
    assert record.allocation == {"cuda": {"cuda.shares": {"cuda1": Decimal("0.25")}}}
    assert record.unfinished() == ("cuda:pre_terminate",)
    assert (record.attempts, record.retry_after) == (2, "1763629300.5")
    assert record.handle == WorkloadHandle(
        "docker", "4f1c2a", {"engine": "unix:///var/run/docker.sock"}
    )
    assert record.owner == ProcessStamp(9120, "1763629200.04")
    assert record.leader is None


def test_a_record_of_a_newer_accelkit_is_refused_naming_both_versions():
    data = {**json.loads((STORED / "record-v1.json").read_text()), "format": FORMAT}
    data["version"] = CURRENT_VERSION + 1
    message = (
        f"a ledger record of version {CURRENT_VERSION + 1}, written by a newer accelkit; "
        f"this one reads versions 1 to {CURRENT_VERSION}"
    )
    with pytest.raises(LedgerFormatError, match=message):
        LedgerRecord.from_json(data)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ([], "not a ledger record of format 'accelkit-ledger'"),
        ({"format": "other/9"}, "not a ledger record of format 'accelkit-ledger'"),
        ({"format": V1_FORMAT, "version": 2}, "(format 'accelkit-ledger/1')"),
        ({"format": FORMAT, "version": True}, "malformed ledger record version: True"),
        ({"format": FORMAT, "version": "2"}, "malformed ledger record version: '2'"),
        ({"format": FORMAT, "version": 0}, "malformed ledger record version: 0"),
        ({"format": FORMAT}, "not a ledger record of format"),
    ],
)
def test_what_is_no_versioned_record_is_refused(data, said):
    with pytest.raises(LedgerFormatError) as raised:
        to_current(data)
    assert said in str(raised.value)


def test_the_current_version_requires_what_version_1_could_leave_out():
    data = LedgerRecord(AgentId("a"), Workload("w"), {}).to_json()
    del data["started"]
    with pytest.raises(LedgerFormatError, match="started"):
        LedgerRecord.from_json(data)
