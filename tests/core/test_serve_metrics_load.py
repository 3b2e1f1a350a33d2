"""The metrics server under load: backlog, silent connections, the descriptor limit.

Real sockets on 127.0.0.1 against :class:`MetricsServer` on an event loop of its own thread;
nothing is timed beyond generous bounds that a server with the old behaviour would miss by far.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import psutil
import pytest

from accelkit.metrics_export.server import BACKLOG, IDLE_TIMEOUT, LOOPBACK, MetricsServer
from accelkit.testing.cli_runner import ACCELKIT, cli_env

from .metrics_support import write_node_config

WAIT = 60.0


class Served:
    def __init__(self, server: MetricsServer, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop
        self.budgets: list[Decimal | None] = []

    def block_loop(self, seconds: float) -> None:
        """Keep the server's event loop busy for ``seconds`` (returns once it is)."""
        busy = threading.Event()

        def block() -> None:
            busy.set()
            time.sleep(seconds)

        self.loop.call_soon_threadsafe(block)
        assert busy.wait(WAIT)


@contextlib.contextmanager
def serving(idle_timeout: float = IDLE_TIMEOUT) -> Iterator[Served]:
    ready: list[Served] = []
    started = threading.Event()
    stop: list[asyncio.Event] = []

    async def render(budget: Decimal | None, accept: str | None) -> tuple[bytes, str]:
        ready[0].budgets.append(budget)
        return b"# TYPE up gauge\nup 1\n", "text/plain; version=0.0.4; charset=utf-8"

    async def run() -> None:
        stop.append(asyncio.Event())
        async with MetricsServer(render, 0, idle_timeout=idle_timeout) as server:
            ready.append(Served(server, asyncio.get_running_loop()))
            started.set()
            await stop[0].wait()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert started.wait(WAIT)
    try:
        yield ready[0]
    finally:
        ready[0].loop.call_soon_threadsafe(stop[0].set)
        thread.join(WAIT)
        assert not thread.is_alive()


def scrape(port: int, headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(f"http://{LOOPBACK}:{port}/metrics", headers=headers or {})
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        assert response.status == 200
        return bytes(response.read())


def closed_within(connection: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``connection`` (EOF or reset) within ``seconds``."""
    connection.settimeout(seconds)
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_connections_queue_while_the_server_is_busy():
    """A backlog of 5 drops the 7th connection attempt while the loop is busy; ours queues."""
    assert BACKLOG >= 128
    with serving() as served:
        served.block_loop(2.0)
        held = []
        try:
            for _ in range(200):  # each connect completes in the kernel's accept queue
                held.append(socket.create_connection((LOOPBACK, served.server.port), timeout=1))
        finally:
            for connection in held:
                connection.close()
        assert len(held) == 200
        assert scrape(served.server.port).startswith(b"# TYPE up gauge")


def test_a_silent_connection_is_dropped_after_the_idle_timeout():
    with serving(idle_timeout=0.5) as served:
        port = served.server.port
        with socket.create_connection((LOOPBACK, port)) as silent:
            assert closed_within(silent, WAIT)
        with socket.create_connection((LOOPBACK, port)) as slow:  # half a request, then nothing
            slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            assert closed_within(slow, WAIT)
        with socket.create_connection((LOOPBACK, port)) as kept:  # answered, then kept alive
            kept.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            kept.settimeout(WAIT)
            assert kept.recv(65536).startswith(b"HTTP/1.1 200")
            assert closed_within(kept, WAIT)


@contextlib.contextmanager
def command(
    tmp_path: Path, nofile: int | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    """``accelkit serve-metrics --port 0`` as a real process: (process, port, its stderr file)."""
    config = write_node_config(tmp_path)
    env = cli_env()

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    log = tmp_path / "stderr"
    with log.open("w") as stderr:  # a file, not a pipe: nobody reads it while the test runs
        process = subprocess.Popen(
            [*ACCELKIT, "serve-metrics", "--port", "0", "--config", str(config)],
            stderr=stderr,
            env=env,
            preexec_fn=limit,  # noqa: PLW1509 - only setrlimit, before exec
        )
    try:
        yield process, announced_port(log), log
    finally:
        process.terminate()
        process.wait(WAIT)


@pytest.mark.slow
def test_the_command_drops_a_silent_connection_after_ten_seconds(tmp_path: Path):
    assert IDLE_TIMEOUT == 10.0
    with command(tmp_path) as (_process, port, _log):
        with socket.create_connection((LOOPBACK, port)) as silent:
            opened = time.monotonic()
            assert not closed_within(silent, 8.0)
            assert closed_within(silent, WAIT)
            assert 9.0 < time.monotonic() - opened < 20.0
        assert scrape(port).startswith(b"# HELP")


def test_scrapes_are_answered_while_two_hundred_connections_stay_silent():
    with serving() as served:
        port = served.server.port
        silent = [socket.create_connection((LOOPBACK, port)) for _ in range(200)]
        try:
            for _ in range(20):
                assert scrape(port).startswith(b"# TYPE up gauge")
            assert not closed_within(silent[0], 0.1)  # still held: the timeout has not passed
        finally:
            for connection in silent:
                connection.close()


def test_the_prometheus_timeout_header_sets_the_scrape_budget():
    with serving() as served:
        scrape(served.server.port, {"X-Prometheus-Scrape-Timeout-Seconds": "4"})
        scrape(served.server.port)
    assert served.budgets == [Decimal("3.5"), None]


def test_the_answer_is_gzipped_when_the_scraper_accepts_it():
    import gzip

    with serving() as served:
        url = f"http://{LOOPBACK}:{served.server.port}/metrics"
        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            assert response.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(response.read()).startswith(b"# TYPE up gauge")


# -- the real command at its descriptor limit --------------------------------------------------


def announced_port(log: Path) -> int:
    deadline = time.monotonic() + WAIT
    while (found := re.search(r"127\.0\.0\.1:(\d+)/", log.read_text())) is None:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return int(found.group(1))


@pytest.mark.slow
def test_at_the_descriptor_limit_the_server_waits_instead_of_spinning(tmp_path: Path):
    held: list[socket.socket] = []
    with command(tmp_path, nofile=64) as (process, port, log):
        try:
            held = [socket.create_connection((LOOPBACK, port), timeout=WAIT) for _ in range(128)]
            server = psutil.Process(process.pid)
            before = server.cpu_times()
            time.sleep(3)
            after = server.cpu_times()
            busy = after.user - before.user + after.system - before.system
            assert busy < 1.5  # a server retrying accept() in a loop burns ~3 s of CPU here
            assert "Traceback" not in log.read_text()
            for connection in held:
                connection.close()
            held = []
            deadline = time.monotonic() + WAIT  # accepting resumes once descriptors are free
            while True:
                try:
                    scrape(port)
                    break
                except OSError:
                    assert time.monotonic() < deadline
                    time.sleep(0.5)
        finally:
            for connection in held:
                connection.close()
