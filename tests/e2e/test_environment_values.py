"""Environment variables accelkit reads: a value it cannot use is an error naming the variable."""

from __future__ import annotations

import subprocess

import pytest

from accelkit.config import default_state_dir
from accelkit.errors import ConfigError
from accelkit.testing.cli_runner import ACCELKIT, cli_env


def test_an_empty_state_dir_variable_is_an_error_not_the_default():
    with pytest.raises(ConfigError, match="ACCELKIT_STATE_DIR is set but empty"):
        default_state_dir({"ACCELKIT_STATE_DIR": "  "})
    assert str(default_state_dir({"ACCELKIT_STATE_DIR": "/x/y"})) == "/x/y"


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("ACCELKIT_STATE_DIR", "", "ACCELKIT_STATE_DIR is set but empty"),
        ("ACCELKIT_STRICT_PLUGINS", "banana", "ACCELKIT_STRICT_PLUGINS='banana': expected 1 or 0"),
    ],
)
def test_the_command_refuses_the_value_with_a_clear_error(mock_node, name, value, said):
    config = mock_node(cpus=1)
    # no state-dir in the file: the default, which ACCELKIT_STATE_DIR overrides, is used
    lines = config.read_text().splitlines(keepends=True)
    config.write_text("".join(line for line in lines if not line.startswith("state-dir")))
    env = cli_env()
    env["ACCELKIT_STATE_DIR"] = str(config.parent / "state")
    env[name] = value
    # status opens the ledger (the state dir); plan loads the plugins (strict mode)
    for command in ("status", "plan"):
        done = subprocess.run(
            [*ACCELKIT, command, "--config", str(config)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stderr.startswith("error: ")
        assert said in done.stderr
        assert "Traceback" not in done.stderr
