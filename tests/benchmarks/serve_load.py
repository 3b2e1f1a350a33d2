"""Load on ``accelkit serve-metrics``: concurrent scrapes, idle connections, the fd limit.

Starts ``accelkit serve-metrics --port 0`` as a real process on 127.0.0.1 and measures, in one
run, against a floor taken in the same run (one scrape at a time on the idle server):

- ``concurrent``: N scrapes opened at once (connection resets and other failures, p50/p95);
- ``idle``: M connections opened and left silent, scrapes made while they are held (answered,
  p50/p95), then how many of the silent connections the server dropped after ``--idle-wait`` s;
- ``fdlimit``: the server started with a small ``RLIMIT_NOFILE``, more connections held than
  it may open, and the CPU time the server burns meanwhile (a server that spins shows ~100 %);
- ``hung`` (with ``--hanging-site DIR --hang-config FILE``): the hanging fixture plugin
  installed in DIR hangs in its metrics; concurrent scrapes that send Prometheus' timeout
  header (10 s) and how they are answered.

Every loop is bounded (a count and a deadline). Run from the repository root::

    .venv/bin/python tests/benchmarks/serve_load.py --config docs/examples/demo.toml

``--pythonpath DIR`` puts DIR first on the server's ``PYTHONPATH`` (another checkout's
``core/src``, to measure an older server beside this one). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

HOST = "127.0.0.1"
DEADLINE = 120.0  # no scenario waits longer than this for its answers


@contextmanager
def server(
    config: Path, pythonpath: str | None, nofile: int | None, extra: dict[str, str] | None = None
) -> Iterator[tuple[int, int]]:
    """``accelkit serve-metrics`` on a free port: yields (pid, port), stops it afterwards."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_")}
    extra = dict(extra or {})
    paths = [pythonpath, extra.pop("PYTHONPATH", None), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env |= extra
    limit: Callable[[], None] | None = None
    if nofile is not None:

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    command = [sys.executable, "-c", "from accelkit.cli.app import run; run()"]
    process = subprocess.Popen(
        [*command, "serve-metrics", "--port", "0", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=limit,  # noqa: PLW1509 - only setrlimit, before exec
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if found is None:
            msg = f"the server did not start: {line}{process.stderr.read(2000)}"
            raise SystemExit(msg)
        yield process.pid, int(found.group(1))
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def scrape(port: int, timeout: float, header: str = "") -> tuple[str, float]:
    """One ``GET /metrics``: (outcome, seconds); outcome ``200``, ``reset``, ``timeout``, ..."""
    start = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(HOST, port)
            request = (
                f"GET /metrics HTTP/1.1\r\nHost: {HOST}:{port}\r\n{header}Connection: close\r\n\r\n"
            )
            writer.write(request.encode())
            await writer.drain()
            data = await reader.read()
            writer.close()
    except ConnectionResetError:
        return "reset", time.perf_counter() - start
    except TimeoutError:
        return "timeout", time.perf_counter() - start
    except OSError as exc:
        return type(exc).__name__, time.perf_counter() - start
    elapsed = time.perf_counter() - start
    status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "no answer"
    if status == "200" and not data.rstrip().endswith(b"\n") and b"\r\n\r\n" not in data:
        status = "truncated"
    return status, elapsed


def summary(results: list[tuple[str, float]], floor: float) -> dict[str, Any]:
    outcomes: dict[str, int] = {}
    for outcome, _ in results:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    ok = sorted(t for outcome, t in results if outcome == "200")
    answer: dict[str, Any] = {"scrapes": len(results), "outcomes": outcomes}
    if ok:
        p50 = statistics.median(ok)
        p95 = ok[min(len(ok) - 1, int(len(ok) * 0.95))]
        answer |= {
            "p50_ms": round(p50 * 1000, 1),
            "p95_ms": round(p95 * 1000, 1),
            "max_ms": round(ok[-1] * 1000, 1),
            "p50_floors": round(p50 / floor, 1),
            "p95_floors": round(p95 / floor, 1),
        }
    return answer


async def floor_of(port: int, count: int = 100, warm_up: int = 20) -> float:
    """The median of ``count`` scrapes made one at a time on the otherwise idle server."""
    for _ in range(warm_up):  # the first gathers open files and fill caches
        await scrape(port, 30)
    times = [(await scrape(port, 30))[1] for _ in range(count)]
    return statistics.median(times)


async def concurrent(port: int, count: int, floor: float) -> dict[str, Any]:
    results = await asyncio.gather(*(scrape(port, DEADLINE) for _ in range(count)))
    return summary(list(results), floor)


Held = list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]


async def hold(port: int, count: int) -> Held:
    """``count`` connections opened and left silent (writers kept: dropping one closes it)."""
    held: Held = []
    for _ in range(count):
        try:
            pair = await asyncio.wait_for(asyncio.open_connection(HOST, port), 10)
        except (OSError, TimeoutError):
            break
        held.append(pair)
    return held


async def closed_by_server(held: Held) -> int:
    """How many held connections the server has closed (EOF or reset already there)."""
    count = 0
    for reader, _writer in held:
        try:
            data = await asyncio.wait_for(reader.read(1), 0.01)
        except TimeoutError:
            continue
        except OSError:
            count += 1
            continue
        count += data == b""
    return count


async def idle(port: int, count: int, scrapes: int, wait: float, floor: float) -> dict[str, Any]:
    held = await hold(port, count)
    results = []
    for _ in range(scrapes):  # one after the other, as a scraper does, while the idle ones stay
        results.append(await scrape(port, 30))
    answer = {"idle_opened": len(held), **summary(results, floor)}
    await asyncio.sleep(wait)
    answer[f"idle_closed_after_{wait:g}s"] = await closed_by_server(held)
    return answer


async def fd_limit(pid: int, port: int, count: int, seconds: float) -> dict[str, Any]:
    """Hold more connections than the server may open; its CPU share meanwhile."""
    held = await hold(port, count)
    process = psutil.Process(pid)
    before = process.cpu_times()
    await asyncio.sleep(seconds)
    after = process.cpu_times()
    busy = (after.user - before.user) + (after.system - before.system)
    return {"held": len(held), "server_cpu_percent": round(100 * busy / seconds, 1)}


async def hung(port: int, count: int, floor: float) -> dict[str, Any]:
    header = "X-Prometheus-Scrape-Timeout-Seconds: 10\r\n"
    results = await asyncio.gather(*(scrape(port, DEADLINE, header) for _ in range(count)))
    times = sorted(t for _, t in results)
    answer = summary(list(results), floor)
    answer["p95_any_outcome_ms"] = round(times[int(len(times) * 0.95) - 1] * 1000, 1)
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--pythonpath", default=None)
    parser.add_argument("--concurrent", type=int, default=500)
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--idle-scrapes", type=int, default=50)
    parser.add_argument("--idle-wait", type=float, default=12.0)
    parser.add_argument("--nofile", type=int, default=64)
    parser.add_argument("--fd-seconds", type=float, default=5.0)
    parser.add_argument("--hanging-site", default=None)
    parser.add_argument("--hang-config", type=Path, default=None)
    parser.add_argument("--hung-scrapes", type=int, default=20)
    args = parser.parse_args()
    report: dict[str, Any] = {"pythonpath": args.pythonpath or "(installed)"}
    with server(args.config, args.pythonpath, None) as (_pid, port):
        floor = asyncio.run(floor_of(port))
        report["floor_ms"] = round(floor * 1000, 2)
        report["concurrent"] = asyncio.run(concurrent(port, args.concurrent, floor))
    with server(args.config, args.pythonpath, None) as (_pid, port):
        report["idle"] = asyncio.run(
            idle(port, args.idle, args.idle_scrapes, args.idle_wait, floor)
        )
    with server(args.config, args.pythonpath, args.nofile) as (pid, port):
        report["fdlimit"] = {
            "nofile": args.nofile,
            **asyncio.run(fd_limit(pid, port, args.nofile * 2, args.fd_seconds)),
        }
    if args.hanging_site and args.hang_config:
        extra = {"PYTHONPATH": args.hanging_site, "HANGING_PLUGIN_IN": "metrics"}
        with server(args.hang_config, args.pythonpath, None, extra) as (_pid, port):
            report["hung"] = asyncio.run(hung(port, args.hung_scrapes, floor))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
