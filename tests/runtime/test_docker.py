"""The docker runtime against a real dockerd started by the test session (see conftest.py)."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiodocker
import pytest
from aiohttp import web

from accelkit.errors import WorkloadError
from accelkit.runtime.base import LaunchSpec, RuntimeUnavailable, WorkloadHandle
from accelkit.runtime.docker import DockerRuntime, OutputTarget
from accelkit.types import AgentId, Mount, MountType, WorkloadConfig

if TYPE_CHECKING:
    from .conftest import Engine

T = TypeVar("T")
AGENT = AgentId("test-agent")
#: a major number of the local/experimental range: no driver, so opening a granted node
#: gives ENXIO, while a node the devices cgroup denies gives EPERM
DEVICE_MAJOR = 240

pytestmark = pytest.mark.slow


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class Captured:
    """The container's output, kept apart per stream."""

    def __init__(self) -> None:
        self.stdout, self.stderr = io.BytesIO(), io.BytesIO()

    @property
    def target(self) -> OutputTarget:
        return OutputTarget(self.stdout, self.stderr)

    @property
    def out(self) -> str:
        return self.stdout.getvalue().decode()

    @property
    def err(self) -> str:
        return self.stderr.getvalue().decode()


async def launch(
    runtime: DockerRuntime,
    engine: Engine,
    *argv: str,
    config: WorkloadConfig | None = None,
    image: str | None = None,
) -> WorkloadHandle:
    workload = await runtime.new_workload(AGENT)
    spec = LaunchSpec(
        AGENT,
        workload,
        argv,
        config=config or WorkloadConfig(),
        ledger_key=f"key-{workload.id}",
        image=image or engine.image,
    )
    handle = await runtime.create(spec)
    await runtime.start(handle)
    return handle


async def run_to_end(
    engine: Engine, *argv: str, config: WorkloadConfig | None = None
) -> tuple[int, Captured]:
    captured = Captured()
    runtime = DockerRuntime(engine.url, output=captured.target)
    try:
        handle = await launch(runtime, engine, *argv, config=config)
        status = await runtime.wait(handle)
        await runtime.stop(handle, 0)
        return status, captured
    finally:
        await runtime.close()


def test_output_and_exit_status_come_back_unchanged(dockerd: Engine) -> None:
    script = "echo out; echo err >&2; printf '\\377\\376'; exit 3"
    status, captured = run(run_to_end(dockerd, "sh", "-c", script))
    assert status == 3
    assert captured.stdout.getvalue() == b"out\n\xff\xfe"
    assert captured.err == "err\n"


def test_limits_env_mounts_and_devices_inside_the_container(
    dockerd: Engine, tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "hello").write_text("from the host\n")
    granted, other = tmp_path / "accel0", tmp_path / "accel1"
    os.mknod(granted, 0o666 | 0o020000, os.makedev(DEVICE_MAJOR, 0))
    os.mknod(other, 0o666 | 0o020000, os.makedev(DEVICE_MAJOR, 1))
    config = WorkloadConfig(
        mounts=[
            Mount(str(tmp_path / "data"), "/data", read_only=True),
            Mount(str(granted), "/dev/accel0", MountType.DEVICE),
        ],
        env_vars={"ACCEL_VISIBLE": "0"},
        cpuset_cpus=(0,),
        memory_limit=64 * 1024 * 1024,
    )
    script = """
        cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max
        cat /sys/fs/cgroup/cpuset/cpuset.cpus 2>/dev/null ||
            cat /sys/fs/cgroup/cpuset.cpus.effective
        echo "env=$ACCEL_VISIBLE"
        cat /data/hello
        touch /data/new 2>/dev/null || echo read-only
        test -e /dev/accel1 || echo "no accel1"
        head -c1 /dev/accel0
        mknod /dev/accel1 c 240 1 && head -c1 /dev/accel1
        true
    """
    status, captured = run(run_to_end(dockerd, "sh", "-c", script, config=config))
    assert status == 0, captured.err
    lines = captured.out.split("\n")
    assert lines[:6] == [
        str(64 * 1024 * 1024),
        "0",
        "env=0",
        "from the host",
        "read-only",
        "no accel1",
    ]
    # the granted node opens as far as its driver (there is none); the other one is denied
    assert "/dev/accel0: No such device or address" in captured.err
    assert "/dev/accel1: Operation not permitted" in captured.err


