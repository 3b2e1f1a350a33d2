"""The ledger's files: JSON records, atomic writes, the lock, set-aside, and process stamps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import psutil
import pytest

from accelkit.errors import ConfigError
from accelkit.events import WorkloadPhase
from accelkit.types import AgentId, DeviceName, Workload
from accelkit.workload import Ledger, LedgerFormatError, LedgerRecord, ProcessStamp
from accelkit.workload.ledger import is_temp_file_name, record_file_name


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
    data = json.loads(ledger.path_of("agent-1", "pid:42").read_text())
    assert data["allocation"]["cuda"]["cuda.shares"] == {"cuda0": "0.25", "cuda1": "0.5"}
    assert data["hooks"] == {"cuda": ["pre_create"]}
    assert ledger.read("agent-1", "pid:42") == rec
    assert ledger.scan().records == {rec.key: rec}
    assert ledger.read("agent-1", "nope") is None


def test_file_names_quote_every_id():
    assert record_file_name("a/b", "x+y") == "a%2Fb+x%2By.json"
    assert record_file_name("agent-1", "pid:42") == "agent-1+pid%3A42.json"
    assert record_file_name("a.b", ".w") == "a.b+.w.json"


@pytest.mark.parametrize(
    ("agent", "name"),
    [
        ("..", "%2E.+pid%3A1.json"),
        (".tmp-gpu", "%2Etmp-gpu+pid%3A1.json"),
        (".x", "%2Ex+pid%3A1.json"),
    ],
)
def test_file_names_never_start_with_a_dot(agent, name):
    assert record_file_name(agent, "pid:1") == name
    assert not is_temp_file_name(name)


@pytest.mark.parametrize("agent", [".tmp-gpu", ".x", "..", "%2Ex"])
def test_records_of_agents_named_with_a_leading_dot_survive_scans(tmp_path, agent):
    ledger = Ledger(tmp_path)
    rec = record(agent=agent)
    ledger.write(rec)
    assert ledger.scan().records == {rec.key: rec}
    assert ledger.scan().records == {rec.key: rec}  # not deleted as a temp file, nor skipped
    assert ledger.read(agent, "pid:42") == rec
    assert not any(p.name.startswith(".") for p in ledger.directory.iterdir() if p.name != ".lock")


def test_temp_files_are_told_by_the_writers_pattern_only():
    assert is_temp_file_name(".agent-1+pid%3A42.json.tmp-999")
    assert is_temp_file_name(".%2Etmp-gpu+w.json.tmp-12")
    assert not is_temp_file_name(".tmp-gpu+w.json")
    assert not is_temp_file_name(".lock")
    assert not is_temp_file_name(".agent-1+w.json.tmp-")
    assert not is_temp_file_name(".agent-1+w.json.tmp-12.json")
    assert not is_temp_file_name("agent-1+w.json.tmp-12")
    assert not is_temp_file_name("a.tmp-b+w.json")


def test_other_dot_files_are_left_alone(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record())
    (ledger.directory / ".notes.tmp-x").write_text("mine")
    (ledger.directory / ".x+w.json").write_text("{")
    assert len(ledger.scan().records) == 1
    assert (ledger.directory / ".notes.tmp-x").read_text() == "mine"
    assert (ledger.directory / ".x+w.json").exists()


def test_a_record_named_the_old_way_is_read_under_its_current_name(tmp_path):
    ledger = Ledger(tmp_path)
    rec = record(agent=".x")
    ledger.directory.mkdir(parents=True)
    old = ledger.directory / ".x+pid%3A42.json"
    old.write_text(json.dumps(rec.to_json()))
    assert ledger.scan().records == {rec.key: rec}
    assert not old.exists()
    assert ledger.read(".x", "pid:42") == rec


def test_remove(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record())
    assert ledger.remove("agent-1", "pid:42")
    assert not ledger.remove("agent-1", "pid:42")
    assert ledger.scan().records == {}


def test_a_failed_write_leaves_the_old_record_and_no_temp_file(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path)
    old = record()
    ledger.write(old)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        ledger.write(old.with_phase(DeviceName("cpu"), WorkloadPhase.PRE_CREATE))
    monkeypatch.undo()
    assert ledger.read("agent-1", "pid:42") == old
    assert [p.name for p in ledger.directory.iterdir() if "tmp" in p.name] == []


def test_stale_temp_files_of_a_crashed_writer_are_cleaned(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record())
    (ledger.directory / ".agent-1+pid%3A42.json.tmp-999").write_text("{")
    scan = ledger.scan()
    assert len(scan.records) == 1
    assert scan.set_aside == ()
    assert not (ledger.directory / ".agent-1+pid%3A42.json.tmp-999").exists()


def _valid_json() -> dict:
    return record().to_json()


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
    bad = ledger.path_of("agent-1", "pid:42")
    bad.write_bytes(content)
    scan = ledger.scan()
    assert list(scan.records) == [(AgentId("agent-1"), "pid:1")]
    [aside] = scan.set_aside
    assert aside.path == bad
    assert aside.moved_to is not None
    assert aside.moved_to.read_bytes() == content
    assert not bad.exists()
    assert ledger.scan().set_aside == ()  # reported once, then out of the way


def test_a_record_in_the_wrong_file_is_set_aside(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write(record())
    os.replace(ledger.path_of("agent-1", "pid:42"), ledger.path_of("agent-2", "pid:42"))
    scan = ledger.scan()
    assert scan.records == {}
    assert "belongs in another file" in scan.set_aside[0].reason


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
    bad = ledger.path_of("agent-1", "pid:42")
    ledger.directory.mkdir(parents=True)
    bad.write_text(json.dumps(data))
    scan = ledger.scan()
    assert scan.records == {}
    [aside] = scan.set_aside
    assert aside.path == bad
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


def test_from_json_refuses_garbage():
    with pytest.raises(LedgerFormatError):
        LedgerRecord.from_json(None)


LOCK_PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(3)
sys.exit(0)
"""


def _probe(path) -> int:
    return subprocess.run([sys.executable, "-c", LOCK_PROBE, str(path)], check=False).returncode


def test_the_lock_excludes_other_processes_and_is_reentrant(tmp_path):
    ledger = Ledger(tmp_path)
    with ledger.locked(), ledger.locked():
        assert _probe(ledger.directory / ".lock") == 3
        ledger.write(record())  # writing takes the lock again: re-entrant
    assert _probe(ledger.directory / ".lock") == 0


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


def test_a_record_that_cannot_be_read_now_is_never_set_aside(tmp_path, monkeypatch):
    # an I/O or permission error is not the record's fault: hiding it would free its devices
    ledger = Ledger(tmp_path)
    ledger.write(record(workload="pid:7"))
    path = ledger.path_of("agent-1", "pid:7")
    real = Path.read_bytes

    def failing(self):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", failing)
    with pytest.raises(ConfigError, match="cannot read the ledger record") as exc:
        ledger.scan()
    assert exc.value.key == "resource.state-dir"
    monkeypatch.undo()
    assert list(ledger.scan().records) == [(AgentId("agent-1"), "pid:7")]
