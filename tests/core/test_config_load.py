"""Loading host configs: defaults, sizes, paths, and a ConfigError for every syntactic problem."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.config import (
    DEFAULT_AGENT,
    AffinityPolicyName,
    AllocationMode,
    HostConfig,
    load_host_config,
    parse_host_config,
)
from accelkit.errors import ConfigError, ConfigErrors

G = 1024**3
M = 1024**2
EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"


def load(tmp_path: Path, text: str, name: str = "host.toml") -> HostConfig:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_host_config(path)


def problems(tmp_path: Path, text: str) -> list[ConfigError]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    errors = info.value.errors if isinstance(info.value, ConfigErrors) else [info.value]
    for error in errors:
        assert error.file == str(tmp_path / "host.toml")
        assert error.message
    return errors


def one_problem(tmp_path: Path, text: str) -> ConfigError:
    errors = problems(tmp_path, text)
    assert len(errors) == 1, [str(e) for e in errors]
    return errors[0]


# -- what loads --------------------------------------------------------------------------------


def test_an_empty_file_gives_the_defaults(tmp_path):
    config = load(tmp_path, "")
    assert config.resource.allocation_mode is AllocationMode.SHARED
    assert config.resource.reserved_cpu == 1
    assert config.resource.reserved_mem == G
    assert config.resource.memory_align_size == 16 * M
    assert config.resource.affinity_policy is AffinityPolicyName.PREFER_SINGLE_NODE
    assert config.agent_ids == (DEFAULT_AGENT,)
    assert config.source == tmp_path / "host.toml"
    assert config.source_name == str(tmp_path / "host.toml")


def test_the_defaults_without_a_file():
    config = HostConfig()
    assert config.agent_ids == ("agent-1",)
    assert config.source_name == "<defaults>"
    assert config.with_agent_count(3).agent_ids == ("agent-1", "agent-2", "agent-3")
    assert config.with_mode(AllocationMode.MANUAL).resource.allocation_mode is AllocationMode.MANUAL


def test_sizes_and_an_explicit_core_list(tmp_path):
    config = load(
        tmp_path,
        """
        [resource]
        allocation-mode = "auto-split"
        reserved-cpu = ["0", "1"]
        reserved-mem = "512m"
        memory-align-size = 4096
        affinity-policy = "interleaved"
        """,
    )
    assert config.resource.reserved_cpu == ("0", "1")
    assert config.resource.reserved_mem == 512 * M
    assert config.resource.memory_align_size == 4096
    assert config.resource.affinity_policy is AffinityPolicyName.INTERLEAVED


def test_bridge_paths_resolve_against_the_config_file_and_a_bare_command_stays(tmp_path):
    (tmp_path / "etc").mkdir()
    text = """
        [bridge.k8s]
        kubelet-dir = "kubelet/device-plugins"
        pod-resources-socket = "/var/lib/kubelet/pod-resources/kubelet.sock"
        [bridge.slurm]
        scontrol = "{scontrol}"
        """
    config = load(tmp_path, text.format(scontrol="bin/scontrol"), name="etc/host.toml")
    assert config.bridge.k8s is not None
    assert config.bridge.slurm is not None
    assert config.bridge.k8s.kubelet_dir == tmp_path / "etc" / "kubelet" / "device-plugins"
    assert config.bridge.k8s.pod_resources_socket == Path(
        "/var/lib/kubelet/pod-resources/kubelet.sock"
    )
    assert config.bridge.slurm.scontrol == str(tmp_path / "etc" / "bin" / "scontrol")
    bare = load(tmp_path, text.format(scontrol="scontrol"), name="etc/host.toml")
    assert bare.bridge.slurm is not None
    assert bare.bridge.slurm.scontrol == "scontrol"


def test_relative_paths_resolve_against_the_config_file(tmp_path):
    (tmp_path / "etc").mkdir()
    config = load(
        tmp_path,
        """
        [resource]
        state-dir = "state"
        [plugins.config.mock]
        config-file = "devices.toml"
        label = "not-a-path"
        [plugins.config.other]
        data-dir = "/abs/data"
        """,
        name="etc/host.toml",
    )
    assert config.resource.state_dir == tmp_path / "etc" / "state"
    assert config.plugins.config_for("mock") == {
        "config-file": str(tmp_path / "etc" / "devices.toml"),
        "label": "not-a-path",
    }
    assert config.plugins.config_for("other") == {"data-dir": "/abs/data"}


def test_plugins_section(tmp_path):
    config = load(
        tmp_path, '[plugins]\nallowed = ["cpu", "mock"]\nblocked = ["cuda"]\nstrict = true\n'
    )
    assert config.plugins.allowed == {"cpu", "mock"}
    assert config.plugins.blocked == {"cuda"}
    assert config.plugins.strict is True


def test_manual_agents(tmp_path):
    config = load(
        tmp_path,
        """
        [resource]
        allocation-mode = "manual"
        [[agents]]
        agent = { id = "a" }
        resource = { cpu = ["0", 3], mem = "2G", devices = { cuda = ["cuda1"] } }
        [[agents]]
        agent = { id = "b" }
        """,
    )
    a, b = config.agents
    assert a.id == "a"
    assert a.resource is not None
    assert a.resource.cpu == ("0", "3")
    assert a.resource.mem == 2 * G
    assert a.resource.devices == {"cuda": ("cuda1",)}
    assert b.resource is None


@pytest.mark.parametrize("name", ["auto-split.toml", "manual.toml"])
def test_the_shipped_examples_load(name):
    config = load_host_config(EXAMPLES / name)
    assert config.plugins.allowed == {"mock"}
    assert Path(config.plugins.config_for("mock")["config-file"]).is_file()


# -- what does not ------------------------------------------------------------------------------


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the host config") as info:
        load_host_config(tmp_path / "missing.toml")
    assert info.value.file == str(tmp_path / "missing.toml")


def test_malformed_toml_names_the_line(tmp_path):
    error = one_problem(tmp_path, '[resource]\nreserved-cpu = 1\nreserved-mem = "1G\n')
    assert "malformed TOML" in error.message
    assert "line 3" in error.message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("colour = 1", "colour"),
        ("[resource]\nreserved-gpu = 1", "resource.reserved-gpu"),
        ("[plugins]\nallow = []", "plugins.allow"),
        ('[[agents]]\nagent = { id = "a", name = "x" }', "agents[0].agent.name"),
        ('[[agents]]\nagent = { id = "a" }\nextra = 1', "agents[0].extra"),
    ],
)
def test_unknown_keys(tmp_path, text, key):
    error = one_problem(tmp_path, text)
    assert error.key == key
    assert "unknown key" in error.message


def test_unknown_key_in_agent_resources(tmp_path):
    text = '[resource]\nallocation-mode = "manual"\n[[agents]]\nagent = { id = "a" }\n'
    text += "resource = { gpu = 1 }"
    error = one_problem(tmp_path, text)
    assert (error.agent, error.key) == ("a", "agents[0].resource.gpu")


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        (
            '[resource]\nallocation-mode = "split"',
            "resource.allocation-mode",
            "unknown mode 'split'",
        ),
        ('[resource]\naffinity-policy = "near"', "resource.affinity-policy", "unknown policy"),
        ('[resource]\nreserved-mem = "-1G"', "resource.reserved-mem", "must not be negative"),
        ("[resource]\nreserved-mem = -5", "resource.reserved-mem", "must not be negative"),
        ('[resource]\nmemory-align-size = "lots"', "resource.memory-align-size", "not a size"),
        ("[resource]\nmemory-align-size = 0", "resource.memory-align-size", "greater than zero"),
        ("[resource]\nreserved-mem = 1.5", "resource.reserved-mem", "not float"),
        ("[resource]\nreserved-cpu = -1", "resource.reserved-cpu", "non-negative count"),
        ("[resource]\nreserved-cpu = true", "resource.reserved-cpu", "non-negative count"),
        ("[resource]\nreserved-cpu = [0]", "resource.reserved-cpu", "list of core ids"),
        (
            '[resource]\nreserved-cpu = ["1", "0", "1", "0"]',
            "resource.reserved-cpu",
            "core id(s) '0', '1' listed twice",
        ),
        ("[resource]\nstate-dir = 3", "resource.state-dir", "expected a directory path"),
        ("resource = 3", "resource", "expected a table"),
        ('[plugins]\nallowed = "cpu"', "plugins.allowed", "list of plugin names"),
        ("[plugins]\nblocked = [1]", "plugins.blocked", "list of plugin names"),
        ('[plugins]\nstrict = "yes"', "plugins.strict", "true or false"),
        ("[plugins]\nconfig = 1", "plugins.config", "expected a table"),
        ("[plugins.config]\nmock = 1", "plugins.config.mock", "expected a table"),
        ("agents = 1", "agents", "array of tables"),
        ("[[agents]]\nagent = {}", "agents[0].agent.id", "non-empty string id"),
        ('[[agents]]\nagent = { id = "" }', "agents[0].agent.id", "non-empty string id"),
    ],
)
def test_bad_values(tmp_path, text, key, words):
    error = one_problem(tmp_path, text)
    assert error.key == key
    assert words in error.message


def test_duplicate_agent_ids(tmp_path):
    text = '[[agents]]\nagent = { id = "a" }\n[[agents]]\nagent = { id = "b" }\n'
    text += '[[agents]]\nagent = { id = "a" }\n'
    error = one_problem(tmp_path, text)
    assert (error.agent, error.key) == ("a", "agents[2].agent.id")
    assert "duplicate agent id 'a'" in error.message


def test_manual_resources_in_another_mode(tmp_path):
    text = '[resource]\nallocation-mode = "auto-split"\n'
    text += '[[agents]]\nagent = { id = "a" }\nresource = { cpu = ["0"] }\n'
    error = one_problem(tmp_path, text)
    assert (error.agent, error.key) == ("a", "agents[0].resource")
    assert "'manual' only (mode is 'auto-split')" in error.message


def manual_agent(resource: str) -> str:
    return f'[resource]\nallocation-mode = "manual"\n[[agents]]\nagent = {{ id = "a" }}\n{resource}'


def test_old_integer_cpu_format(tmp_path):
    error = one_problem(tmp_path, manual_agent("resource = { cpu = 4 }"))
    assert (error.agent, error.key) == ("a", "agents[0].resource.cpu")
    assert "Old integer format detected for 'cpu'" in error.message
    assert 'cpu = ["0", "1", "2", "3"]' in error.message


@pytest.mark.parametrize(
    "devices",
    ['{ "cuda.mem" = 0.5 }', "{ cuda = 2 }", '{ "cuda.device" = ["cuda0"] }', "{ cuda = [0, 1] }"],
)
def test_old_slot_based_devices_format(tmp_path, devices):
    error = one_problem(tmp_path, manual_agent(f"resource = {{ devices = {devices} }}"))
    assert error.agent == "a"
    assert error.key.startswith("agents[0].resource.devices.cuda")
    assert "Old slot-based format detected" in error.message
    assert 'devices = { cuda = ["cuda0", "cuda1"] }' in error.message


@pytest.mark.parametrize("name", ["cpu", "mem"])
def test_cpu_or_mem_inside_devices(tmp_path, name):
    error = one_problem(tmp_path, manual_agent(f'resource = {{ devices = {{ {name} = ["0"] }} }}'))
    assert error.key == f"agents[0].resource.devices.{name}"
    assert "its own key" in error.message


@pytest.mark.parametrize(
    ("resource", "key", "words"),
    [
        ("resource = { cpu = [] }", "agents[0].resource.cpu", "at least one cpu core"),
        ('resource = { cpu = "0-3" }', "agents[0].resource.cpu", "list of core ids"),
        ('resource = { mem = "-2G" }', "agents[0].resource.mem", "must not be negative"),
        ("resource = { devices = [1] }", "agents[0].resource.devices", "expected a table"),
        (
            'resource = { devices = { cuda = [""] } }',
            "agents[0].resource.devices.cuda",
            "device ids",
        ),
        ("resource = 5", "agents[0].resource", "expected a table"),
    ],
)
def test_bad_agent_resources(tmp_path, resource, key, words):
    error = one_problem(tmp_path, manual_agent(resource))
    assert (error.agent, error.key) == ("a", key)
    assert words in error.message


def test_every_problem_is_reported_at_once(tmp_path):
    text = """
    colour = "blue"
    [resource]
    allocation-mode = "split"
    reserved-mem = "-1G"
    [plugins]
    strict = 2
    [[agents]]
    agent = { id = "a" }
    resource = { cpu = 4 }
    [[agents]]
    agent = { id = "a" }
    """
    with pytest.raises(ConfigErrors) as info:
        load(tmp_path, text)
    keys = sorted(e.key or "" for e in info.value.errors)
    assert keys == [
        "agents[0].resource",
        "agents[0].resource.cpu",
        "agents[1].agent.id",
        "colour",
        "plugins.strict",
        "resource.allocation-mode",
        "resource.reserved-mem",
    ]
    assert str(info.value).startswith("7 problem(s) in the configuration:")


def test_parse_without_a_file_names_a_placeholder():
    with pytest.raises(ConfigError, match=r"^<config>: key 'colour'"):
        parse_host_config({"colour": 1})


@pytest.mark.parametrize("agent_id", [".tmp-gpu", "a b", "a/b", "-x", "x" * 65, "agent:1"])
def test_agent_ids_must_be_plain_names(tmp_path, agent_id):
    error = one_problem(tmp_path, f'[[agents]]\nagent = {{ id = "{agent_id}" }}\n')
    assert error.key == "agents[0].agent.id"
    assert "must start with a letter or digit" in error.message


@pytest.mark.parametrize("agent_id", ["agent-1", "gpu_node.7", "A", "x" * 64])
def test_plain_agent_ids_are_accepted(tmp_path, agent_id):
    path = tmp_path / "host.toml"
    path.write_text(f'[[agents]]\nagent = {{ id = "{agent_id}" }}\n')
    assert load_host_config(path).agent_ids == (agent_id,)


def test_plugin_call_and_hook_timeouts(tmp_path):
    config = load(tmp_path, '[plugins]\ncall-timeout = 2.5\nhook-timeout = "90"\n')
    assert config.plugins.call_timeout == Decimal("2.5")
    assert config.plugins.hook_timeout == Decimal(90)
    defaults = load(tmp_path, "")
    assert (defaults.plugins.call_timeout, defaults.plugins.hook_timeout) == (30, 60)


@pytest.mark.parametrize("value", ["0", "-1", '"nan"', '"soon"', "true", "1e9", "[1]"])
def test_a_bad_timeout_names_its_key(tmp_path, value):
    error = one_problem(tmp_path, f"[plugins]\ncall-timeout = {value}\n")
    assert error.key == "plugins.call-timeout"
    assert "seconds" in error.message
