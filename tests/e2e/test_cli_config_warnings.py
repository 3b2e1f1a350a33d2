"""Config warnings reach the user of every command, once, on stderr (never in --json output).

The config names a plugin in ``plugins.allowed`` and ``plugins.blocked`` that no distribution
provides, and ``ACCELKIT_DISABLE_PLUGINS`` names another: every command says so, as
``accelkit check`` does, and still does its work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit

WARNINGS = [
    "warning: plugins.allowed names 'mokc', which matches no installed plugin",
    "warning: plugins.blocked names 'cudaa', which matches no installed plugin",
    "warning: ACCELKIT_DISABLE_PLUGINS names 'gpu', which matches no installed plugin",
]
RUN = ["run", "--agent", "agent-1", "--slots", "cpu=1", "--", sys.executable, "-c", "print(7)"]
COMMANDS = {
    "devices": ["devices", "--json"],
    "plan": ["plan", "--json"],
    "metrics": ["metrics", "--json"],
    "cdi": ["cdi", "--agent", "agent-1"],
    "status": ["status", "--json"],
    "plugins": ["plugins", "--json"],
    "run": RUN,
}


@pytest.fixture
def node(mock_node) -> Path:
    config = mock_node(cpus=2, mem="1G", gpus=1)
    text = config.read_text().replace(
        'allowed = ["mock"]', 'allowed = ["mock", "mokc"]\nblocked = ["cudaa"]'
    )
    config.write_text(text)
    return config


def accelkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, env={"ACCELKIT_DISABLE_PLUGINS": "gpu"})


def with_config(argv: list[str], config: Path) -> list[str]:
    return [argv[0], "--config", str(config), *argv[1:]]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_warns_once_on_stderr(node, command):
    result = accelkit(*with_config(COMMANDS[command], node))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    for warning in WARNINGS:
        assert sum(line.startswith(warning) for line in lines) == 1, result.stderr
    assert "matches no installed plugin" not in result.stdout
    if command == "run":
        assert result.stdout == "7\n"
    else:
        json.loads(result.stdout)  # stdout is the JSON, and only the JSON


def test_a_config_without_such_names_warns_of_nothing(mock_node):
    config = mock_node(cpus=1, gpus=1)
    for argv in COMMANDS.values():
        result = run_accelkit(*with_config(argv, config))
        assert result.returncode == 0, (argv, result.stderr)
        # what a run cannot contain depends on the host's cgroups (tests/runtime covers it)
        warnings = [
            line
            for line in result.stderr.splitlines()
            if line.startswith("warning:") and not line.startswith("warning: not contained:")
        ]
        assert warnings == [], (argv, result.stderr)


def test_the_table_of_plan_keeps_its_own_warnings_on_stdout_and_config_ones_on_stderr(node):
    result = accelkit("plan", "--config", str(node))
    assert result.returncode == 0, result.stderr
    assert "matches no installed plugin" not in result.stdout
    assert sum("matches no installed plugin" in line for line in result.stderr.splitlines()) == 3


def test_warnings_are_said_once_however_often_they_are_reported(capsys):
    from accelkit.cli.options import echo_warnings

    echo_warnings(["unique line for this test", "unique line for this test"])
    echo_warnings(["unique line for this test"])
    captured = capsys.readouterr()
    assert captured.err == "warning: unique line for this test\n"
    assert captured.out == ""


def test_serve_metrics_warns_before_it_serves(node):
    env = cli_env()
    env["ACCELKIT_DISABLE_PLUGINS"] = "gpu"
    argv = [*ACCELKIT, "serve-metrics", "--port", "0", "--config", str(node)]
    with subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env) as server:
        assert server.stderr is not None
        before: list[str] = []
        for line in server.stderr:
            if line.startswith("serving "):
                break
            before.append(line)
        server.terminate()
        server.wait(30)
    for warning in WARNINGS:
        assert sum(line.startswith(warning) for line in before) == 1, before


def test_a_renamed_plugin_key_is_read_and_warned_about_by_every_command(refusing_site, tmp_path):
    config = tmp_path / "host.toml"
    config.write_text(
        f"""
[resource]
state-dir = "{tmp_path / "state"}"
[plugins]
allowed = ["refusing"]
[plugins.config.refusing]
fail-at = ""
"""
    )
    warning = (
        f"warning: {config}: [plugins.config.refusing] 'fail-at' is deprecated, it is now spelt "
        "'fail-in' (the old key is still read)"
    )
    run = ["run", "--agent", "agent-1", "--slots", "refuse.device=1", "--", "true"]
    for argv in (["devices", "--json"], ["plan", "--json"], ["check"], run):
        result = run_accelkit(*with_config(argv, config), site=refusing_site)
        assert result.returncode == 0, (argv, result.stderr)
        assert result.stderr.splitlines().count(warning) == 1, (argv, result.stderr)
