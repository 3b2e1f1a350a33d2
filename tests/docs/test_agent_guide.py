"""The agent-program guide shows a program that really runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from accelkit.testing.cli_runner import cli_env
from accelkit.workload import Ledger

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "docs" / "examples" / "agent_program.py"
GUIDE = ROOT / "docs" / "agent-guide.md"


def test_the_guide_shows_the_program_as_it_is():
    guide = GUIDE.read_text()
    start = guide.index('```python title="docs/examples/agent_program.py"\n') + len(
        '```python title="docs/examples/agent_program.py"\n'
    )
    end = guide.index("```", start)
    assert guide[start:end] == PROGRAM.read_text()


def test_the_program_books_runs_and_frees_on_the_demo_node(tmp_path):
    env = cli_env()
    env["ACCELKIT_STATE_DIR"] = str(tmp_path / "state")
    result = subprocess.run(
        [sys.executable, str(PROGRAM), str(ROOT / "docs" / "examples" / "demo.toml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    body = json.loads(lines["container body"])
    assert body == {"Env": ["MOCK_CUDA_DEVICES=cuda0", "MOCK_CPU_DEVICES=1,2"]}
    assert "'cuda.device': '1'" in lines["free while it runs"]
    assert "'cuda.device': '2'" in lines["free again"]
    assert Ledger(tmp_path / "state").read_all() == {}  # the record is gone again