def test_the_containers_carry_accelkits_labels(dockerd: Engine) -> None:
    async def scenario() -> None:
        runtime = DockerRuntime(dockerd.url, output=None)
        handle = await launch(runtime, dockerd, "sleep", "30")
        try:
            records = {r.id: r for r in await runtime.containers(AGENT)}
            assert await runtime.containers(AgentId("someone-else")) == []
            labels = dockerd.run_cli("inspect", "--format", "{{json .Config.Labels}}", handle.ident)
        finally:
            await runtime.stop(handle, 0)
            await runtime.close()
        record = records[handle.ident]
        assert (record.agent_id, record.workload_id) == (AGENT, handle.details["name"])
        assert record.ledger_key == f"key-{record.workload_id}"
        assert record.alive
        assert record.handle().ident == handle.ident
        assert f'"io.accelkit.ledger-key":"key-{record.workload_id}"' in labels
        assert f'"io.accelkit.agent":"{AGENT}"' in labels

    run(scenario())


def test_stop_kills_a_process_that_ignores_sigterm_after_the_grace(dockerd: Engine) -> None:
    async def scenario() -> float:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            handle = await launch(
                runtime, dockerd, "sh", "-c", "trap '' TERM; while :; do sleep 1; done"
            )
            begun = time.monotonic()
            await runtime.stop(handle, 1)
            took = time.monotonic() - begun
            assert await runtime.is_alive(handle) is False
            assert handle.ident not in {r.id for r in await runtime.containers(AGENT)}
            await runtime.stop(handle, 1)  # idempotent
            return took
        finally:
            await runtime.close()

    assert 1.0 <= run(scenario()) < 10.0


def test_a_signal_reaches_the_containers_main_process(dockerd: Engine) -> None:
    async def scenario() -> int:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            handle = await launch(
                runtime, dockerd, "sh", "-c", "trap 'exit 7' USR1; while :; do sleep 0.1; done"
            )
            await asyncio.sleep(0.3)
            await runtime.signal(handle, signal.SIGUSR1)
            status = await runtime.wait(handle)
            await runtime.signal(handle, signal.SIGUSR1)  # no longer running: nothing happens
            await runtime.stop(handle, 0)
            await runtime.signal(handle, signal.SIGUSR1)  # gone: nothing happens
            return status
        finally:
            await runtime.close()

    assert run(scenario()) == 7


def test_an_oom_kill_is_137_and_reported(dockerd: Engine) -> None:
    config = WorkloadConfig(memory_limit=32 * 1024 * 1024)
    fill = "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived"

    async def scenario() -> tuple[int, bool, list[str], list[str]]:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            handle = await launch(runtime, dockerd, "sh", "-c", fill, config=config)
            ended = await runtime.wait_exit(handle)
            notes = await runtime.exit_notes(handle)
            calm = await launch(runtime, dockerd, "true")
            await runtime.wait(calm)
            calm_notes = await runtime.exit_notes(calm)
            for done in (handle, calm):
                await runtime.stop(done, 0)
            return ended.status, ended.oom_killed, notes, calm_notes
        finally:
            await runtime.close()

    status, oom_killed, notes, calm_notes = run(scenario())
    assert (status, oom_killed) == (137, True)
    assert len(notes) == 1
    assert "killed by the kernel's OOM killer: it reached its memory limit" in notes[0]
    assert calm_notes == []


def test_an_oom_kill_of_a_child_is_the_childs_not_the_containers(dockerd: Engine) -> None:
    """The command's child is killed at the limit and the command exits 0: the note says so."""
    config = WorkloadConfig(memory_limit=32 * 1024 * 1024)
    child = "sh -c 'x=$(head -c 200000000 /dev/zero | tr \\\\0 a)'; echo child ended; exit 0"

    async def scenario() -> tuple[int, list[str]]:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            handle = await launch(runtime, dockerd, "sh", "-c", child, config=config)
            ended = await runtime.wait_exit(handle)
            notes = await runtime.exit_notes(handle)
            await runtime.stop(handle, 0)
            return ended.status, notes
        finally:
            await runtime.close()

    status, notes = run(scenario())
    assert status == 0
    assert len(notes) == 1, notes
    assert notes[0].endswith("not its command, which exited with status 0")


def test_a_missing_image_is_a_clear_error_and_leaves_nothing(dockerd: Engine) -> None:
    async def scenario() -> None:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            with pytest.raises(
                RuntimeUnavailable,
                match=r"^image 'no/such:image' not found; load it with docker load/import$",
            ):
                await launch(runtime, dockerd, "true", image="no/such:image")
            assert await runtime.containers(AGENT) == []
        finally:
            await runtime.close()

    run(scenario())


