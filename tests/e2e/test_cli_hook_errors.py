"""Hook refusals and failures reach the `accelkit run` user naming the plugin and the hook.

The refusing fixture distribution (``tests/fixtures/refusing-plugin``, key ``refuse``) is
installed into a directory of its own (``refusing_site`` of ``conftest.py``) and put on
``PYTHONPATH``; its
``[plugins.config.refusing]`` section says in which hook it fails and how.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from accelkit.testing.cli_runner import run_accelkit
from accelkit.workload import Ledger

from .node_configs import beside_mock

MESSAGES = {
    "deny": "no refuse device for you",
    "defer": "busy, try again later",
    "crash": "RuntimeError: bug in {phase}",
}


def node_config(directory: Path, phase: str, how: str) -> Path:
    refusing = f'[plugins.config.refusing]\nfail-in = "{phase}"\nhow = "{how}"\n'
    return beside_mock(directory, "refusing", tables=f"\n{refusing}")


def run(site: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [*args, "run", "--config", str(config), "--agent", "agent-1"]
    return run_accelkit(*argv, "--slots", "refuse.device=1", "--", "true", site=site)


@pytest.mark.parametrize("how", list(MESSAGES))
@pytest.mark.parametrize("phase", ["pre_create", "post_create"])
def test_a_failed_creation_names_the_plugin_and_the_hook(refusing_site, tmp_path, phase, how):
    config = node_config(tmp_path, phase, how)
    result = run(refusing_site, config)
    assert result.returncode == 125, result.stderr
    expected = f"error: plugin 'refuse' {phase}: {MESSAGES[how].format(phase=phase)}"
    assert expected in result.stderr.splitlines()
    assert "internal error" not in result.stderr
    assert "Traceback" not in result.stderr
    assert Ledger(tmp_path / "state").read_all() == {}  # nothing left booked


@pytest.mark.parametrize("phase", ["pre_terminate", "post_terminate"])
def test_a_failed_teardown_hook_is_a_warning_naming_the_plugin(refusing_site, tmp_path, phase):
    config = node_config(tmp_path, phase, "crash")
    result = run(refusing_site, config)
    assert result.returncode == 0, result.stderr  # the command's own status
    assert f"plugin 'refuse' {phase}: RuntimeError: bug in {phase}" in result.stderr
    assert "warning: workload 'pid:" in result.stderr
    assert Ledger(tmp_path / "state").read_all() == {}


def test_verbose_shows_the_hooks_own_traceback(refusing_site, tmp_path):
    config = node_config(tmp_path, "pre_create", "crash")
    result = run(refusing_site, config, "--verbose")
    assert result.returncode == 125
    assert "raise RuntimeError(msg)" in result.stderr  # the plugin's line, as the cause
    assert "error: plugin 'refuse' pre_create: RuntimeError: bug in pre_create" in result.stderr


def test_a_hook_that_keeps_quiet_changes_nothing(refusing_site, tmp_path):
    config = node_config(tmp_path, "", "deny")
    result = run(refusing_site, config)
    assert result.returncode == 0, result.stderr
    assert "refuse:refuse0" in result.stderr
