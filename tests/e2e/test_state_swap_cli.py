"""State that cannot be swapped under a live node (DESIGN §18, §17).

While a workload holds the node's one GPU, the state directory is swapped (a symbolic link
planted by another user pointed at another root-owned directory) or its ``ledger.db`` emptied,
deleted or replaced: the next ``accelkit run`` is refused with a clear error and nothing is
made in the other directory, where before it took a new, empty ledger and was granted the same
GPU.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelkit.errors import ConfigError
from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit
from accelkit.workload import Ledger

OTHER_UID = 54321  # "another user": we are root, so we can hand a link to any uid

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="playing another user needs root")


def accelkit(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, config=config)


def gpu_run(config: Path) -> subprocess.CompletedProcess[str]:
    return accelkit(config, "run", "--agent", "agent-1", "--slots", "cuda.device=1", "--", "true")


@pytest.fixture
def holding(request: pytest.FixtureRequest) -> Iterator[list[subprocess.Popen[str]]]:
    """Runs that hold the GPU until the test ends (then they are stopped with SIGTERM)."""
    runs: list[subprocess.Popen[str]] = []
    yield runs
    for run in runs:
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=120)


def hold_the_gpu(config: Path, runs: list[subprocess.Popen[str]]) -> None:
    argv = [*ACCELKIT, "run", "--config", str(config), "--agent", "agent-1"]
    argv += ["--slots", "cuda.device=1", "--", "sh", "-c", "echo ready; exec sleep 300"]
    run = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(), text=True
    )
    runs.append(run)
    assert run.stdout is not None
    assert run.stdout.readline() == "ready\n"


def refused(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "error: " in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


def test_a_state_dir_link_swapped_by_another_user_is_refused(
    mock_node, tmp_path: Path, holding: list[subprocess.Popen[str]]
) -> None:
    config = mock_node(gpus=1)
    shared = tmp_path / "shared"  # as /tmp: anyone may create entries, only in their own name
    shared.mkdir()
    shared.chmod(0o1777)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir(mode=0o700)
    theirs.mkdir(mode=0o700)  # root's too: only the link betrays the swap
    link = shared / "state"
    link.symlink_to(ours)  # our own link: followed, its target checked
    config.write_text(config.read_text().replace(str(tmp_path / "state"), str(link)))
    hold_the_gpu(config, holding)
    assert (ours / "ledger.db").exists()

    link.unlink()  # what its owner could do, had another user planted it
    link.symlink_to(theirs)
    os.lchown(link, OTHER_UID, OTHER_UID)
    result = gpu_run(config)
    refused(
        result,
        f"unsafe state directory: {str(link)!r} is a symbolic link (to {str(theirs)!r}) "
        f"owned by uid {OTHER_UID}",
        "resource.state-dir",
    )
    assert os.listdir(theirs) == []  # no new ledger was taken there


def test_a_state_dir_reached_through_a_directory_others_can_write_is_refused(
    tmp_path: Path,
) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # not sticky: anyone could rename "state" and put theirs there
    (open_dir / "state").mkdir(mode=0o700)
    with pytest.raises(ConfigError, match="which others can write") as info:
        Ledger(open_dir / "state").scan()
    assert str(open_dir) in str(info.value)
    assert os.listdir(open_dir / "state") == []


def _empty(state: Path) -> None:
    for name in ("ledger.db-wal", "ledger.db-shm"):
        (state / name).unlink(missing_ok=True)
    (state / "ledger.db").write_bytes(b"")


def _delete(state: Path) -> None:
    for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
        (state / name).unlink(missing_ok=True)


def _replace(state: Path) -> None:
    other = state.parent / "other"
    made = Ledger(other)  # a ledger of its own: another identity
    made.scan()
    made.close()  # the last connection moves the WAL into the database
    for name in ("ledger.db-wal", "ledger.db-shm"):
        (state / name).unlink(missing_ok=True)
    shutil.copy(other / "ledger.db", state / "ledger.aside")
    os.replace(state / "ledger.aside", state / "ledger.db")


@pytest.mark.parametrize(
    ("how", "found"),
    [
        (_empty, "the database carries none"),
        (_delete, "the database carries none"),
        (_replace, "the database is ledger "),
    ],
    ids=["emptied", "deleted", "replaced"],
)
def test_a_ledger_db_emptied_deleted_or_replaced_beside_a_live_workload_is_refused(
    mock_node, tmp_path: Path, holding: list[subprocess.Popen[str]], how, found: str
) -> None:
    config = mock_node(gpus=1)
    state = tmp_path / "state"
    hold_the_gpu(config, holding)
    old_id = (state / "ledger.id").read_text().strip()
    how(state)
    before = sorted(os.listdir(state))
    for result in (gpu_run(config), accelkit(config, "status")):
        refused(
            result,
            f"ledger {str(state / 'ledger.db')!r} is not this node's ledger: ledger.id says "
            f"{old_id}, {found}",
            "emptied, deleted or replaced",
            f"containers labelled io.accelkit.ledger={old_id}",
            f"remove {str(state / 'ledger.id')!r} to start a new ledger",
        )
    assert sorted(os.listdir(state)) == before  # nothing was made or written


def test_removing_ledger_id_once_nothing_runs_starts_a_new_ledger(mock_node, tmp_path: Path):
    config = mock_node(gpus=1)
    state = tmp_path / "state"
    assert gpu_run(config).returncode == 0
    old_id = (state / "ledger.id").read_text().strip()
    assert Ledger(state).ledger_id == old_id  # the database carries the same identity
    _delete(state)
    refused(gpu_run(config), f"ledger.id says {old_id}")
    (state / "ledger.id").unlink()  # the operator's call: no workload of it runs
    result = gpu_run(config)
    assert result.returncode == 0, result.stderr
    new_id = (state / "ledger.id").read_text().strip()
    assert new_id != old_id
    assert Ledger(state).ledger_id == new_id


def test_a_ledger_of_an_earlier_version_gets_its_identity_recorded(tmp_path: Path) -> None:
    state = tmp_path / "state"
    ledger = Ledger(state)
    known = ledger.ledger_id
    ledger.close()
    (state / "ledger.id").unlink()  # as an earlier version left it: the database alone
    assert Ledger(state).ledger_id == known
    assert (state / "ledger.id").read_text() == f"{known}\n"
