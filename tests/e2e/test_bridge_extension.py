"""A bridge another distribution registers: offered by ``accelkit --help``, run, and listed.

``tests/fixtures/bridge-plugin`` registers the bridge ``hello-scheduler`` (and one claiming
the name ``run``, which is refused) through the ``accelkit`` entry-point group and nothing else;
it is installed into a directory of its own (``bridge_site``) and put on ``PYTHONPATH`` of some
commands only.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from accelkit.testing.cli_runner import run_accelkit

pytestmark = pytest.mark.slow  # installs a distribution


def accelkit(site: Path | None, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, site=site, env=extra)


@pytest.fixture
def node(mock_node) -> str:
    path = mock_node(cpus=1)
    text = path.read_text().replace('allowed = ["mock"]', 'allowed = ["mock", "extra-bridge"]')
    path.write_text(text)
    return str(path)


def commands(help_text: str) -> list[str]:
    listed = help_text.split("Commands:", 1)[1].splitlines()
    return [line.split()[0] for line in listed if line.strip()]


def test_the_help_offers_the_installed_bridges_and_the_built_ins(bridge_site):
    having = commands(accelkit(bridge_site, "--help").stdout)
    lacking = commands(accelkit(None, "--help").stdout)
    assert set(having) - set(lacking) == {"hello-scheduler"}
    assert {"k8s-device-plugin", "dra-driver", "slurm"} <= set(lacking)
    assert having == sorted(having)


def test_a_registered_bridge_runs_as_an_accelkit_command(bridge_site):
    result = accelkit(bridge_site, "hello-scheduler", "--greeting", "hi")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hi, scheduler\n"


def test_a_bridge_without_its_distribution_is_no_command(bridge_site):
    for site, env in ((None, {}), (bridge_site, {"ACCELKIT_DISABLE_PLUGINS": "extra-bridge"})):
        result = accelkit(site, "hello-scheduler", **env)
        assert result.returncode == 2
        assert "error: No such command 'hello-scheduler'." in result.stderr


def test_a_bridge_cannot_take_an_accelkit_command(bridge_site, node):
    result = accelkit(bridge_site, "run", "--help")
    assert result.returncode == 0
    assert "Run COMMAND as a contained workload" in result.stdout
    listed = accelkit(bridge_site, "plugins", "--config", node)
    assert listed.returncode == 0, listed.stderr
    assert (
        "warning: bridge TakesRun of plugin 'extra-bridge' takes the name 'run' of an accelkit "
        "command" in listed.stderr
    )


def test_accelkit_plugins_lists_the_registered_bridges(bridge_site, node):
    config = node
    having = accelkit(bridge_site, "plugins", "--config", config)
    assert having.returncode == 0, having.stderr
    bridges = having.stdout.split("Bridges", 1)[1].splitlines()
    rows = {line.split("  ")[0].strip(): line for line in bridges[2:]}
    assert list(rows) == [
        "accelkit k8s-device-plugin",
        "accelkit dra-driver",
        "accelkit slurm",
        "accelkit hello-scheduler",
    ]
    assert rows["accelkit hello-scheduler"].split()[-1] == "accelkit_extra_bridge"
    as_json = accelkit(bridge_site, "plugins", "--config", config, "--json")
    statuses = {r["name"]: r["status"] for r in json.loads(as_json.stdout)}
    assert statuses["extra-bridge"] == "loaded"  # a distribution of a bridge alone
