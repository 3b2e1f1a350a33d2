"""``accelkit plan`` and ``accelkit check`` end to end, on mock cpu, mem and cuda devices."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accelkit.cli.app import main

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
AUTO = EXAMPLES / "auto-split.toml"
MANUAL = EXAMPLES / "manual.toml"
G = 1024**3


def run(capsys, *args):
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def write_config(tmp_path, text):
    shutil.copy(EXAMPLES / "mock-gpu-node.toml", tmp_path / "mock-gpu-node.toml")
    path = tmp_path / "host.toml"
    path.write_text(
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "mock-gpu-node.toml"\n'
        + text,
        encoding="utf-8",
    )
    return path


def test_plan_json_on_the_auto_split_example(capsys):
    status, out, err = run(capsys, "plan", "--config", str(AUTO), "--json")
    assert (status, err) == (0, "")
    plan = json.loads(out)
    assert list(plan) == ["mode", "agents", "reserved", "unassigned", "warnings"]
    assert plan["mode"] == "auto-split"
    assert list(plan["agents"]) == ["agent-1", "agent-2", "agent-3"]
    agent = plan["agents"]["agent-3"]
    assert agent == {
        "devices": {"cpu": ["6", "7"], "mem": ["root"], "cuda": ["cuda4"]},
        "slots": {"cpu": "2", "mem": str(21 * G), "cuda.device": "1"},
        "scaling": {"cpu": "0.285714285714", "mem": "0.333333333333", "cuda.device": "0.2"},
        "numa_nodes": [1],
    }
    assert plan["reserved"] == {"cpu": "1", "mem": str(G)}
    assert plan["unassigned"] == {"cpu": [], "cuda": []}
    # cores 4-5 sit on node 1, cuda2-3 on node 0
    assert plan["warnings"] == [
        "agent 'agent-2': accelerators on NUMA node(s) 0, but its cpu cores on 1"
    ]


def test_plan_options_override_mode_and_agent_count(capsys):
    status, out, _ = run(
        capsys, "plan", "--config", str(AUTO), "--agents", "7", "--mode", "shared", "--json"
    )
    assert status == 0
    plan = json.loads(out)
    assert plan["mode"] == "shared"
    assert list(plan["agents"]) == [f"agent-{i}" for i in range(1, 8)]
    assert {a["scaling"]["cuda.device"] for a in plan["agents"].values()} == {"1"}
    status, out, _ = run(capsys, "plan", "--config", str(AUTO), "--agents", "10", "--json")
    plan = json.loads(out)
    assert plan["agents"]["agent-10"]["devices"]["cuda"] == []
    assert "agent 'agent-10' gets no cpu cores" in plan["warnings"]


def test_plan_table_on_the_manual_example(capsys):
    status, out, err = run(capsys, "plan", "--config", str(MANUAL))
    assert (status, err) == (0, "")
    assert "Partition plan (manual)" in out
    assert "cuda0,cuda2-3" in out
    assert "1,3,5,7" in out
    assert "40G" in out
    assert "reserved: 1 cpu core(s), 2G of memory" in out
    assert "NUMA nodes: training: 0, 1; inference: 0, 1" in out
    assert "unassigned cuda: cuda4" in out
    assert "warning: cuda device(s) assigned to no agent: 'cuda4'" in out


@pytest.mark.parametrize("count", ["3000", "4097", "100000000000000000000"])
def test_plan_refuses_more_agents_than_devices(capsys, count):
    status, out, err = run(capsys, "plan", "--config", str(AUTO), "--agents", count)
    assert status == 2
    assert err.startswith("error: Invalid value for '--agents'")
    assert "more agents than the node has devices" in err or "not in the range" in err
    assert out == ""


def test_plan_refuses_agents_with_manual_mode(capsys):
    status, _, err = run(capsys, "plan", "--config", str(MANUAL), "--agents", "2")
    assert status == 2
    assert "error: --agents cannot be used with allocation-mode 'manual'" in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["plan", "--mode", "split"], "'split' is not one of"),
        (["plan", "--agents", "0"], "0 is not in the range"),
        (["check", "--config", ""], "empty path"),
    ],
)
def test_usage_errors_exit_2(capsys, args, words):
    status, _, err = run(capsys, *args)
    assert status == 2
    assert err.startswith("error: ")
    assert words in err


def test_plan_with_a_bad_manual_config_lists_every_problem(capsys, tmp_path):
    path = write_config(
        tmp_path,
        """
