"""`accelkit cdi`: the CDI spec of an agent's devices, valid against the CDI 1.1.0 schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

ACCELKIT = [sys.executable, "-c", "from accelkit.cli.app import run; run()"]
SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "cdi-schema.json").read_text())

DEVICES = """
[[kinds]]
key = "cpu"
[[kinds.devices]]
id = "0"

[[kinds]]
key = "cuda"
[[kinds.devices]]
id = "cuda0"
[[kinds.devices]]
id = "cuda1"
[[kinds.devices]]
id = "cuda2"
"""


@pytest.fixture
def node(tmp_path: Path) -> Path:
    (tmp_path / "devices.toml").write_text(DEVICES)
    config = tmp_path / "host.toml"
    config.write_text(
        '[resource]\nallocation-mode = "auto-split"\nreserved-cpu = 0\n'
        f'state-dir = "{tmp_path / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
        '[[agents]]\n[agents.agent]\nid = "agent-1"\n[[agents]]\n[agents.agent]\nid = "agent-2"\n'
    )
    return config


def accelkit(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_")}
    return subprocess.run(
        [*ACCELKIT, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_prints_a_valid_spec_of_the_agents_devices_only(node):
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1")
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout)
    jsonschema.validate(spec, SCHEMA)
    assert spec["cdiVersion"] == "1.1.0"
    assert spec["kind"] == "accelkit.io/agent-1"
    edits = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    # auto-split: agent-1 holds cuda0 and cuda1; cpu is not a CDI device
    assert edits == {
        "cuda-cuda0": {"env": ["MOCK_CUDA_DEVICES=cuda0"]},
        "cuda-cuda1": {"env": ["MOCK_CUDA_DEVICES=cuda1"]},
        "all": {"env": ["MOCK_CUDA_DEVICES=cuda0,cuda1"]},
    }


def test_writes_the_spec_into_a_directory(node, tmp_path):
    out = tmp_path / "cdi"
    result = accelkit(
        "cdi",
        "--config",
        str(node),
        "--agent",
        "agent-2",
        "--output",
        str(out),
        "--kind",
        "example.com/gpu",
    )
    assert result.returncode == 0, result.stderr
    written = out / "example.com-gpu.json"
    assert result.stdout.strip() == str(written)
    spec = json.loads(written.read_text())
    jsonschema.validate(spec, SCHEMA)
    assert [d["name"] for d in spec["devices"]] == ["cuda-cuda2", "all"]
    assert [p.name for p in out.iterdir()] == ["example.com-gpu.json"]


def test_unknown_agent_and_bad_kind_exit_2(node):
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-9")
    assert result.returncode == 2
    assert "unknown agent 'agent-9'" in result.stderr
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1", "--kind", "nokind")
    assert result.returncode == 2
    assert "not a CDI kind" in result.stderr


def test_devices_whose_names_collide_get_unique_names(tmp_path):
    (tmp_path / "devices.toml").write_text(
        '[[kinds]]\nkey = "cuda"\n'
        '[[kinds.devices]]\nid = "gpu 0"\n'
        '[[kinds.devices]]\nid = "gpu-0"\n'
        '[[kinds.devices]]\nid = "gpu-0-2"\n'
    )
    config = tmp_path / "host.toml"
    config.write_text(
        f'[resource]\nreserved-cpu = 0\nstate-dir = "{tmp_path / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
    )
    result = accelkit("cdi", "--config", str(config), "--agent", "agent-1")
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout)
    jsonschema.validate(spec, SCHEMA)
    edits = {d["name"]: d["containerEdits"]["env"] for d in spec["devices"]}
    # the first keeps its name; the second takes the first suffix no other device's name uses
    assert edits == {
        "cuda-gpu-0": ["MOCK_CUDA_DEVICES=gpu 0"],
        "cuda-gpu-0-3": ["MOCK_CUDA_DEVICES=gpu-0"],
        "cuda-gpu-0-2": ["MOCK_CUDA_DEVICES=gpu-0-2"],
        "all": ["MOCK_CUDA_DEVICES=gpu 0,gpu-0,gpu-0-2"],
    }


def test_an_output_directory_that_cannot_be_created_is_an_error_naming_it(node, tmp_path):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "cdi"
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1", "--output", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot create the directory '{out}'")
    assert "internal error" not in result.stderr


def test_a_spec_that_cannot_be_written_is_an_error_and_leaves_no_temp_file(node, tmp_path):
    out = tmp_path / "cdi"
    (out / "accelkit.io-agent-1.json").mkdir(parents=True)  # in the way of the rename
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1", "--output", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot write '{out / 'accelkit.io-agent-1.json'}'")
    assert "internal error" not in result.stderr
    assert [p.name for p in out.iterdir()] == ["accelkit.io-agent-1.json"]
