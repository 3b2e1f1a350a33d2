"""The ledger database: JSON records, transactions, the change counter, the device index,
set-aside rows, read-only reading, and process stamps."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from decimal import Decimal

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.errors import ConfigError
from accelkit.events import WorkloadPhase
from accelkit.types import AgentId, DeviceName, Workload, amount_in_range
from accelkit.workload import Ledger, LedgerFormatError, LedgerRecord, ProcessStamp
from accelkit.workload.ledger import MAX_RECORD_BYTES, REMOVALS_KEPT, parse_record, record_text
from accelkit.workload.ledger_peek import peek_changes


def record(agent="agent-1", workload="pid:42", **changes) -> LedgerRecord:
    fields = {
        "allocation": {
            DeviceName("cuda"): {
                "cuda.shares": {"cuda0": Decimal("0.25"), "cuda1": Decimal("0.5")}
            },
            DeviceName("cpu"): {"cpu": {"0": Decimal(1)}},
        },
        "order": (DeviceName("cuda"), DeviceName("cpu")),
    }
    fields.update(changes)
    return LedgerRecord(AgentId(agent), Workload.process_tree(workload), **fields)


def test_round_trip_keeps_amounts_exact_as_strings(tmp_path):
    ledger = Ledger(tmp_path)
    rec = record().with_phase(DeviceName("cuda"), WorkloadPhase.PRE_CREATE)
    rec = rec.with_leader(ProcessStamp(42, "1700000000.25"))
    ledger.write(rec)
    [(body,)] = ledger.db.execute("SELECT body FROM records").fetchall()
    data = json.loads(body)
    assert data["allocation"]["cuda"]["cuda.shares"] == {"cuda0": "0.25", "cuda1": "0.5"}
    assert data["hooks"] == {"cuda": ["pre_create"]}
    assert ledger.read("agent-1", "pid:42") == rec
    assert ledger.scan().records == {rec.key: rec}
    assert ledger.read("agent-1", "nope") is None


def _valid_json() -> dict:
    return record().to_json()


def put_raw(ledger, agent, workload, body, seq=0):
    """Store a row as another writer could: any text under any key."""
    with ledger.transaction():
        ledger.db.execute(
            "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)", (agent, workload, seq, body)
        )


def test_remove(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record())
    assert ledger.remove("agent-1", "pid:42")
    assert not ledger.remove("agent-1", "pid:42")
    assert ledger.scan().records == {}
    assert ledger.read("agent-1", "pid:42") is None
    assert not ledger.exists("agent-1", "pid:42")


def test_records_are_readable_json_in_the_database(tmp_path):
    ledger = Ledger(tmp_path)
    rec = record()
    ledger.write(rec)
    ledger.close()
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        [(body,)] = db.execute("SELECT body FROM records").fetchall()
    data = json.loads(body)
    assert data["allocation"]["cuda"]["cuda.shares"] == {"cuda0": "0.25", "cuda1": "0.5"}
    assert data["handle"] is None
    assert LedgerRecord.from_json(data) == rec


def test_the_state_dir_and_database_are_private(tmp_path):
    state = tmp_path / "state"
    Ledger(state).write(record())
    assert state.stat().st_mode & 0o777 == 0o700
    assert (state / "ledger.db").stat().st_mode & 0o777 == 0o600


def test_a_failed_transaction_changes_nothing(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record(workload="old"))

    def crash() -> None:
        with ledger.transaction():
            ledger.write(record(workload="new"))
            ledger.remove("agent-1", "old")
            raise RuntimeError("crash in the middle")

    with pytest.raises(RuntimeError):
        crash()
    assert list(ledger.scan().records) == [(AgentId("agent-1"), "old")]


def test_changes_are_what_was_written_and_removed_since_a_counter_value(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record(workload="a"))
    ledger.write(record(workload="b"))
    start = ledger.seq
    ledger.write(record(workload="c"))
    ledger.write(record(workload="a").with_leader(ProcessStamp(7, "1")))
    ledger.remove("agent-1", "b")
    changes = ledger.changes(start)
    assert changes.complete
    assert sorted(k[1] for k in changes.records) == ["a", "c"]
    assert changes.removed == (("agent-1", "b"),)
    assert changes.seq == ledger.seq == start + 3
    assert ledger.changes(changes.seq).records == {}


def test_a_sync_too_far_behind_is_told_to_scan_everything(tmp_path):
    ledger = Ledger(tmp_path)
    with ledger.transaction():
        for i in range(REMOVALS_KEPT + 1000):
            ledger.write(record(workload=f"w{i}"))
            ledger.remove("agent-1", f"w{i}")
    assert not ledger.changes(0).complete
    assert ledger.changes(ledger.seq - 10).complete


def test_the_device_index_names_the_holders(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record(workload="x"))
    ledger.write(
        record(
            workload="y",
            allocation={DeviceName("cuda"): {"cuda.shares": {"cuda1": Decimal("0.5")}}},
            order=(DeviceName("cuda"),),
        )
    )
    held = ledger.holders("cuda", ["cuda1"])
    assert [(h.workload_id, h.amount) for h in held] == [("x", "0.5"), ("y", "0.5")]
    ledger.remove("agent-1", "x")
    assert [h.workload_id for h in ledger.holders("cuda", ["cuda0", "cuda1"])] == ["y"]
    assert ledger.holders("cuda", []) == []


def test_changes_are_read_in_one_statement(tmp_path):
    """Under the writers' lock, a catch-up that finds changes reads the counters, the records
    written and the keys removed with one statement (each one costs more when another
    process wrote just before, which under the lock is the usual case)."""
    ours, theirs = Ledger(tmp_path), Ledger(tmp_path)
    since = ours.seq
    theirs.write(record(workload="x"))
    theirs.remove("agent-1", "x")
    theirs.write(record(workload="y"))
    statements: list[str] = []
    ours.db.set_trace_callback(statements.append)
    changes = ours.changes(since)
    ours.db.set_trace_callback(None)
    reads = [s for s in statements if s not in ("BEGIN IMMEDIATE", "COMMIT")]
    assert len(reads) == 1
    assert all(f"FROM {table}" in reads[0] for table in ("meta", "records", "removals"))
    assert list(changes.records) == [("agent-1", "y")]
    assert changes.removed == (("agent-1", "x"),)
    assert changes.seq == theirs.seq
    assert ours.changes(changes.seq).records == {}


def test_changes_come_in_the_order_they_were_made(tmp_path):
    """Records in the order last written (not the order of their keys), removals in the order
    made: the catch-up applies them as they happened."""
    ours, theirs = Ledger(tmp_path), Ledger(tmp_path)
    since = ours.seq
    for name in ("q", "z", "r1", "a", "r2"):
        theirs.write(record(workload=name))
    theirs.write(record(workload="q"))  # written again: now the last
    theirs.remove("agent-1", "r2")
    theirs.remove("agent-1", "r1")
    for changes in (ours.changes(since), peek_changes(ours, since)):
        assert changes is not None
        assert [w for _, w in changes.records] == ["z", "a", "q"]
        assert changes.removed == (("agent-1", "r2"), ("agent-1", "r1"))


def test_a_new_record_is_created_as_a_write_makes_it_without_reading_first(tmp_path):
    """The same rows as a write (record, device index, held intervals), in writes only; a
    key in use refuses it with nothing changed."""
    written, created, new = Ledger(tmp_path / "w"), Ledger(tmp_path / "c"), record(workload="x")
    written.write(new)
    statements: list[str] = []
    created.db.set_trace_callback(statements.append)
    assert created.create(new)
    created.db.set_trace_callback(None)
    assert not any(s.lstrip().upper().startswith(("SELECT", "DELETE")) for s in statements)
    for table in ("records", "holdings"):
        query = f"SELECT * FROM {table} ORDER BY 1, 2, 3"
        assert created.db.execute(query).fetchall() == written.db.execute(query).fetchall()
    query = "SELECT agent, workload, plugin, device, until_ns FROM held ORDER BY device"
    assert created.db.execute(query).fetchall() == written.db.execute(query).fetchall()
    seq, rows = created.seq, created.db.execute("SELECT * FROM records").fetchall()
    assert not created.create(record(workload="x", leader=ProcessStamp(7, "1")))
    assert created.seq == seq
    assert created.db.execute("SELECT * FROM records").fetchall() == rows
    assert created.changes(seq).records == {}


def test_a_write_of_the_same_devices_changes_the_record_row_only(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record(workload="x"))
    before = ledger.db.execute("SELECT * FROM holdings ORDER BY device").fetchall()
    held = ledger.db.execute("SELECT * FROM held ORDER BY device").fetchall()
    start = ledger.seq
    statements: list[str] = []
    ledger.db.set_trace_callback(statements.append)
    ledger.write(record(workload="x").with_leader(ProcessStamp(7, "1")), same=True)
    ledger.db.set_trace_callback(None)
    assert not any("holdings" in s or "held" in s for s in statements)
    assert ledger.db.execute("SELECT * FROM holdings ORDER BY device").fetchall() == before
    assert ledger.db.execute("SELECT * FROM held ORDER BY device").fetchall() == held
    assert Ledger(tmp_path).read_all()[("agent-1", "x")].leader == ProcessStamp(7, "1")
    assert list(ledger.changes(start).records) == [("agent-1", "x")]


def test_a_write_of_the_same_devices_without_a_recorded_version_is_written_in_full(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record(workload="x"), same=True)
    assert [h.workload_id for h in ledger.holders("cuda", ["cuda0"])] == ["x"]
    assert set(Ledger(tmp_path).read_all()) == {("agent-1", "x")}


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b'{"format": "accelkit-ledger/1", "agent": "agent-1", "workl',
        b"\xff\xfe not utf-8",
        b"[1, 2, 3]",
        json.dumps({**_valid_json(), "format": "other/9"}).encode(),
        json.dumps({**_valid_json(), "allocation": {"cpu": {"cpu": {"0": 1.5}}}}).encode(),
        json.dumps(
            {**_valid_json(), "allocation": {"cpu": {"cpu": {"0": "-1"}}}, "order": ["cpu"]}
        ).encode(),
        json.dumps(
            {**_valid_json(), "allocation": {"cpu": {"cpu": {"0": "NaN"}}}, "order": ["cpu"]}
        ).encode(),
        json.dumps({**_valid_json(), "order": ["cuda"]}).encode(),
        json.dumps({**_valid_json(), "hooks": {"rocm": ["pre_create"]}}).encode(),
        json.dumps({**_valid_json(), "hooks": {"cpu": ["launch"]}}).encode(),
        json.dumps({**_valid_json(), "owner": {"pid": "1", "start_time": "1"}}).encode(),
        json.dumps({**_valid_json(), "owner": {"pid": 1, "start_time": "yesterday"}}).encode(),
        json.dumps({**_valid_json(), "agent": ""}).encode(),
        json.dumps({k: v for k, v in _valid_json().items() if k != "workload"}).encode(),
    ],
    ids=[
        "empty",
        "truncated",
        "not-utf8",
        "not-an-object",
        "other-format",
        "float-amount",
        "negative-amount",
        "nan-amount",
        "order-mismatch",
        "hooks-unknown-plugin",
        "unknown-phase",
        "pid-as-string",
        "bad-start-time",
        "empty-agent",
        "missing-key",
    ],
)
def test_unreadable_records_are_set_aside_and_reported(tmp_path, content):
    ledger = Ledger(tmp_path)
    ledger.write(record(workload="pid:1"))
    put_raw(ledger, "agent-1", "pid:42", content)
    scan = ledger.scan()
    assert list(scan.records) == [(AgentId("agent-1"), "pid:1")]
    [aside] = scan.set_aside
    assert aside.key == ("agent-1", "pid:42")
    assert aside.moved_to == "set_aside"
    [(agent, workload, _reason, _at)] = ledger.set_aside_rows()
    assert (agent, workload) == ("agent-1", "pid:42")
    [(kept,)] = ledger.db.execute("SELECT body FROM set_aside").fetchall()
    assert kept == content
    assert ledger.scan().set_aside == ()  # reported once, then out of the way


def test_a_record_under_the_wrong_key_is_set_aside(tmp_path):
    ledger = Ledger(tmp_path)
    put_raw(ledger, "agent-2", "pid:42", json.dumps(record().to_json()))
    scan = ledger.scan()
    assert scan.records == {}
    assert "stored under another key" in scan.set_aside[0].reason


def test_a_deeply_nested_record_is_set_aside_unparsed(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record(workload="good"))
    put_raw(ledger, "agent-1", "deep", "[" * 200_000 + "]" * 200_000)
    scan = ledger.scan()
    assert list(scan.records) == [(AgentId("agent-1"), "good")]
    [aside] = scan.set_aside
    assert "nested 200000 levels deep" in aside.reason


def test_an_oversized_record_is_set_aside_unparsed(tmp_path):
    ledger = Ledger(tmp_path)
    data = {**_valid_json(), "padding": "x" * MAX_RECORD_BYTES}
    put_raw(ledger, "agent-1", "pid:42", json.dumps(data))
    [aside] = ledger.scan().set_aside
    assert "larger than the limit" in aside.reason


def test_nesting_inside_strings_does_not_count():
    rec = record(workload="[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[")
    assert parse_record(json.dumps(rec.to_json())) == rec


@pytest.mark.parametrize(
    "amount",
    [
        "123456789012345678901234567890",
        "1E+999999",
        "1e999999",
        "1e-999999",
        "0E-999999",
        "Infinity",
        "-Infinity",
        "sNaN",
        "1" * 5000,
        "0." + "0" * 30 + "1",
    ],
)
def test_absurd_amounts_are_set_aside(tmp_path, amount):
    ledger = Ledger(tmp_path)
    data = {**_valid_json(), "allocation": {"cpu": {"cpu": {"0": amount}}}, "order": ["cpu"]}
    put_raw(ledger, "agent-1", "pid:42", json.dumps(data))
    scan = ledger.scan()
    assert scan.records == {}
    [aside] = scan.set_aside
    assert "out of range" in aside.reason or "finite" in aside.reason
    assert len(aside.reason) < 300


@pytest.mark.parametrize("amount", ["1000000000000000000000000", "0.000000000000000000000001", "0"])
def test_large_and_small_amounts_in_range_round_trip(tmp_path, amount):
    ledger = Ledger(tmp_path)
    rec = record(allocation={DeviceName("mem"): {"mem": {"root": Decimal(amount)}}}, order=("mem",))
    ledger.write(rec)
    assert ledger.scan().records == {rec.key: rec}


def test_a_state_dir_that_cannot_hold_the_ledger_is_a_config_error(tmp_path):
    state = tmp_path / "not-a-dir"
    state.write_text("")
    ledger = Ledger(state, source="host.toml")
    with pytest.raises(ConfigError) as info:
        ledger.scan()
    assert info.value.key == "resource.state-dir"
    assert info.value.file == "host.toml"
    assert str(state) in str(info.value)
    with pytest.raises(ConfigError, match=r"resource\.state-dir"):
        ledger.write(record())
    assert state.read_text() == ""  # the file is untouched


def test_a_file_that_is_not_a_database_is_a_config_error_with_the_fix(tmp_path):
    (tmp_path / "ledger.db").write_bytes(b"not sqlite at all" * 100)
    (tmp_path / "ledger.db").chmod(0o600)
    with pytest.raises(ConfigError, match="move the file away"):
        Ledger(tmp_path).scan()


def test_from_json_refuses_garbage():
    with pytest.raises(LedgerFormatError):
        LedgerRecord.from_json(None)


LOCK_PROBE = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=0.2, isolation_level=None)
try:
    db.execute("BEGIN IMMEDIATE")
except sqlite3.OperationalError:
    sys.exit(3)
sys.exit(0)
"""


