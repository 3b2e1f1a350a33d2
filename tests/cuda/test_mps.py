"""Enforced GPU shares through CUDA MPS, with a fake ``nvidia-cuda-mps-control`` that records
what it is told and keeps a stand-in daemon (a sleeping process) per pipe directory."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.errors import WorkloadCreationDenied
from accelkit.metrics import MetricContext
from accelkit.partition import DevicePartition
from accelkit.runtime.render.cdi import render_cdi_spec
from accelkit.runtime.render.docker import render_docker_create
from accelkit.testing import node_metric_problems
from accelkit.types import Mount, Workload
from accelkit_cuda.mps import MPS

from . import fake_nvml as fk
from .support import run

FAKE = Path(__file__).parent / "fake_mps" / "nvidia-cuda-mps-control"
TREE = Workload.process_tree("pid:4242")
OTHER = Workload.process_tree("pid:4343")
BOX = Workload.container("box-1")
UUID0 = fk.FakeGpu(0).uuid


@pytest.fixture
def mps_env(tmp_path, monkeypatch):
    """The record file and the MPS directory; stand-in daemons left running are ended."""
    record = tmp_path / "mps-record"
    record.touch()
    # short, as the daemon's sockets need: <root>/<GPU UUID>/pipe/control... within 107 bytes
    root = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp"))
    monkeypatch.setenv("FAKE_MPS_RECORD", str(record))
    yield record, root
    for pidfile in root.glob("**/pipe/nvidia-cuda-mps-control.pid"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)


def told(record: Path) -> list[str]:
    """What the fake was told, first words only (``-d``, ``get_server_list``, ``quit``)."""
    return [line.split()[0] for line in record.read_text().splitlines()]


def shares_plugin(start, root: Path, **config: str):
    settings = {
        "allocation": "fractional",
        "mps-control": str(FAKE),
        "mps-directory": str(root),
        **config,
    }
    return start(fk.gpus(2), settings)


def hook(plugin, workload, shares: dict[str, str]):
    ids = [d.device_id for d in plugin.devices]
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of(*ids))
    alloc = {"cuda.shares": {d: Decimal(s) for d, s in shares.items()}}
    return ctx.create_lifecycle_hook(workload, alloc)


def test_a_share_of_one_gpu_is_enforced_through_its_mps_daemon(start, mps_env):
    record, root = mps_env
    plugin = shares_plugin(start, root)
    config = run(hook(plugin, TREE, {"cuda0": "0.25"}).pre_create())
    pipe = root / UUID0 / "pipe"
    assert config.env_vars["ACCELKIT_CUDA_SHARE_ENFORCEMENT"] == "enforced:mps"
    assert config.env_vars["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe)
    assert config.env_vars["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"  # 0.25 of 80 GiB
    assert config.env_vars["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert config.env_vars["CUDA_VISIBLE_DEVICES"] == UUID0
    assert config.resource_data["CUDA_SHARE_ENFORCEMENT"] == "enforced:mps"
    assert config.mounts == ()  # a process sees the host's directories
    # the daemon was started for that GPU alone, with its own pipe and log directories
    lines = record.read_text().splitlines()
    assert told(record) == ["get_server_list", "-d"]
    assert lines[1] == f"-d visible={UUID0} pipe={pipe} log={root / UUID0 / 'log'}"
    assert MPS(FAKE, root).running(UUID0)


def test_the_daemon_serves_every_share_workload_and_stops_after_the_last(start, mps_env):
    record, root = mps_env
    plugin = shares_plugin(start, root)
    first, second = hook(plugin, TREE, {"cuda0": "0.5"}), hook(plugin, OTHER, {"cuda0": "0.5"})
    run(first.pre_create())
    run(second.pre_create())
    assert told(record).count("-d") == 1
    assert MPS(FAKE, root).users(UUID0) == ["pid:4242", "pid:4343"]
    assert plugin_metric(plugin) == {"cuda0": Decimal(2), "cuda1": Decimal(0)}
    run(first.post_terminate())
    assert "quit" not in told(record)
    assert MPS(FAKE, root).running(UUID0)
    run(second.post_terminate())
    assert told(record)[-1] == "quit"
    assert not MPS(FAKE, root).running(UUID0)
    run(second.post_terminate())  # again: nothing left to do
    assert told(record).count("quit") == 1


def plugin_metric(plugin) -> dict[str, Decimal]:
    found = run(plugin.gather_node_metrics(MetricContext()))
    assert node_metric_problems(found, [d.device_id for d in plugin.devices]) == []
    (metric,) = [m for m in found if m.key == "mps_workloads"]
    return {d: m.value for d, m in metric.per_device.items()}


def test_a_running_daemon_is_adopted_after_a_restart(start, mps_env):
    record, root = mps_env
    run(hook(shares_plugin(start, root), TREE, {"cuda0": "0.5"}).pre_create())
    restarted = shares_plugin(start, root)  # another process, the same directory
    config = run(hook(restarted, OTHER, {"cuda0": "0.5"}).pre_create())
    assert config.env_vars["ACCELKIT_CUDA_SHARE_ENFORCEMENT"] == "enforced:mps"
    assert told(record).count("-d") == 1


def test_a_container_gets_the_pipe_directory_mounted_in_cdi_and_docker(start, mps_env):
    _record, root = mps_env
    plugin = shares_plugin(start, root)
    config = run(hook(plugin, BOX, {"cuda1": "0.5"}).pre_create())
    pipe = str(root / fk.FakeGpu(1).uuid / "pipe")
    assert Mount(pipe, pipe) in config.mounts
    body = render_docker_create(config)
    assert {"Type": "bind", "Source": pipe, "Target": pipe, "ReadOnly": False} in body[
        "HostConfig"
    ]["Mounts"]
    assert f"CUDA_MPS_PIPE_DIRECTORY={pipe}" in body["Env"]
    spec = render_cdi_spec("accelkit.io/cuda", [("box-1", config)])
    edits = spec["devices"][0]["containerEdits"]
    assert any(m["hostPath"] == pipe and m["containerPath"] == pipe for m in edits["mounts"])


def test_without_mps_shares_are_advisory(start, mps_env):
    record, root = mps_env
    plugin = shares_plugin(start, root, **{"mps-control": "no-such-mps-control"})
    assert plugin.mps is None
    config = run(hook(plugin, TREE, {"cuda0": "0.5"}).pre_create())
    assert config.env_vars["ACCELKIT_CUDA_SHARE_ENFORCEMENT"] == "advisory"
    assert "CUDA_MPS_PIPE_DIRECTORY" not in config.env_vars
    assert told(record) == []


def test_mps_turned_off_is_advisory(start, mps_env):
    _record, _root = mps_env
    plugin = start(fk.gpus(1), {"allocation": "fractional", "mps": False})
    assert plugin.mps is None
    config = run(hook(plugin, TREE, {"cuda0": "0.5"}).pre_create())
    assert config.env_vars["ACCELKIT_CUDA_SHARE_ENFORCEMENT"] == "advisory"


@pytest.mark.parametrize(
    ("config", "shares", "reason"),
    [
        ({"mps-control": "no-such-mps-control"}, {"cuda0": "0.5"}, "MPS is not available"),
        ({}, {"cuda0": "0.5", "cuda1": "0.5"}, "the shares are on 2 GPUs"),
    ],
)
def test_enforced_shares_refuse_what_cannot_be_enforced(start, mps_env, config, shares, reason):
    record, root = mps_env
    plugin = shares_plugin(start, root, shares="enforced", **config)
    with pytest.raises(WorkloadCreationDenied, match=reason):
        run(hook(plugin, TREE, shares).pre_create())
    assert "-d" not in told(record)


def test_shares_on_several_gpus_are_advisory(start, mps_env):
    record, root = mps_env
    plugin = shares_plugin(start, root)
    config = run(hook(plugin, TREE, {"cuda0": "0.5", "cuda1": "0.5"}).pre_create())
    assert config.env_vars["ACCELKIT_CUDA_SHARE_ENFORCEMENT"] == "advisory"
    run(hook(plugin, TREE, {"cuda0": "0.5", "cuda1": "0.5"}).post_terminate())
    assert told(record) == []


def test_a_daemon_that_does_not_start_is_said(start, mps_env, monkeypatch):
    _record, root = mps_env
    monkeypatch.setenv("FAKE_MPS_FAIL_START", "1")
    plugin = shares_plugin(start, root)
    config = run(hook(plugin, TREE, {"cuda0": "0.5"}).pre_create())
    assert config.env_vars["ACCELKIT_CUDA_SHARE_ENFORCEMENT"] == "advisory"
    enforced = shares_plugin(start, root, shares="enforced")
    with pytest.raises(WorkloadCreationDenied, match="already running"):
        run(hook(enforced, TREE, {"cuda0": "0.5"}).pre_create())


def test_a_daemon_that_fails_without_a_word_is_said_with_its_log(start, mps_env, monkeypatch):
    _record, root = mps_env
    monkeypatch.setenv("FAKE_MPS_FAIL_START", "silent")
    enforced = shares_plugin(start, root, shares="enforced")
    with pytest.raises(WorkloadCreationDenied, match=r"its log ends: .*socket path too long"):
        run(hook(enforced, TREE, {"cuda0": "0.5"}).pre_create())


def test_a_pipe_directory_too_long_for_a_socket_is_refused_before_the_daemon(start, mps_env):
    record, root = mps_env
    deep = root / ("d" * 80)
    enforced = shares_plugin(start, deep, shares="enforced")
    with pytest.raises(WorkloadCreationDenied, match=r"set mps-directory to a path of at most"):
        run(hook(enforced, TREE, {"cuda0": "0.5"}).pre_create())
    assert "-d" not in told(record), "no daemon asked to start"
    advisory = shares_plugin(start, deep)
    config = run(hook(advisory, TREE, {"cuda0": "0.5"}).pre_create())
    assert config.env_vars["ACCELKIT_CUDA_SHARE_ENFORCEMENT"] == "advisory"


def test_whole_gpus_touch_no_mps(start, mps_env):
    record, root = mps_env
    plugin = start(fk.gpus(1), {"mps-control": str(FAKE), "mps-directory": str(root)})
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda0"))
    config = run(ctx.create_lifecycle_hook(TREE, {"cuda.device": {"cuda0": 1}}).pre_create())
    assert "ACCELKIT_CUDA_SHARE_ENFORCEMENT" not in config.env_vars
    assert told(record) == []


def test_a_bad_share_setting_is_a_config_error():
    from accelkit.errors import ConfigError
    from accelkit_cuda.config import CUDAConfig

    with pytest.raises(ConfigError, match="unknown share enforcement 'strict'"):
        CUDAConfig.from_mapping({"shares": "strict"})


def test_devices_say_how_shares_are_held(start, mps_env):
    _record, root = mps_env
    enforced = shares_plugin(start, root)
    assert {d.extra["share_enforcement"] for d in enforced.devices} == {"enforced:mps"}
    missing = {"mps-control": "no-such-mps-control"}
    advisory = shares_plugin(start, root, **missing)
    assert {d.extra["share_enforcement"] for d in advisory.devices} == {"advisory"}
    refused = shares_plugin(start, root, shares="enforced", **missing)
    assert {d.extra["share_enforcement"] for d in refused.devices} == {"refused"}
    whole = start(fk.gpus(1))
    assert "share_enforcement" not in whole.devices[0].extra
