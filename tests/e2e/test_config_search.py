"""One config everywhere: --config, else ACCELKIT_CONFIG, else the system config, else defaults.

The test suite's conftest points ACCELKIT_SYSTEM_CONFIG at a file that never exists, so no
test reads this machine's /etc/accelkit; the tests here move it to files of their own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accelkit.cli.app import main
from accelkit.config.search import (
    CONFIG_ENV,
    SYSTEM_CONFIG,
    SYSTEM_CONFIG_ENV,
    find_host_config,
)
from accelkit.errors import ConfigError

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
AUTO = EXAMPLES / "auto-split.toml"


def run(capsys, *args):
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def one_agent_node(tmp_path: Path, name: str = "host.toml", agents: int = 1) -> Path:
    shutil.copy(EXAMPLES / "mock-gpu-node.toml", tmp_path / "mock-gpu-node.toml")
    path = tmp_path / name
    text = (
        f'[resource]\nallocation-mode = "auto-split"\nstate-dir = "{tmp_path / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\n'
        'config-file = "mock-gpu-node.toml"\n'
    )
    for i in range(1, agents + 1):
        text += f'[[agents]]\nagent = {{ id = "agent-{i}" }}\n'
    path.write_text(text, encoding="utf-8")
    return path


# -- the search itself --------------------------------------------------------------------------


def test_the_search_order(tmp_path):
    flag, named, system = (tmp_path / n for n in ("flag.toml", "env.toml", "system.toml"))
    system.write_text("")
    env = {CONFIG_ENV: str(named), SYSTEM_CONFIG_ENV: str(system)}
    assert find_host_config(flag, env).path == flag
    assert find_host_config(None, env).path == named
    assert find_host_config(None, env).found_by == CONFIG_ENV
    assert find_host_config(None, {SYSTEM_CONFIG_ENV: str(system)}).path == system
    nothing = find_host_config(None, {SYSTEM_CONFIG_ENV: str(tmp_path / "absent.toml")})
    assert nothing.path is None
    assert "no --config, no ACCELKIT_CONFIG" in nothing.found_by


def test_the_system_config_is_etc_accelkit_host_toml():
    assert Path("/etc/accelkit/host.toml") == SYSTEM_CONFIG


def test_the_suite_never_reads_this_machines_system_config():
    choice = find_host_config()
    assert choice.path is None or choice.path != SYSTEM_CONFIG


def test_a_broken_system_config_link_is_read_and_refused_not_skipped(tmp_path, capsys, monkeypatch):
    link = tmp_path / "host.toml"
    link.symlink_to(tmp_path / "gone.toml")
    monkeypatch.setenv(SYSTEM_CONFIG_ENV, str(link))
    assert find_host_config().path == link
    status, _out, err = run(capsys, "plan")
    assert status == 2
    assert err.startswith(f"error: {link}: cannot read the host config")


@pytest.mark.parametrize("name", [CONFIG_ENV, SYSTEM_CONFIG_ENV])
def test_an_empty_variable_is_an_error_naming_it(name, capsys, monkeypatch):
    monkeypatch.setenv(name, "")
    with pytest.raises(ConfigError, match=f"key '{name}': {name} is empty"):
        find_host_config()
    for command in (["plan"], ["check"], ["devices"], ["status"]):
        status, out, err = run(capsys, *command)
        assert (status, out) == (2, ""), command
        assert err.startswith("error: "), (command, err)
        assert f"{name} is empty" in err, (command, err)
        assert "Traceback" not in err


def test_an_empty_config_flag_is_an_error(capsys):
    for command in ("plan", "check", "run"):
        status, _out, err = run(capsys, command, "--config", "", "--", "true")
        assert status == (125 if command == "run" else 2)  # run's own refusals: 125
        assert "empty path" in err
        assert "--config" in err


# -- every command reads the same file --------------------------------------------------------


def test_check_names_the_file_it_read_and_how_it_was_found(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(CONFIG_ENV, str(AUTO))
    status, out, _err = run(capsys, "check")
    assert status == 0
    assert out.startswith(f"{AUTO} (from ACCELKIT_CONFIG): ok: mode auto-split, 3 agent(s)")
    monkeypatch.delenv(CONFIG_ENV)
    system = one_agent_node(tmp_path)
    monkeypatch.setenv(SYSTEM_CONFIG_ENV, str(system))
    status, out, _err = run(capsys, "check")
    assert status == 0
    assert out.startswith(f"{system} (from the system config): ok: mode shared, 1 agent(s)")
    status, out, _err = run(capsys, "check", "--config", str(AUTO))
    assert out.startswith(f"{AUTO}: ok: mode auto-split, 3 agent(s)")


def test_check_says_when_it_read_no_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(SYSTEM_CONFIG_ENV, str(tmp_path / "absent.toml"))
    monkeypatch.setenv("ACCELKIT_STATE_DIR", str(tmp_path / "state"))
    status, out, _err = run(capsys, "check")
    assert status == 0
    assert out.startswith(
        f"built-in defaults (no --config, no ACCELKIT_CONFIG, no {tmp_path / 'absent.toml'}): ok"
    )


def test_plan_and_devices_read_accelkit_config(capsys, monkeypatch):
    monkeypatch.setenv(CONFIG_ENV, str(AUTO))
    status, out, _err = run(capsys, "plan", "--json")
    assert status == 0
    assert list(json.loads(out)["agents"]) == ["agent-1", "agent-2", "agent-3"]
    status, out, _err = run(capsys, "devices", "--json")
    assert status == 0
    assert [d["device_id"] for d in json.loads(out)["cuda"]] == [f"cuda{i}" for i in range(5)]


# -- --agent on a one-agent node ---------------------------------------------------------------


def test_cdi_takes_the_only_agent_and_names_the_agents_otherwise(tmp_path, capsys):
    single = one_agent_node(tmp_path, "one.toml")
    status, out, err = run(capsys, "cdi", "--config", str(single))
    assert status == 0, err
    assert json.loads(out)["kind"] == "accelkit.io/agent-1"
    several = one_agent_node(tmp_path, "two.toml", agents=2)
    status, out, err = run(capsys, "cdi", "--config", str(several))
    assert (status, out) == (2, "")
    assert "the node has 2 agents (agent-1, agent-2): pick one with --agent" in err


def test_run_takes_the_only_agent_and_names_the_agents_otherwise(tmp_path, capsys):
    single = one_agent_node(tmp_path, "one.toml")
    status = main(["run", "--config", str(single), "--slots", "cuda.device=1", "--", "true"])
    assert status == 0
    several = one_agent_node(tmp_path, "two.toml", agents=2)
    status, _out, err = run(
        capsys, "run", "--config", str(several), "--slots", "cuda.device=1", "--", "true"
    )
    assert status == 125
    assert "the node has 2 agents (agent-1, agent-2): pick one with --agent" in err