def _probe(path) -> int:
    return subprocess.run([sys.executable, "-c", LOCK_PROBE, str(path)], check=False).returncode


def test_a_transaction_excludes_other_processes_and_is_reentrant(tmp_path):
    ledger = Ledger(tmp_path)
    with ledger.transaction(), ledger.transaction():
        assert _probe(ledger.path) == 3
        ledger.write(record())  # writing opens a transaction again: re-entrant
    assert _probe(ledger.path) == 0


def test_reading_needs_no_write_access_and_never_waits_for_writers(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record())
    reader = Ledger(tmp_path)
    with ledger.transaction():
        ledger.write(record(workload="uncommitted"))
        assert list(reader.read_all()) == [(AgentId("agent-1"), "pid:42")]
    assert sorted(k[1] for k in reader.read_all()) == ["pid:42", "uncommitted"]


def test_reading_an_absent_ledger_creates_nothing(tmp_path):
    assert Ledger(tmp_path / "state").read_all() == {}
    assert not (tmp_path / "state").exists()


def test_stamps_tell_our_process_from_a_reused_pid():
    me = ProcessStamp.of(os.getpid())
    assert me is not None
    assert me.is_running()
    assert not ProcessStamp(os.getpid(), "1").is_running()  # same pid, other start time


def test_stamps_of_exited_and_zombie_processes_are_not_running():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    stamp = ProcessStamp.of(child.pid)
    assert stamp is not None
    process = psutil.Process(child.pid)
    while process.status() != psutil.STATUS_ZOMBIE:  # exited, not yet reaped
        time.sleep(0.01)
    assert not stamp.is_running()
    child.wait()
    assert not stamp.is_running()
    assert ProcessStamp.of(child.pid) is None or ProcessStamp.of(child.pid) != stamp


