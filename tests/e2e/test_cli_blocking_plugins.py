"""Plugins that block instead of awaiting, leave threads behind or answer nonsense, installed
for real: every command still answers within the call timeout, and names the plugin.

The hanging fixture distribution (``tests/fixtures/hanging-plugin``) is installed into a
directory of its own and put on ``PYTHONPATH``; with ``HANGING_PLUGIN_BLOCKS=1`` its coroutines
block their thread with ``time.sleep`` for an hour where ``HANGING_PLUGIN_IN`` says. No test
waits for that hour: each bound below is far under it and far over the limits configured.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from accelkit.testing.cli_runner import ACCELKIT, run_accelkit

from .node_configs import beside_mock

LIMIT = 2  # call-timeout and hook-timeout of the node, in seconds
WITHIN = 60.0  # generous: the hang is an hour, the limit 2 s

pytestmark = pytest.mark.slow


def node_config(directory: Path, *, hook_timeout: int = LIMIT) -> str:
    """Mock devices (cpu, mem, cuda) plus the hanging plugin, each call limited to 2 s."""
    limits = f"call-timeout = {LIMIT}\nhook-timeout = {hook_timeout}\n"
    return str(beside_mock(directory, "hanging", settings=limits))


def environment(site: Path, **misdeeds: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKIT_", "HANGING_"))}
    return env | {"PYTHONPATH": str(site)} | {f"HANGING_PLUGIN_{k}": v for k, v in misdeeds.items()}


def accelkit(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    result = run_accelkit(*args, env=env, timeout=300)
    return result, time.monotonic() - began


@pytest.mark.parametrize(
    "command",
    [
        ("devices", "--json"),
        ("plugins", "--json"),
        ("status",),
        ("plan",),
        ("metrics", "--json"),
        ("run", "--slots", "cuda.device=1", "--", "true"),
    ],
    ids=lambda c: c[0],
)
def test_a_blocking_async_init_fails_the_plugin_and_every_command_answers(
    hanging_site, tmp_path, command
):
    env = environment(hanging_site, IN="init", BLOCKS="1")
    result, took = accelkit(env, command[0], "--config", node_config(tmp_path), *command[1:])
    assert result.returncode == 0, result.stderr
    assert took < WITHIN
    assert "Traceback" not in result.stderr
    if command[0] == "plugins":
        records = {r["name"]: r for r in json.loads(result.stdout)}
        assert records["hanging"]["status"] == "failed"
        assert records["hanging"]["error"] == "plugin 'hanging' timed out after 2 s in init"
        assert records["mock"]["status"] == "loaded"
    elif command[0] in ("devices", "plan"):  # where these commands name failed plugins
        said = result.stdout + result.stderr
        assert "plugin 'hanging' timed out after 2 s in init" in said
    if command[0] == "devices":
        assert set(json.loads(result.stdout)) == {"cpu", "mem", "cuda"}


def test_a_gpu_only_run_never_calls_a_blocking_pre_create_of_another_plugin(hanging_site, tmp_path):
    env = environment(hanging_site, IN="pre_create", BLOCKS="1")
    config = node_config(tmp_path)
    result, took = accelkit(
        env, "run", "--config", config, "--slots", "cuda.device=1", "--", "true"
    )
    assert result.returncode == 0, result.stderr
    assert took < WITHIN
    assert "hang" not in result.stderr  # its hook was not asked about anything


def test_a_run_of_the_blocking_plugin_fails_at_the_hook_timeout_and_frees_its_device(
    hanging_site, tmp_path
):
    env = environment(hanging_site, IN="pre_create", BLOCKS="1")
    config = node_config(tmp_path)
    result, took = accelkit(
        env, "run", "--config", config, "--slots", "hang.device=1", "--", "true"
    )
    assert result.returncode == 125, result.stderr
    assert took < WITHIN
    assert "error: plugin 'hang' timed out after 2 s in pre_create" in result.stderr
    # a later command finds the plugin working again and finishes the teardown
    later, _ = accelkit(environment(hanging_site), "status", "--config", config, "--json")
    assert later.returncode == 0, later.stderr
    assert json.loads(later.stdout) == []


def test_sigterm_ends_a_run_whose_plugin_blocks_in_pre_create(hanging_site, tmp_path):
    mark = tmp_path / "hanging"
    env = environment(hanging_site, IN="pre_create", BLOCKS="1", MARK=str(mark))
    config = node_config(tmp_path, hook_timeout=3600)  # the limit is no way out here
    run = subprocess.Popen(
        [*ACCELKIT, "run", "--config", config, "--slots", "hang.device=1", "--", "true"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + WITHIN
        while not mark.exists():
            assert run.poll() is None, run.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=WITHIN)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 128 + signal.SIGTERM, stderr


def test_a_thread_a_plugin_leaves_running_does_not_keep_run_alive(hanging_site, tmp_path):
    env = environment(hanging_site, THREAD="1")
    config = node_config(tmp_path)
    argv = ["--config", config, "--slots", "cuda.device=1", "--", "sh", "-c", "echo ran; exit 3"]
    result, took = accelkit(env, "run", *argv)
    assert result.returncode == 3, result.stderr
    assert result.stdout == "ran\n"  # flushed before the process ended
    assert took < WITHIN


def test_metrics_that_are_a_string_are_the_plugins_scrape_error(hanging_site, tmp_path):
    env = environment(hanging_site, METRICS="string")
    config = node_config(tmp_path)
    result, _ = accelkit(env, "metrics", "--config", config, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"cpu", "mem", "cuda"} <= set(data["node"])
    assert "hang" not in data["node"]
    said = "gather_node_metrics returned str, not a sequence of NodeMetric"
    assert data["errors"] == {"hang": f"PluginContractError: {said}"}
    table, _ = accelkit(env | {"COLUMNS": "300"}, "metrics", "--config", config)
    assert table.returncode == 0, table.stderr
    assert re.search(r"hang .*error.* gather_node_metrics returned str", table.stdout)
    text, _ = accelkit(env, "metrics", "--config", config, "--prometheus")
    assert text.returncode == 0, text.stderr
    assert scrape_errors(text.stdout) == {"cpu": 0, "mem": 0, "cuda": 0, "hang": 1}


def scrape_errors(text: str) -> dict[str, float]:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "accelkit_cuda_device_memory_used_bytes" in families
    return {s.labels["plugin"]: s.value for s in families["accelkit_plugin_scrape_error"].samples}


def test_serve_metrics_names_a_plugin_whose_metrics_are_a_string(hanging_site, tmp_path):
    env = environment(hanging_site, METRICS="string")
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        server = subprocess.Popen(
            [*ACCELKIT, "serve-metrics", "--port", "0", "--config", node_config(tmp_path)],
            stderr=stderr,
            env=env,
        )
    try:
        deadline = time.monotonic() + WITHIN
        while (found := re.search(r"127\.0\.0\.1:(\d+)/", log.read_text())) is None:
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        url = f"http://127.0.0.1:{found.group(1)}/metrics"
        with urllib.request.urlopen(url, timeout=WITHIN) as response:
            status, text = response.status, response.read().decode()
    finally:
        server.terminate()
        server.wait(WITHIN)
    assert status == 200
    assert scrape_errors(text) == {"cpu": 0, "mem": 0, "cuda": 0, "hang": 1}
