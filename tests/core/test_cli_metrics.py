"""``accelkit metrics``: table, JSON, Prometheus text and the live table."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from accelkit.cli import metrics_cmd
from accelkit.cli.app import main
from accelkit.config import load_host_config

from .metrics_support import write_node_config


@pytest.fixture
def config(tmp_path):
    return str(write_node_config(tmp_path))


def test_the_table_shows_node_device_and_agent_rows(config, capsys):
    assert main(["metrics", "--config", config]) == 0
    out = capsys.readouterr().out
    assert "Metrics" in out
    assert "device cuda3" in out
    assert "agent agent-2" in out


def test_the_table_is_plain_aligned_text_drawn_without_rich(config):
    """One header, the figures aligned right, and no drawing library imported for it."""
    code = (
        "import sys\n"
        "from accelkit.cli.app import main\n"
        f"code = main(['metrics', '--config', {config!r}])\n"
        "print('rich imported:', any(m.split('.')[0] == 'rich' for m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert lines[0] == "Metrics"
    header = lines[1]
    assert header.split() == ["PLUGIN", "METRIC", "SCOPE", "VALUE", "CAPACITY", "UNIT"]
    end = header.index("CAPACITY") + len("CAPACITY")
    node_row = next(line for line in lines if " node " in line and "percent" in line)
    assert node_row[end - 3 : end] == "100"  # the capacity ends under its header
    assert lines[-1] == "rich imported: False"


def test_json_has_node_agent_and_workload_sections(config, capsys):
    assert main(["metrics", "--config", config, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"node", "agents", "workloads", "errors"}
    assert set(data["agents"]) == {"agent-1", "agent-2"}
    memory = {m["key"]: m for m in data["agents"]["agent-1"]["mem"]}["memory_used"]
    assert memory["basis"] == "scaled"
    assert isinstance(memory["value"], str)


def test_prometheus_text_parses_and_every_name_is_prefixed(config, capsys):
    assert main(["metrics", "--config", config, "--prometheus"]) == 0
    found = list(text_string_to_metric_families(capsys.readouterr().out))
    assert found
    assert all(f.name.startswith("accelkit_") for f in found)
    agents = {s.labels["agent"] for f in found if "_agent_" in f.name for s in f.samples}
    assert agents == {"agent-1", "agent-2"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--json", "--prometheus"], "choose one of --json and --prometheus"),
        (["--watch", "1", "--json"], "--watch refreshes the table"),
        (["--watch", "1", "--prometheus"], "--watch refreshes the table"),
        (["--watch", "0"], "Invalid value for '--watch'"),
        (["--watch", "nan"], "expected a number of seconds such as 30 or 2.5, got 'nan'"),
        (["--watch", "inf"], "expected a number of seconds such as 30 or 2.5, got 'inf'"),
        (["--watch", "1e3"], "expected a number of seconds such as 30 or 2.5, got '1e3'"),
        (["--watch", "0"], "expected seconds above 0 and at most 86400, got '0'"),
    ],
)
def test_conflicting_options_are_usage_errors(config, capsys, args, message):
    assert main(["metrics", "--config", config, *args]) == 2
    assert message in capsys.readouterr().err


def test_a_config_error_is_reported_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[resource]\nallocation-mode = 'sideways'\n")
    assert main(["metrics", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "allocation-mode" in err
    assert "Traceback" not in err


def test_watch_refreshes_the_table(config, monkeypatch):
    pauses = []

    async def no_wait(seconds):
        pauses.append(seconds)

    monkeypatch.setattr(metrics_cmd, "pause", no_wait)
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    asyncio.run(metrics_cmd.watch_table(load_host_config(config), 0.5, console, refreshes=3))
    assert pauses == [0.5, 0.5]
    assert "agent agent-1" in screen.getvalue()


def test_watch_ends_quietly_on_ctrl_c(config, monkeypatch, capsys):
    async def interrupted(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(metrics_cmd, "pause", interrupted)
    assert main(["metrics", "--config", config, "--watch", "2"]) == 0
    captured = capsys.readouterr()
    assert "Metrics" in captured.out
    assert "error" not in captured.err


def test_watch_into_a_pipe_prints_each_refresh(config, monkeypatch):
    async def no_wait(seconds):
        pass

    monkeypatch.setattr(metrics_cmd, "pause", no_wait)
    piped = io.StringIO()
    console = Console(file=piped, force_terminal=False, width=120)  # as `| tee log` sees it
    asyncio.run(metrics_cmd.watch_table(load_host_config(config), 0.5, console, refreshes=3))
    assert piped.getvalue().count("agent agent-1") >= 3  # one table per refresh, as they come
