"""The orphan sweep against the session's dockerd: a container of this ledger that no record
names is stopped and removed by the next full reconciliation; another ledger's container, an
unlabelled one, one just created and one whose record is being written are left alone; an
engine that is down is a warning and the run goes on."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.runtime.base import LaunchSpec
from accelkit.runtime.docker import DockerRuntime
from accelkit.runtime.docker_ops import _epoch
from accelkit.types import AgentId, Workload
from accelkit.workload import Ledger, LedgerRecord
from accelkit.workload.orphans import SweepReport, container_engines, note_container_engine

from .docker_commands import accelkit, kill_a_run_holding_the_gpu

if TYPE_CHECKING:
    from .conftest import Engine

pytestmark = pytest.mark.slow

AGENT = AgentId("agent-1")
#: ``accelkit`` with no age window: a container made a moment ago may be swept
NO_WINDOW = [
    sys.executable,
    "-c",
    "import accelkit.workload.orphans as o; o.ORPHAN_MIN_AGE_S = 0.0\n"
    "from accelkit.cli.app import run; run()",
]
OTHER_LEDGER = "f" * 32


def exists(engine: Engine, ident: str) -> bool:
    listed = engine.run_cli("ps", "--all", "--quiet", "--no-trunc", "--filter", f"id={ident}")
    return ident in listed.split()


@pytest.fixture
def made(dockerd: Engine) -> Iterator[list[str]]:
    """The ids of containers a test makes by hand: removed at its end, whatever it did."""
    idents: list[str] = []
    yield idents
    for ident in idents:
        subprocess.run([*dockerd.cli, "rm", "--force", ident], capture_output=True, check=False)


async def labelled_container(engine: Engine, ledger_id: str, made: list[str]) -> tuple[str, str]:
    """A running container as accelkit makes them, labelled with ``ledger_id`` ("" for none),
    with no ledger record: its id and its workload id."""
    runtime = DockerRuntime(engine.url, output=None)
    try:
        workload = await runtime.new_workload(AGENT)
        spec = LaunchSpec(
            AGENT,
            workload,
            ("sleep", "300"),
            ledger_key=f"{AGENT}/{workload.id}",
            image=engine.image,
            ledger_id=ledger_id,
        )
        handle = await runtime.create(spec)
        made.append(handle.ident)
        await runtime.start(handle)
        return handle.ident, workload.id
    finally:
        await runtime.close()


def test_a_container_whose_record_was_set_aside_is_removed_by_the_next_reconcile(
    dockerd: Engine, mock_node: Callable[..., Path]
) -> None:
    """kill -9 of ``accelkit run``, then its record turns unreadable and is set aside: the
    container runs on with a GPU nobody has booked, until a reconcile finds it. One made a
    moment ago is spared (the age window); past it, it is stopped and removed."""
    node = mock_node(gpus=1)
    kill_a_run_holding_the_gpu(dockerd, node)
    ledger = Ledger(node.parent / "state")
    (record,) = ledger.read_all().values()
    assert record.handle is not None
    ident, name = record.handle.ident, record.workload.id
    with ledger.transaction():
        ledger.db.execute("UPDATE records SET body = 'not a record'")
    ledger.close()

    spared = accelkit(dockerd.url, node, "status", "--config", str(node))
    assert spared.returncode == 0, spared.stderr
    assert "set aside unreadable record" in spared.stderr
    assert "orphan" not in spared.stderr
    assert exists(dockerd, ident)  # younger than the window: maybe a booking under way

    swept = accelkit(dockerd.url, node, "status", "--config", str(node), command=NO_WINDOW)
    assert swept.returncode == 0, swept.stderr
    line = f"removed orphan container {name} ({ident[:12]}) of workload {name!r}: no ledger record"
    assert f"warning: {line}" in swept.stderr.splitlines()
    assert not exists(dockerd, ident)
    args = ["run", "--config", str(node), "--agent", "agent-1", "--slots", "cuda.device=1"]
    args += ["--runtime", "docker", "--image", dockerd.image, "--", "true"]
    after = accelkit(dockerd.url, node, *args)
    assert after.returncode == 0, after.stderr
    assert "orphan" not in after.stderr


def test_only_this_ledger_s_containers_are_swept(
    dockerd: Engine,
    mock_node: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    made: list[str],
) -> None:
    """Another state dir's container on the same engine, and one made before containers
    carried the ledger's identity, are never touched, record or not."""
    config = load_host_config(mock_node(gpus=1))
    monkeypatch.setenv("DOCKER_HOST", dockerd.url)

    async def sweep() -> tuple[str, str, str, SweepReport]:
        async with Node.open(config) as node:
            ours_id = node.ledger_id_for(node.runtimes["docker"])  # notes the engine
            ours, _ = await labelled_container(dockerd, ours_id, made)
            theirs, _ = await labelled_container(dockerd, OTHER_LEDGER, made)
            unlabelled, _ = await labelled_container(dockerd, "", made)
            return ours, theirs, unlabelled, await node.sweep_orphans(grace=0, min_age=0)

    ours, theirs, unlabelled, report = asyncio.run(sweep())
    assert [o.id for o in report.removed] == [ours]
    assert report.problems == ()
    assert not exists(dockerd, ours)
    assert exists(dockerd, theirs)
    assert exists(dockerd, unlabelled)