def test_a_command_missing_from_the_image_is_a_workload_error(dockerd: Engine) -> None:
    async def scenario() -> None:
        runtime = DockerRuntime(dockerd.url, output=None)
        workload = await runtime.new_workload(AGENT)
        spec = LaunchSpec(AGENT, workload, ["no-such-command"], image=dockerd.image)
        handle = await runtime.create(spec)
        try:
            with pytest.raises(
                WorkloadError, match=r"starting container .* failed: .*no-such-command"
            ):
                await runtime.start(handle)
        finally:
            await runtime.discard(workload, handle)
            await runtime.discard(workload, handle)  # idempotent
            await runtime.close()

    run(scenario())


def test_a_fresh_runtime_tells_whether_a_container_lives(dockerd: Engine) -> None:
    """As reconciliation does after a restart: another process, through the handle alone."""
    first = DockerRuntime(dockerd.url, output=None)
    running = run(launch(first, dockerd, "sleep", "30"))
    created = run(
        first.create(
            LaunchSpec(AGENT, run(first.new_workload(AGENT)), ["true"], image=dockerd.image)
        )
    )
    recorded = [WorkloadHandle.from_json(h.to_json()) for h in (running, created)]

    async def after_restart() -> list[bool | None]:
        # another process, with another DOCKER_HOST: the handle names the engine
        again = DockerRuntime("unix:///nonexistent/docker.sock", output=None)
        try:
            seen = [await again.is_alive(h) for h in recorded]
            seen.append(await again.adopt(recorded[0]))
            for handle in recorded:
                await again.stop(handle, 0)
            seen += [await again.is_alive(h) for h in recorded]
            return seen
        finally:
            await again.close()

    # a created container whose start never came holds nothing: it is not alive
    assert run(after_restart()) == [True, False, True, False, False]


def test_discard_without_a_handle_removes_the_container_by_name(dockerd: Engine) -> None:
    async def scenario() -> None:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            workload = await runtime.new_workload(AGENT)
            await runtime.create(LaunchSpec(AGENT, workload, ["true"], image=dockerd.image))
            await runtime.discard(workload, None)
            assert await runtime.containers(AGENT) == []
        finally:
            await runtime.close()

    run(scenario())


def test_cdi_devices_become_device_entries_on_an_engine_without_cdi(
    dockerd: Engine, tmp_path: Path
) -> None:
    node = tmp_path / "accel0"
    os.mknod(node, 0o666 | 0o020000, os.makedev(DEVICE_MAJOR, 0))
    config = WorkloadConfig(
        mounts=[Mount(str(node), "/dev/accel0", MountType.DEVICE)],
        cdi_devices=["vendor.com/accel=0"],
    )
    status, captured = run(
        run_to_end(dockerd, "sh", "-c", "test -c /dev/accel0 && echo present", config=config)
    )
    assert (status, captured.out) == (0, "present\n")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("unix:///nonexistent/docker.sock", "No such file or directory"),
        ("tcp://127.0.0.1:9", "Connect call failed|Connection refused"),
    ],
)
def test_an_engine_that_does_not_run_is_a_clear_error(
    url: str, reason: str, tmp_path: Path
) -> None:
    async def scenario() -> None:
        runtime = DockerRuntime(url, output=None)
        handle = WorkloadHandle("docker", "0123456789ab", {"name": "accelkit-x"})
        workload = await runtime.new_workload(AGENT)
        spec = LaunchSpec(AGENT, workload, ["true"], image="busybox")
        try:
            pattern = f"^cannot reach the Docker engine at {url}: ({reason})"
            with pytest.raises(RuntimeUnavailable, match=pattern):
                await runtime.create(spec)
            for call in (runtime.start(handle), runtime.stop(handle, 1), runtime.containers()):
                with pytest.raises(RuntimeUnavailable, match=pattern):
                    await call
            assert await runtime.is_alive(handle) is None
            with pytest.raises(RuntimeUnavailable, match="to adopt accelkit-x"):
                await runtime.adopt(handle)
        finally:
            await runtime.close()

    run(scenario())


def test_a_socket_nobody_listens_on_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(path))  # the file stays, nobody accepts on it

    async def scenario() -> None:
        runtime = DockerRuntime(f"unix://{path}", output=None)
        try:
            with pytest.raises(RuntimeUnavailable, match="Connection refused"):
                await runtime.containers()
        finally:
            await runtime.close()

    run(scenario())


def test_the_engine_address_comes_from_docker_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/elsewhere.sock")
    assert DockerRuntime().url == "unix:///run/elsewhere.sock"
    assert DockerRuntime("tcp://127.0.0.1:2375").url == "tcp://127.0.0.1:2375"
    monkeypatch.delenv("DOCKER_HOST")
    assert DockerRuntime().url == "unix:///var/run/docker.sock"