@pytest.mark.parametrize("start", ["", "soon", "-1", "Infinity"])
def test_stamps_refuse_malformed_start_times(start):
    with pytest.raises(ValueError, match="start time"):
        ProcessStamp(1, start)


def test_the_json_file_ledger_of_before_is_imported_once(tmp_path):
    old = tmp_path / "ledger"
    old.mkdir(mode=0o700)
    data = record(workload="live").to_json()
    for key in ("started", "handle", "teardown", "version"):  # not in the old format
        del data[key]
    data["format"] = "accelkit-ledger/1"
    (old / "agent-1+live.json").write_text(json.dumps(data))
    (old / "agent-1+broken.json").write_text('{"format": "accel')
    (old / ".lock").write_text("")
    ledger = Ledger(tmp_path)
    scan = ledger.scan()
    assert list(scan.records) == [(AgentId("agent-1"), "live")]
    assert [row[1] for row in ledger.set_aside_rows()] == ["agent-1+broken.json"]
    assert not old.exists()
    assert (tmp_path / "ledger.imported" / "agent-1+live.json").exists()
    ledger.close()
    assert list(Ledger(tmp_path).scan().records) == [(AgentId("agent-1"), "live")]


def test_reading_works_in_a_directory_nobody_may_write(tmp_path):
    # a read-only mount, simulated with the immutable attribute (which binds root too)
    ledger = Ledger(tmp_path / "state")
    ledger.write(record())
    ledger.close()  # the last connection folds the WAL into the database and removes it
    if subprocess.run(["chattr", "+i", str(tmp_path / "state")], check=False).returncode:
        pytest.skip("no chattr +i on this file system")
    try:
        with pytest.raises(OSError):
            (tmp_path / "state" / "probe").write_text("")
        assert list(Ledger(tmp_path / "state").read_all()) == [(AgentId("agent-1"), "pid:42")]
    finally:
        subprocess.run(["chattr", "-i", str(tmp_path / "state")], check=True)