[resource]
allocation-mode = "manual"
[[agents]]
agent = { id = "a" }
resource = { cpu = ["1", "2"], mem = "40G", devices = { cuda = ["cuda0", "cuda7"] } }
[[agents]]
agent = { id = "b" }
resource = { cpu = ["2"], mem = "40G", devices = { tpu = ["tpu0"] } }
""",
    )
    status, out, err = run(capsys, "plan", "--config", str(path), "--json")
    assert (status, out) == (2, "")
    assert err.startswith("error: 4 problem(s) in the configuration:")
    assert (
        f"{path}: agent 'a': key 'agents[0].resource.devices.cuda': unknown device id 'cuda7'"
        in err
    )
    assert "agent 'b': key 'agents[1].resource.cpu'" in err
    assert "memory over-subscribed" in err
    assert "unknown device name 'tpu'" in err
    assert "Traceback" not in err


def test_check_accepts_the_examples_with_a_one_line_summary(capsys):
    status, out, err = run(capsys, "check", "--config", str(AUTO))
    assert status == 0
    # cores 4-5 of agent-2 sit on node 1, its cuda2-3 on node 0
    assert err == (
        "warning: agent 'agent-2': accelerators on NUMA node(s) 0, but its cpu cores on 1\n"
    )
    assert out == f"{AUTO}: ok: mode auto-split, 3 agent(s), 3 plugin(s), 14 device(s)\n"
    status, out, err = run(capsys, "check", "--config", str(MANUAL))
    assert status == 0
    assert out.count("\n") == 1
    assert "warning: cuda device(s) assigned to no agent: 'cuda4'" in err


def test_check_reports_every_problem_syntactic(capsys, tmp_path):
    path = write_config(
        tmp_path,
        '[resource]\nallocation-mode = "split"\nreserved-mem = "-1G"\n'
        '[[agents]]\nagent = { id = "a" }\nresource = { cpu = 4 }\n',
    )
    status, out, err = run(capsys, "check", "--config", str(path))
    assert (status, out) == (2, "")
    assert err.startswith("error: 4 problem(s) in the configuration:")
    for words in (
        "unknown mode 'split'",
        "must not be negative",
        "Old integer format",
        "'manual' only",
    ):
        assert words in err


def test_check_reports_every_problem_against_the_devices(capsys, tmp_path):
    path = write_config(
        tmp_path,
        '[resource]\nallocation-mode = "auto-split"\nreserved-cpu = ["0", "42"]\n'
        '[[agents]]\nagent = { id = "a" }\n[[agents]]\nagent = { id = "b" }\n',
    )
    status, _, err = run(capsys, "check", "--config", str(path))
    assert status == 2
    assert f"error: {path}: key 'resource.reserved-cpu': unknown cpu core id(s) '42'" in err


def test_check_reports_a_plugin_that_failed(capsys, tmp_path):
    path = tmp_path / "host.toml"
    path.write_text(
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "nowhere.toml"\n'
        '[resource]\nreserved-cpu = ["7"]\n',
        encoding="utf-8",
    )
    status, _, err = run(capsys, "check", "--config", str(path))
    assert status == 2
    assert (
        f"{path}:4: key 'plugins.config.mock.config-file': cannot read the mock device file "
        f"'{tmp_path / 'nowhere.toml'}'"
    ) in err
    assert "plugin 'mock' failed" not in err  # a config problem, not the plugin's fault


def test_check_of_an_unreadable_file(capsys, tmp_path):
    status, _, err = run(capsys, "check", "--config", str(tmp_path / "none.toml"))
    assert status == 2
    assert "cannot read the host config" in err


def test_plan_without_config_uses_the_installed_cpu_and_mem_plugins(capsys, monkeypatch):
    monkeypatch.setenv("ACCELKIT_DISABLE_PLUGINS", "cuda")
    status, out, err = run(capsys, "plan", "--json")
    assert status == 0, err
    plan = json.loads(out)
    assert plan["mode"] == "shared"
    assert list(plan["agents"]) == ["agent-1"]
    agent = plan["agents"]["agent-1"]
    assert set(agent["devices"]) >= {"cpu", "mem"}
    assert set(agent["scaling"].values()) == {"1"}
    assert plan["reserved"]["mem"] == str(G)


def test_a_large_mock_node_over_sixteen_agents(capsys, tmp_path):
    lines = ["[[kinds]]", 'key = "cpu"']
    for i in range(256):
        lines += ["[[kinds.devices]]", f'id = "{i}"', f"numa-node = {i // 64}"]
    lines += ["[[kinds]]", 'key = "mem"', "[[kinds.devices]]", 'id = "root"', 'memory = "2T"']
    lines += ["[[kinds]]", 'key = "cuda"']
    for i in range(64):
        lines += ["[[kinds.devices]]", f'id = "cuda{i}"', f"numa-node = {i // 16}"]
    (tmp_path / "node.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = tmp_path / "host.toml"
    path.write_text(
        '[resource]\nallocation-mode = "auto-split"\n[plugins]\nallowed = ["mock"]\n'
        '[plugins.config.mock]\nconfig-file = "node.toml"\n',
        encoding="utf-8",
    )
    status, out, err = run(capsys, "plan", "--config", str(path), "--agents", "16", "--json")
    assert status == 0, err
    plan = json.loads(out)
    agents = list(plan["agents"].values())
    assert [len(a["devices"]["cuda"]) for a in agents] == [4] * 16
    assert [len(a["devices"]["cpu"]) for a in agents] == [16] * 15 + [15]
    assert {a["scaling"]["cuda.device"] for a in agents} == {"0.0625"}
    assert agents[0]["slots"]["mem"] == str(
        ((2 * 1024**4 - G) // 16) // (16 * 1024**2) * 16 * 1024**2
    )


def test_the_installed_script_in_a_subprocess():
    script = Path(sys.executable).with_name("accelkit")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "accelkit.cli.app"]
    done = subprocess.run(
        [*command, "plan", "--config", str(AUTO), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["agents"]["agent-1"]["devices"]["cuda"] == ["cuda0", "cuda1"]
    failed = subprocess.run(
        [*command, "check", "--config", "/nonexistent/host.toml"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert failed.returncode == 2
    assert failed.stderr.startswith("error: ")
