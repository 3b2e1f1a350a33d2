"""``pids``: the node's ``[resource] pids`` and an agent's ``[agents.resource] pids`` (any mode)."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelkit.config import HostConfig, load_host_config
from accelkit.errors import ConfigError, ConfigErrors


def _load(tmp_path: Path, text: str) -> HostConfig:
    path = tmp_path / "host.toml"
    path.write_text(text)
    return load_host_config(path)


def _problems(tmp_path: Path, text: str) -> list[ConfigError]:
    with pytest.raises((ConfigError, ConfigErrors)) as caught:
        _load(tmp_path, text)
    error = caught.value
    return list(error.errors) if isinstance(error, ConfigErrors) else [error]


_AGENTS = """
[[agents]]
agent = { id = "small" }
resource = { pids = 64 }
[[agents]]
agent = { id = "plain" }
"""


def test_without_pids_no_workload_is_limited(tmp_path):
    config = _load(tmp_path, "")
    assert config.resource.pids is None
    assert config.pids_of("agent-1") is None


@pytest.mark.parametrize("mode", ["shared", "auto-split"])
def test_an_agents_pids_applies_in_every_mode_and_the_nodes_to_the_others(tmp_path, mode):
    config = _load(tmp_path, f'[resource]\nallocation-mode = "{mode}"\npids = 500\n{_AGENTS}')
    assert (config.pids_of("small"), config.pids_of("plain")) == (64, 500)
    assert all(agent.resource is None for agent in config.agents)  # nothing to partition


def test_pids_beside_a_manual_agents_devices(tmp_path):
    text = '[resource]\nallocation-mode = "manual"\n[[agents]]\nagent = { id = "a" }\n'
    text += 'resource = { cpu = ["0"], pids = 10 }\n'
    config = _load(tmp_path, text)
    assert config.pids_of("a") == 10
    assert config.agents[0].resource is not None
    assert config.agents[0].resource.cpu == ("0",)


@pytest.mark.parametrize("value", ["0", "-1", "1.5", '"many"', "true", "4194305"])
@pytest.mark.parametrize("where", ["node", "agent"])
def test_a_pids_that_is_no_count_of_processes_is_refused_naming_the_key(tmp_path, value, where):
    if where == "node":
        text, key = f"[resource]\npids = {value}\n", "resource.pids"
    else:
        text = f'[[agents]]\nagent = {{ id = "a" }}\nresource = {{ pids = {value} }}\n'
        key = "agents[0].resource.pids"
    (error,) = _problems(tmp_path, text)
    assert error.key == key
    assert "must be" in error.message


def test_other_agent_resources_outside_manual_mode_are_still_refused(tmp_path):
    text = '[[agents]]\nagent = { id = "a" }\nresource = { cpu = ["0"], pids = 10 }\n'
    (error,) = _problems(tmp_path, text)
    assert error.key == "agents[0].resource"
    assert "only 'pids' applies in every mode" in error.message
