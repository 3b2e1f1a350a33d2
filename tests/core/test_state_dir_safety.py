"""The state directory is used only when it is ours (DESIGN §17): each attack of another local
user on it is refused with a ConfigError naming the path, the owner and the fix."""

from __future__ import annotations

import asyncio
import json
import os
from decimal import Decimal

import pytest

from accelkit.config import load_host_config
from accelkit.errors import ConfigError
from accelkit.node import Node
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord

OTHER_UID = 54321  # "another user": we are root, so we can hand files to any uid


def record(workload="w") -> LedgerRecord:
    cuda = DeviceName("cuda")
    return LedgerRecord(
        AgentId("agent-1"),
        Workload.process_tree(workload),
        {cuda: {SlotName("cuda.device"): {"cuda0": Decimal(1)}}},
        (cuda,),
    )


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def refused(ledger: Ledger) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        ledger.scan()
    assert info.value.key == "resource.state-dir"
    return info.value


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a directory to another user needs root")
def test_a_state_dir_created_first_by_another_user_is_refused(state):
    state.mkdir(mode=0o700)
    os.chown(state, OTHER_UID, OTHER_UID)
    error = refused(Ledger(state, source="host.toml"))
    text = str(error)
    assert str(state) in text
    assert f"owned by uid {OTHER_UID}" in text
    assert "chown" in text  # the fix
    assert error.file == "host.toml"
    assert os.listdir(state) == []  # nothing was created in it


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_state_dir_writable_by_others_is_refused(state, mode):
    state.mkdir()
    state.chmod(mode)
    text = str(refused(Ledger(state)))
    assert "writable by group or others" in text
    assert f"chmod go-w {state}" in text
    assert os.listdir(state) == []


@pytest.mark.parametrize("kind", ["file", "dangling link"])
def test_a_state_dir_that_is_no_directory_says_what_it_is(tmp_path, state, kind):
    if kind == "file":
        state.write_text("")
        what = "is not a directory"
    else:
        state.symlink_to(tmp_path / "gone")
        what = f"is a symbolic link to {str(tmp_path / 'gone')!r}, which does not exist"
    text = str(refused(Ledger(state)))
    assert f"the state directory {str(state)!r} {what}" in text  # not "File exists"
    assert not (tmp_path / "gone").exists()  # nothing was created through the link


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a directory to another user needs root")
def test_a_state_dir_that_is_a_symlink_to_another_users_directory_is_refused(tmp_path, state):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    state.symlink_to(theirs)
    assert f"owned by uid {OTHER_UID}" in str(refused(Ledger(state)))


@pytest.mark.parametrize(
    "name", ["ledger.db", "ledger.db-wal", "ledger.db-shm", "ledger.db-journal"]
)
def test_a_symlink_planted_in_the_state_dir_is_refused_and_its_target_untouched(
    tmp_path, state, name
):
    state.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (state / name).symlink_to(victim)
    text = str(refused(Ledger(state)))
    assert "symbolic link" in text
    assert name in text
    assert victim.read_text() == "precious"


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a file to another user needs root")
def test_a_database_owned_by_another_user_is_refused(state):
    Ledger(state).write(record())
    os.chown(state / "ledger.db", OTHER_UID, OTHER_UID)
    assert f"owned by uid {OTHER_UID}" in str(refused(Ledger(state)))


def test_a_database_that_is_not_a_regular_file_is_refused(state):
    state.mkdir(mode=0o700)
    os.mkfifo(state / "ledger.db", 0o600)
    assert "not a regular file" in str(refused(Ledger(state)))


def test_reading_for_metrics_refuses_a_planted_symlink_too(tmp_path, state):
    state.mkdir(mode=0o700)
    (state / "ledger.db").symlink_to(tmp_path / "elsewhere.db")
    with pytest.raises(ConfigError, match="symbolic link"):
        Ledger(state).read_all()


def test_forged_deep_and_huge_records_are_set_aside_and_the_node_opens(mock_node):
    config = load_host_config(mock_node(gpus=1))
    ledger = Ledger(config.resource.state_dir)
    with ledger.transaction():
        ledger.db.execute(
            "INSERT INTO records VALUES ('agent-1', 'deep', 0, ?)", ("[" * 100_000 + "]" * 100_000,)
        )
        huge = json.dumps({**record("huge").to_json(), "x": "y" * (3 << 20)})
        ledger.db.execute("INSERT INTO records VALUES ('agent-1', 'huge', 0, ?)", (huge,))
    ledger.close()

    async def main():
        async with Node.open(config) as node:
            opened = node.last_report
            booked = await node.book(
                AgentId("agent-1"), Workload.process_tree("mine"), {SlotName("cuda.device"): 1}
            )
            return opened, booked

    report, booked = asyncio.run(main())
    reasons = {s.key[1]: s.reason for s in report.set_aside}
    assert "nested 100000 levels deep" in reasons["deep"]
    assert "larger than the limit" in reasons["huge"]
    assert any("set aside unreadable record agent-1+deep" in m for m in report.messages())
    assert booked.allocation[DeviceName("cuda")]["cuda.device"] == {"cuda0": 1}
    kept = {row[1] for row in Ledger(config.resource.state_dir).set_aside_rows()}
    assert kept == {"deep", "huge"}
