"""``accelkit serve-metrics``: a real HTTP scrape of /metrics on the loopback interface."""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from accelkit.cli import serve_metrics_cmd
from accelkit.cli.app import main
from accelkit.config import load_host_config
from accelkit.metrics_export import LOOPBACK, MetricsServer, MetricsServerError
from accelkit.metrics_export.service import serve_metrics

from .metrics_support import write_node_config

WAIT = 60  # generous upper bounds so a slow machine never fails; nothing is timed


async def nothing(budget: object, accept: object) -> tuple[bytes, str]:
    return b"", "text/plain"


@pytest.fixture
def served(tmp_path):
    """``serve_metrics`` running in its own thread on an ephemeral port; stopped afterwards."""
    config = load_host_config(write_node_config(tmp_path))
    ready: queue.Queue[tuple[MetricsServer, asyncio.AbstractEventLoop]] = queue.Queue()
    stop: list[asyncio.Event] = []
    failures: list[BaseException] = []

    async def run() -> None:
        stop.append(asyncio.Event())
        await serve_metrics(
            config, 0, on_ready=lambda s: ready.put((s, asyncio.get_running_loop())), stop=stop[0]
        )

    def thread_main() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:  # reported by the test instead of lost in the thread
            failures.append(exc)
            ready.put((None, None))

    thread = threading.Thread(target=thread_main, daemon=True)
    thread.start()
    server, loop = ready.get(timeout=WAIT)
    assert not failures, failures
    yield server
    loop.call_soon_threadsafe(stop[0].set)
    thread.join(timeout=WAIT)
    assert not thread.is_alive()
    assert not failures, failures


def scrape(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=WAIT) as response:
        return response.status, response.read().decode()


def test_a_scrape_of_the_real_endpoint_parses_with_prometheus_client(served):
    assert served.url == f"http://127.0.0.1:{served.port}/metrics"
    status, text = scrape(served.url)
    assert status == 200
    found = {f.name: f for f in text_string_to_metric_families(text)}
    assert "accelkit_cuda_device_memory_used_bytes" in found
    labels = [s.labels for s in found["accelkit_cuda_device_memory_used_bytes"].samples]
    assert {"plugin": "cuda", "device": "cuda0", "UUID": "MOCK-cuda-cuda0"} in [
        {k: v for k, v in series.items() if k in ("plugin", "device", "UUID")} for series in labels
    ]
    agent = found["accelkit_mem_agent_memory_used_bytes"].samples
    assert {s.labels["agent"] for s in agent} == {"agent-1", "agent-2"}
    second = {f.name for f in text_string_to_metric_families(scrape(served.url)[1])}
    assert second == set(found)


def test_only_metrics_is_served_and_only_on_loopback(served):
    with pytest.raises(urllib.error.HTTPError) as error:
        scrape(f"http://127.0.0.1:{served.port}/")
    assert error.value.code == 404
    assert [address[0] for address in served._runner.addresses] == [LOOPBACK]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_metrics_is_read_only(served, method):
    request = urllib.request.Request(f"{served.url}", data=b"x", method=method)
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=10)
    assert error.value.code == 405
    assert error.value.headers["Allow"] == "GET, HEAD"


def test_a_port_in_use_is_a_plain_error(capsys, tmp_path):
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsServerError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            asyncio.run(MetricsServer(nothing, port).start())
        config = str(write_node_config(tmp_path))
        assert main(["serve-metrics", "--port", str(port), "--config", config]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot serve metrics on 127.0.0.1:{port}")


@pytest.mark.parametrize(
    ("args", "message"),
    [([], "Missing option '--port'"), (["--port", "70000"], "Invalid value for '--port'")],
)
def test_the_port_is_required_and_checked(capsys, args, message):
    assert main(["serve-metrics", *args]) == 2
    assert message in capsys.readouterr().err


def test_ctrl_c_stops_serving_quietly(monkeypatch, capsys, tmp_path):
    async def interrupted(config, port, *, on_ready, on_host):
        raise KeyboardInterrupt

    monkeypatch.setattr(serve_metrics_cmd, "serve", interrupted)
    assert main(["serve-metrics", "--port", "0", "--config", str(write_node_config(tmp_path))]) == 0
    assert capsys.readouterr().err == "stopped\n"


def test_the_command_announces_where_it_serves(capsys, tmp_path):
    class Fake:
        url = "http://127.0.0.1:9999/metrics"

    serve_metrics_cmd._announce(Fake())  # type: ignore[arg-type]
    assert capsys.readouterr().err == "serving http://127.0.0.1:9999/metrics (Ctrl-C stops)\n"
