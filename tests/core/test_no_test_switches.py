"""Shipped code holds no test-only switch: test behaviour lives in tests/ (fixture plugins,
the pausing launcher), never behind an environment variable of the installed command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from accelkit.testing.cli_runner import cli_env

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [ROOT / "core" / "src", *sorted((ROOT / "plugins").glob("*/src"))]
SWITCH = re.compile(r"ACCELKIT_TEST\w*|PAUSE_AT")


def test_no_shipped_module_reads_a_test_switch():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for top in SHIPPED
        for path in sorted(top.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if SWITCH.search(line)
    ]
    assert len(SHIPPED) >= 5  # core and the four plugins
    assert found == []


def test_the_old_pause_variable_no_longer_stops_the_command(mock_node):
    config = mock_node(cpus=1)
    env = cli_env()
    env["ACCELKIT_TEST_PAUSE_AT"] = "booked"
    argv = [sys.executable, "-c", "from accelkit.cli.app import run; run()", "run"]
    argv += ["--config", str(config), "--agent", "agent-1", "--slots", "cpu=1", "--", "true"]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "paused" not in result.stderr