def test_a_docker_run_sweeps_only_where_the_ledger_cannot_account_for_a_container(
    dockerd: Engine,
    mock_node: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    made: list[str],
) -> None:
    """Every container record known: the run asks the engine nothing beyond its container,
    and an orphan waits for the next status. A container record without its container's id
    (a run killed between creating and recording it): the run sweeps first."""
    node = mock_node(cpus=1)
    config = load_host_config(node)
    monkeypatch.setenv("DOCKER_HOST", dockerd.url)

    async def orphan() -> str:
        async with Node.open(config) as opened:
            ident, _ = await labelled_container(
                dockerd, opened.ledger_id_for(opened.runtimes["docker"]), made
            )
            return ident

    ident = asyncio.run(orphan())
    args = ["run", "--config", str(node), "--agent", "agent-1", "--slots", "cpu=1"]
    args += ["--runtime", "docker", "--image", dockerd.image, "--", "true"]
    quiet = accelkit(dockerd.url, node, *args, command=NO_WINDOW)
    assert quiet.returncode == 0, quiet.stderr
    assert "orphan" not in quiet.stderr
    assert exists(dockerd, ident)

    unrecorded = LedgerRecord(AGENT, Workload.container("accelkit-agent-1-0123456789ab"), {})
    ledger = Ledger(config.resource.state_dir)
    ledger.write(unrecorded)  # its container never made, or made and not recorded
    ledger.close()
    swept = accelkit(dockerd.url, node, *args, command=NO_WINDOW)
    assert swept.returncode == 0, swept.stderr
    assert "removed orphan container" in swept.stderr
    assert not exists(dockerd, ident)


def test_a_container_just_created_without_its_record_is_not_swept(
    dockerd: Engine,
    mock_node: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    made: list[str],
) -> None:
    """A program that creates before it records: within the age window its container is
    spared (and said at -v); only past it is it an orphan."""
    config = load_host_config(mock_node(gpus=1))
    monkeypatch.setenv("DOCKER_HOST", dockerd.url)

    async def sweep() -> tuple[str, str, SweepReport, SweepReport]:
        async with Node.open(config) as node:
            ident, name = await labelled_container(
                dockerd, node.ledger_id_for(node.runtimes["docker"]), made
            )
            young = await node.sweep_orphans(grace=0)
            assert exists(dockerd, ident)
            return ident, name, young, await node.sweep_orphans(grace=0, min_age=0)

    ident, name, young, old = asyncio.run(sweep())
    assert young == SweepReport(too_young=(name,))
    assert [o.id for o in old.removed] == [ident]
    assert not exists(dockerd, ident)


def test_a_container_booked_by_a_run_that_has_not_recorded_its_handle_is_not_swept(
    dockerd: Engine,
    mock_node: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    made: list[str],
) -> None:
    """A run books its record before it creates the container: between the create and the
    handle being recorded, the record names the container by agent and workload id."""
    config = load_host_config(mock_node(gpus=1))
    monkeypatch.setenv("DOCKER_HOST", dockerd.url)

    async def sweep() -> tuple[str, SweepReport]:
        async with Node.open(config) as node:
            ident, name = await labelled_container(
                dockerd, node.ledger_id_for(node.runtimes["docker"]), made
            )
            booked = LedgerRecord(AGENT, Workload.container(name), {})  # no handle yet
            Ledger(config.resource.state_dir).write(booked)  # as another process would
            return ident, await node.sweep_orphans(grace=0, min_age=0)

    ident, report = asyncio.run(sweep())
    assert report == SweepReport()
    assert exists(dockerd, ident)