@settings(max_examples=300)
@given(
    st.decimals(allow_nan=False, allow_infinity=False, min_value=0).filter(
        lambda d: abs(d.adjusted()) < 10_000
    )
)
def test_a_record_holds_exactly_the_amounts_it_can_read_back(amount):
    """What a record writes, it reads back: an amount out of range is refused when written
    (the booking fails) instead of being written and then set aside as unreadable."""
    rec = record(
        allocation={DeviceName("npx"): {"npx.shares": {"n0": amount}}}, order=(DeviceName("npx"),)
    )
    if amount_in_range(amount):
        again = parse_record(record_text(rec))
        assert again.allocation[DeviceName("npx")]["npx.shares"]["n0"] == amount
    else:
        with pytest.raises(LedgerFormatError, match="out of range"):
            record_text(rec)


def test_a_booking_past_the_ledgers_range_is_refused_and_writes_nothing(tmp_path):
    ledger = Ledger(tmp_path)
    huge = record(
        allocation={DeviceName("npx"): {"npx.device": {"n0": Decimal("1E+26")}}},
        order=(DeviceName("npx"),),
    )
    with pytest.raises(LedgerFormatError, match="100000000000000000000000000 is out of range"):
        ledger.write(huge)
    assert ledger.read_all() == {}
    assert ledger.set_aside_rows() == []


