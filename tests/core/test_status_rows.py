"""``status --json`` rows are made from the records directly, exactly as the statuses say."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from accelkit.events import WorkloadPhase
from accelkit.runtime.base import WorkloadHandle
from accelkit.types import AgentId, DeviceId, DeviceName, SlotName, Workload, WorkloadType
from accelkit.workload import LedgerRecord, ProcessStamp
from accelkit.workload.ledger_rows import parse_record, record_text
from accelkit.workload.status import status_of, status_row

names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.:", min_size=1, max_size=8)
#: shares, whole amounts, zero (left out) and text a sum rewrites (``1E+3`` reads ``1000``)
amounts = st.sampled_from(["1E+3", "0", "0.50", "1", "2.000", "1073741824", "0.001"]).map(Decimal)
phases = st.lists(st.sampled_from(list(WorkloadPhase)), unique=True).map(tuple)
stamps = st.none() | st.builds(ProcessStamp, st.integers(1, 2**22), st.just("12.5"))


@st.composite
def records(draw: st.DrawFn) -> LedgerRecord:
    """Records as made and as the ledger reads them back: most plugins hold one device in one
    slot (the common case, made on a path of its own), some hold several, in several slots."""
    plugins = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    one = st.builds(lambda d, a: {SlotName("s"): {DeviceId(d): a}}, names, amounts)
    many = st.dictionaries(names, st.dictionaries(names, amounts, max_size=3), max_size=2)
    allocation = {DeviceName(p): draw(one | many) for p in plugins}
    order = tuple(DeviceName(p) for p in draw(st.permutations(plugins)))
    record = LedgerRecord(
        agent_id=AgentId(draw(names)),
        workload=Workload(draw(names), draw(st.sampled_from(list(WorkloadType)))),
        allocation=allocation,
        order=order,
        hooks=draw(st.dictionaries(st.sampled_from(order), phases)),
        started=draw(st.dictionaries(st.sampled_from(order), phases)),
        owner=draw(stamps),
        handle=draw(st.none() | st.builds(WorkloadHandle, names, names)),
        data=draw(st.dictionaries(st.sampled_from(order), st.dictionaries(names, names))),
        created_at=draw(st.sampled_from(["2024-06-10T06:13:20Z", "not a time"])),
    )
    return parse_record(record_text(record)) if draw(st.booleans()) else record


@given(records(), st.sampled_from(["managed", "gone"]), st.booleans(), st.integers(0, 2**31))
def test_a_row_is_the_status_as_json(record, liveness, alive, now):
    expected = status_of(record, liveness, now, owner_alive=alive).to_json()
    row = status_row(record, liveness, now, owner_alive=alive)
    assert row == expected
    assert list(row) == list(expected)  # the keys in the order status --json prints them
    for plugin, held in row["amounts"].items():  # the same text, devices in the same order
        assert list(held.items()) == list(expected["amounts"][plugin].items())
        assert row["devices"][plugin] == list(held)


def test_a_device_held_for_nothing_is_in_no_row():
    plugin = DeviceName("cpu")
    alloc = {plugin: {SlotName("cpu"): {DeviceId("0"): Decimal(0)}}}
    record = LedgerRecord(AgentId("a"), Workload.process_tree("w"), alloc, order=(plugin,))
    row = status_row(record, "managed", 0.0, owner_alive=True)
    assert row["devices"] == {"cpu": []}
    assert row["amounts"] == {"cpu": {}}