def test_a_container_whose_record_is_being_written_is_not_swept(
    dockerd: Engine,
    mock_node: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    made: list[str],
) -> None:
    """Another process holds the ledger's lock and is writing the container's record while
    the sweep lists the engine: the sweep waits for the lock and then sees the record (even
    with no age window at all)."""
    config_path = mock_node(gpus=1)
    config = load_host_config(config_path)
    state = config_path.parent / "state"
    monkeypatch.setenv("DOCKER_HOST", dockerd.url)
    holding, listed = threading.Event(), threading.Event()

    def booker(workload_id: str) -> None:
        other = Ledger(state)  # its own connection, as another process has
        with other.transaction():
            holding.set()
            listed.wait(30)
            time.sleep(0.5)  # the sweep is waiting for the lock by now
            other.write(LedgerRecord(AGENT, Workload.container(workload_id), {}))
        other.close()

    async def sweep() -> tuple[str, SweepReport]:
        async with Node.open(config) as node:
            docker = node.runtimes["docker"]
            assert isinstance(docker, DockerRuntime)
            ident, name = await labelled_container(dockerd, node.ledger_id_for(docker), made)
            thread = threading.Thread(target=booker, args=(name,))
            thread.start()
            holding.wait(30)
            listing = docker.containers

            async def list_then_tell(*args: object, **kwargs: object) -> object:
                found = await listing(*args, **kwargs)  # type: ignore[arg-type]
                listed.set()  # the container is listed; its record is not committed yet
                return found

            monkeypatch.setattr(docker, "containers", list_then_tell)
            try:
                report = await node.sweep_orphans(grace=0, min_age=0)
            finally:
                listed.set()
                thread.join(30)
            return ident, report

    ident, report = asyncio.run(sweep())
    assert report.removed == ()
    assert exists(dockerd, ident)


@pytest.mark.parametrize(
    ("system_time", "epoch"),
    [
        ("2026-11-25T17:54:27.123456789Z", 1795629267.123456789),
        ("2026-11-25T18:54:27+01:00", 1795629267.0),
        ("2026-13-25T17:54:27Z", None),
        ("yesterday", None),
        (None, None),
    ],
)
def test_the_docker_engine_s_clock_is_read_from_its_system_time(
    system_time: object, epoch: float | None
) -> None:
    found = _epoch(system_time)
    if epoch is None:
        assert found is None
    else:
        assert found == pytest.approx(epoch, abs=1e-5)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_engine_that_is_down_makes_the_sweep_a_warning_and_the_run_works(
    mock_node: Callable[..., Path], tmp_path: Path
) -> None:
    """The ledger ran containers on two engines that are gone now: a process-runtime run does
    not ask them at all, and ``accelkit status`` warns about both and works, without waiting."""
    node = mock_node(cpus=1)
    ledger = Ledger(node.parent / "state")
    down = f"tcp://127.0.0.1:{_closed_port()}"
    gone = f"unix://{tmp_path}/gone.sock"
    note_container_engine(ledger, down)
    with socket.socket(socket.AF_UNIX) as engine:  # an engine there once, gone since
        engine.bind(f"{tmp_path}/gone.sock")
        note_container_engine(ledger, gone)
    (tmp_path / "gone.sock").unlink()
    ledger.close()
    args = ["run", "--config", str(node), "--agent", "agent-1", "--slots", "cpu=1", "--", "true"]
    result = accelkit(down, node, *args)
    assert result.returncode == 0, result.stderr
    assert "orphan containers" not in result.stderr
    assert "Docker engine" not in result.stderr
    started = time.monotonic()
    result = accelkit(down, node, "status")
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "orphan containers" in line]
    assert len(warnings) == 2, result.stderr
    reason = "(Connect call failed|Connection refused).*"
    assert re.fullmatch(
        f"warning: ledger: cannot reach the Docker engine at {down}: {reason}; "
        "orphan containers there were not looked for",
        warnings[0],
    )
    assert warnings[1] == (
        f"warning: ledger: cannot reach the Docker engine at {gone}: no socket "
        f"{tmp_path}/gone.sock; orphan containers there were not looked for"
    )
    assert took < 30


def test_a_docker_run_on_an_engine_without_a_socket_leaves_the_sweep_nothing_to_ask(
    mock_node: Callable[..., Path], tmp_path: Path
) -> None:
    """No container can be made where there is no socket: the ledger does not note that
    engine, so later sweeps do not warn about it forever."""
    node = mock_node(cpus=1)
    nowhere = f"unix://{tmp_path}/nowhere.sock"
    args = ["run", "--config", str(node), "--agent", "agent-1", "--slots", "cpu=1"]
    result = accelkit(nowhere, node, *args, "--runtime", "docker", "--image", "x", "--", "true")
    assert result.returncode == 125
    assert f"cannot reach the Docker engine at {nowhere}" in result.stderr
    ledger = Ledger(node.parent / "state")
    assert container_engines(ledger) == []
    ledger.close()
    result = accelkit(nowhere, node, "status")
    assert result.returncode == 0, result.stderr
    assert "Docker engine" not in result.stderr