def test_an_engine_error_is_never_an_aiohttp_traceback(dockerd: Engine) -> None:
    """The engine refusing a request (a name already taken) is a WorkloadError with its text."""

    async def scenario() -> None:
        runtime = DockerRuntime(dockerd.url, output=None)
        workload = await runtime.new_workload(AGENT)
        spec = LaunchSpec(AGENT, workload, ["true"], image=dockerd.image)
        handle = await runtime.create(spec)
        try:
            with pytest.raises(
                WorkloadError, match=r"creating container .* failed: .*already in use"
            ) as caught:
                await runtime.create(spec)
            assert not isinstance(caught.value, aiodocker.DockerError)
        finally:
            await runtime.discard(workload, handle)
            await runtime.close()

    run(scenario())


def test_an_engine_older_than_api_1_40_is_refused(tmp_path: Path) -> None:
    """An HTTP server on a unix socket answering like Docker 18.09 (API 1.39)."""

    async def version(_request: web.Request) -> web.Response:
        return web.json_response({"ApiVersion": "1.39", "Version": "18.09.9"})

    async def info(_request: web.Request) -> web.Response:
        return web.json_response({})

    async def scenario() -> None:
        app = web.Application()
        app.router.add_get("/version", version)
        app.router.add_get("/{api}/version", version)
        app.router.add_get("/{api}/info", info)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.UnixSite(runner, str(tmp_path / "old.sock")).start()
        runtime = DockerRuntime(f"unix://{tmp_path / 'old.sock'}", output=None)
        try:
            workload = await runtime.new_workload(AGENT)
            with pytest.raises(
                RuntimeUnavailable, match=r"speaks API 1\.39; accelkit needs 1\.40 or newer$"
            ):
                await runtime.create(LaunchSpec(AGENT, workload, ["true"], image="x"))
        finally:
            await runtime.close()
            await runner.cleanup()

    run(scenario())


def test_a_network_that_cannot_be_connected_leaves_no_container(dockerd: Engine) -> None:
    """Below API 1.44 the second network is connected after the create; its failure removes
    the container."""

    async def scenario() -> None:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            workload = await runtime.new_workload(AGENT)
            config = WorkloadConfig(networks=["none", "no-such-network"])
            spec = LaunchSpec(AGENT, workload, ["true"], config, image=dockerd.image)
            refusal = r"connecting container .* to its networks failed: .*no-such-network"
            with pytest.raises(WorkloadError, match=refusal):
                await runtime.create(spec)
            assert await runtime.containers(AGENT) == []
        finally:
            await runtime.close()

    run(scenario())


def test_a_missing_network_is_refused_at_start(dockerd: Engine) -> None:
    async def scenario() -> None:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            workload = await runtime.new_workload(AGENT)
            config = WorkloadConfig(networks=["no-such-network"])
            spec = LaunchSpec(AGENT, workload, ["true"], config, image=dockerd.image)
            handle = await runtime.create(spec)  # the engine looks for it only at start
            with pytest.raises(WorkloadError, match=r"starting container .*no-such-network"):
                await runtime.start(handle)
            await runtime.discard(workload, handle)
            assert await runtime.containers(AGENT) == []
        finally:
            await runtime.close()

    run(scenario())


def test_waiting_for_a_container_removed_behind_our_back_is_a_workload_error(
    dockerd: Engine,
) -> None:
    async def scenario() -> None:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            handle = await launch(runtime, dockerd, "true")
            dockerd.run_cli("rm", "--force", handle.ident)
            with pytest.raises(WorkloadError, match=r"is gone: it was removed while"):
                await runtime.wait(handle)
            assert await runtime.exit_notes(handle) == []
            await runtime.stop(handle, 0)  # nothing left to stop: no error
        finally:
            await runtime.close()

    run(scenario())


def test_a_signal_the_engine_refuses_is_a_workload_error(dockerd: Engine) -> None:
    async def scenario() -> None:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            handle = await launch(runtime, dockerd, "sleep", "30")
            with pytest.raises(WorkloadError, match=r"signalling container .* failed: .*999"):
                await runtime.signal(handle, 999)
            await runtime.stop(handle, 0)
        finally:
            await runtime.close()

    run(scenario())


def test_describe_names_the_container_image_and_engine() -> None:
    details = {"name": "accelkit-a-1", "engine": "unix:///x.sock", "image": "img:1"}
    handle = WorkloadHandle("docker", "0123456789abcdef", details)
    assert DockerRuntime("unix:///y.sock").describe(handle) == [
        "docker container accelkit-a-1 (0123456789ab) of img:1",
        "engine unix:///x.sock",
    ]
