"""``accelkit serve`` as a real process: hot-plug through the mock TOML, a device a running
workload holds removed, SIGTERM leaving workloads to the next start, and every error path.

Each other step (``accelkit run``, ``status``) is a separate process, as an operator runs them.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit

from ..mock_device_edits import write_gpus

pytestmark = pytest.mark.slow  # real `accelkit serve` and `accelkit run` processes

WITHIN = 60.0  # a guard against hanging, not an assertion on time
INTERVAL = "0.2"
PRINT_GPUS = ("sh", "-c", "echo $MOCK_CUDA_DEVICES")
SERVE_ARGS = ("--listen", "127.0.0.1:0", "--rediscover-interval", INTERVAL)


class Node:
    """A mock node's files and the commands run on it."""

    def __init__(self, config: Path, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.devices = config.parent / "devices.toml"
        self.env = env or cli_env()

    def accelkit(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_accelkit(*args, config=self.config, env=self.env)

    def run_gpus(self, n: int) -> subprocess.CompletedProcess[str]:
        return self.accelkit(
            "run", "--agent", "agent-1", "--slots", f"cuda.device={n}", "--", *PRINT_GPUS
        )

    def status(self) -> list[dict[str, Any]]:
        result = self.accelkit("status", "--json")
        assert result.returncode == 0, result.stderr
        found: list[dict[str, Any]] = json.loads(result.stdout)
        return found

    def start_workload(self) -> subprocess.Popen[str]:
        """``accelkit run -- sleep 300`` on one GPU, returned once status shows it created."""
        return self.start_workload_of("agent-1", 1)

    def start_workload_of(self, agent: str, gpus: int) -> subprocess.Popen[str]:
        """``accelkit run -- sleep 300`` of ``agent`` on ``gpus`` GPUs, once status shows it."""
        slots = ("--slots", f"cuda.device={gpus}", "--", "sleep", "300")
        run = subprocess.Popen(
            [*ACCELKIT, "run", "--config", str(self.config), "--agent", agent, *slots],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        deadline = time.monotonic() + WITHIN
        while time.monotonic() < deadline:
            if any(w["phase"] == "post_create" for w in self.status()):
                return run
            time.sleep(0.1)
        run.kill()
        pytest.fail("the workload never showed up in 'accelkit status'")


class Serve:
    """An ``accelkit serve`` process; its log (stderr) goes to a file read while it runs."""

    def __init__(self, node: Node, *args: str) -> None:
        self.log = node.config.parent / f"serve-{time.monotonic_ns()}.log"
        self._out = self.log.open("w")
        self.process = subprocess.Popen(
            [*ACCELKIT, "serve", "--config", str(node.config), *SERVE_ARGS, *args],
            env=node.env,
            stdout=subprocess.DEVNULL,
            stderr=self._out,
            text=True,
        )

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, what: str) -> str:
        deadline = time.monotonic() + WITHIN
        while time.monotonic() < deadline:
            text = self.text()
            if what in text:
                return text
            if self.process.poll() is not None:
                pytest.fail(f"serve ended ({self.process.returncode}) before {what!r}: {text}")
            time.sleep(0.05)
        pytest.fail(f"serve never said {what!r}: {self.text()}")

    @property
    def url(self) -> str:
        line = self.wait_for("/metrics")
        return line.split("serving ", 1)[1].split(",", 1)[0]

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        code = self.process.wait(timeout=WITHIN)
        self._out.close()
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._out.close()


@pytest.fixture
def node(mock_node: Callable[..., Path]) -> Node:
    config = mock_node(cpus=1, gpus=2)
    write_gpus(config.parent / "devices.toml", ["cuda0", "cuda1"])
    return Node(config)


@pytest.fixture
def serving(node: Node) -> Iterator[Callable[..., Serve]]:
    started: list[Serve] = []

    def start(*args: str) -> Serve:
        serve = Serve(node, *args)
        started.append(serve)
        serve.wait_for("serving http://127.0.0.1:")
        return serve

    yield start
    for serve in started:
        serve.kill()


def test_a_device_added_while_serving_is_granted_within_an_interval(
    node: Node, serving: Callable[..., Serve]
) -> None:
    serve = serving()
    assert node.run_gpus(3).returncode == 125  # two GPUs so far
    write_gpus(node.devices, ["cuda0", "cuda1", "cuda2"])
    serve.wait_for("device cuda/cuda2 added: healthy")
    got = node.run_gpus(3)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "cuda0,cuda1,cuda2"
    with urllib.request.urlopen(serve.url, timeout=30) as answer:
        metrics = answer.read().decode()
    assert 'accelkit_device_health{device="cuda2",plugin="cuda",state="healthy"} 1.0' in metrics
    # the run that ended held each of the three GPUs, and keeps its seconds in the counter
    held = [
        line
        for line in metrics.splitlines()
        if line.startswith("accelkit_device_held_seconds_total{") and 'plugin="cuda"' in line
    ]
    assert sorted(line.split('device="')[1].split('"')[0] for line in held) == [
        "cuda0",
        "cuda1",
        "cuda2",
    ]
    assert all('entry="run"' in line and float(line.split()[-1]) > 0 for line in held)
    assert serve.stop() == 0
    assert "stopped; workloads keep running" in serve.text()


def test_a_removed_device_a_workload_holds_keeps_it_running(
    node: Node, serving: Callable[..., Serve]
) -> None:
    serve = serving()
    run = node.start_workload()
    try:
        [held] = node.status()
        assert held["devices"]["cuda"] == ["cuda0"]
        assert set(held["held_seconds"]["cuda"]) == {"cuda0"}  # seconds so far, per device
        write_gpus(node.devices, ["cuda1"])
        serve.wait_for("device cuda/cuda0 removed (vanished: no longer listed by its plugin)")
        serve.wait_for(f"workload {held['workload']!r} of agent 'agent-1' still holds it")
        assert run.poll() is None  # the workload keeps running
        [shown] = node.status()
        assert (shown["workload"], shown["phase"]) == (held["workload"], "post_create")
        got = node.run_gpus(1)  # nothing else breaks: the other GPU is granted
        assert (got.returncode, got.stdout.strip()) == (0, "cuda1"), got.stderr
        assert node.run_gpus(2).returncode == 125
    finally:
        run.kill()
        run.wait()
    assert serve.process.poll() is None
    assert "Traceback" not in serve.text()


@pytest.mark.parametrize(
    ("ended_by", "status", "next_ended_by"),
    [
        (signal.SIGTERM, 0, signal.SIGINT),
        (signal.SIGKILL, -signal.SIGKILL, signal.SIGTERM),  # killed: it cleans nothing up
    ],
    ids=["sigterm", "sigkill"],
)
def test_an_ended_serve_leaves_workloads_running_and_the_next_serve_adopts_them(
    node: Node,
    serving: Callable[..., Serve],
    ended_by: signal.Signals,
    status: int,
    next_ended_by: signal.Signals,
) -> None:
    serve = serving()
    run = node.start_workload()
    try:
        [held] = node.status()
        assert serve.stop(ended_by) == status
        assert run.poll() is None
        [still] = node.status()
        assert still["workload"] == held["workload"]
        again = serving()
        again.wait_for(f"adopted live workload {held['workload']!r} of agent 'agent-1'")
        assert again.stop(next_ended_by) == 0
        assert run.poll() is None
    finally:
        run.kill()
        run.wait()


@pytest.mark.parametrize("interval", ["0", "-1", "abc", "nan", "inf", "1e3", "\uff12"])
def test_a_bad_interval_is_refused(node: Node, interval: str) -> None:
    result = node.accelkit("serve", "--rediscover-interval", interval)
    assert result.returncode == 2
    assert "error: Invalid value for '--rediscover-interval'" in result.stderr
    assert "expected" in result.stderr
    assert "seconds" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_interval_in_the_config_is_refused(node: Node) -> None:
    node.config.write_text(node.config.read_text() + '[health]\nrediscover-interval = "0"\n')
    result = node.accelkit("serve", "--listen", "127.0.0.1:0")
    assert result.returncode == 2
    assert "rediscover-interval" in result.stderr
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("listen", "said"),
    [
        ("9464", "expected HOST:PORT"),
        ("127.0.0.1:http", "expected HOST:PORT"),
        ("127.0.0.1:70000", "expected HOST:PORT"),
        ("127.0.0.1:²", "expected HOST:PORT"),  # a digit to str.isdigit, not to int()
        ("0.0.0.0:9464", "is not the loopback interface"),
        ("example.org:9464", "is not the loopback interface"),
        ("[::]:9464", "is not the loopback interface"),
        ("[2001:db8::1]:9464", "is not the loopback interface"),
        ("::1:9464", "an IPv6 address goes in brackets"),
    ],
)
def test_a_bad_listen_address_is_refused(node: Node, listen: str, said: str) -> None:
    result = node.accelkit("serve", "--listen", listen)
    assert result.returncode == 2
    assert said in result.stderr
    assert "Traceback" not in result.stderr


def test_the_ipv6_loopback_is_served_where_asked(node: Node) -> None:
    if not socket.has_ipv6:
        pytest.skip("this Python has no IPv6")
    serve = Serve(node, "--listen", "[::1]:0")
    try:
        serve.wait_for("serving http://[::1]:")
        with urllib.request.urlopen(serve.url, timeout=30) as answer:
            assert b"accelkit_device_health" in answer.read()
        assert serve.stop() == 0
    finally:
        serve.kill()


def test_a_port_in_use_is_refused(node: Node) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = node.accelkit("serve", "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot serve metrics on 127.0.0.1:{port}: ")
    assert "address already in use" in result.stderr.lower()
    assert "Traceback" not in result.stderr


def test_a_plugin_hanging_in_list_devices_during_rediscovery(
    mock_node: Callable[..., Path], hanging_site: Path
) -> None:
    config = mock_node(cpus=1, gpus=2)
    text = config.read_text().replace('allowed = ["mock"]', 'allowed = ["mock", "hanging"]')
    config.write_text(text.replace("[plugins]\n", "[plugins]\ncall-timeout = 1\n"))
    write_gpus(config.parent / "devices.toml", ["cuda0", "cuda1"])
    env = cli_env()
    env |= {"PYTHONPATH": str(hanging_site), "HANGING_PLUGIN_IN": "rediscovery"}
    node = Node(config, env)
    serve = Serve(node)
    try:
        serve.wait_for("plugin 'hang' rediscovery failed: PluginTimeout: plugin 'hang' timed out")
        write_gpus(node.devices, ["cuda0", "cuda1", "cuda2"])  # the other plugins go on
        serve.wait_for("device cuda/cuda2 added: healthy")
        assert serve.process.poll() is None
        assert serve.stop() == 0
    finally:
        serve.kill()
    assert "Traceback" not in serve.text()


def test_a_damaged_cordon_file_while_serving_is_said_and_retried(
    node: Node, serving: Callable[..., Serve]
) -> None:
    serve = serving()
    cordons = node.config.parent / "state" / "cordons.json"
    cordons.write_text("{damaged")
    said = serve.wait_for("cordons.json': cannot parse it")
    assert "(retried in the next round)" in said
    time.sleep(1)  # several rounds
    assert serve.text().count("cannot parse it") == 1  # said once, not every round
    assert serve.process.poll() is None  # the service goes on
    cordons.unlink()
    serve.wait_for("the state directory reads again")
    write_gpus(node.devices, ["cuda0", "cuda1", "cuda2"])
    serve.wait_for("device cuda/cuda2 added: healthy")
    assert serve.stop() == 0
    assert "Traceback" not in serve.text()