_JSON_TEXTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
).map(json.dumps)


@given(
    text=st.one_of(
        _JSON_TEXTS,
        st.tuples(st.sampled_from(["", " ", "\n", "\ufeff"]), _JSON_TEXTS, st.text(max_size=4)).map(
            "".join
        ),
        st.text(max_size=12).map(lambda t: "{" + t),
    )
)
def test_record_text_is_read_as_json_loads_reads_it(text):
    """The scanner's short cut for a record as written answers any text as ``json.loads``
    does: the same value, or the same error (extra data, a BOM, a bad object)."""
    from accelkit.workload.ledger_rows import _loads

    assert _answer(_loads, text) == _answer(json.loads, text)


def _answer(loads, text):
    try:
        return ("value", loads(text))
    except ValueError as exc:
        return ("error", type(exc), str(exc))


@pytest.mark.parametrize("field", ["hooks", "started"])
@pytest.mark.parametrize(
    "phases", [["pre_create", "no_such_phase"], [["pre_create"]], [{}], "pre_create", 7, None]
)
def test_phases_that_are_not_phase_names_make_the_record_unreadable(field, phases):
    """Phase lists are read through a cache of those seen: a bad one (an unknown name, an
    unhashable element, not a list) is refused all the same, and a good one read after it is
    read whole."""
    data = _valid_json()
    data[field] = {"cuda": phases}
    with pytest.raises(LedgerFormatError, match="malformed ledger record"):
        parse_record(json.dumps(data))
    data[field] = {"cuda": ["pre_create", "post_create"]}
    again = parse_record(json.dumps(data))
    assert getattr(again, field) == {"cuda": (WorkloadPhase.PRE_CREATE, WorkloadPhase.POST_CREATE)}
