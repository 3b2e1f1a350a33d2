"""One rule set for hook configs, shared by the runtime and the kit; value types truly frozen."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.errors import WorkloadError
from accelkit.testing import config_problems
from accelkit.types import ComputeDevice, Mount, NodeInfo, WorkloadConfig
from accelkit.workload import validate_config

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
TEXT = st.text(max_size=8)
CONFIGS = st.builds(
    WorkloadConfig,
    env_vars=st.dictionaries(st.one_of(NAMES, TEXT), TEXT, max_size=4),
    resource_data=st.dictionaries(TEXT, TEXT, max_size=3),
    mounts=st.lists(
        st.builds(Mount, st.sampled_from(["/a", "rel", ""]), st.sampled_from(["/t", "/t/", "x"])),
        max_size=3,
    ),
    extra_gids=st.lists(st.integers(-2, 5), max_size=3),
    cpuset_cpus=st.none() | st.lists(st.integers(-1, 8), max_size=3),
    cpuset_mems=st.none() | st.lists(st.integers(-1, 2), max_size=2),
    cdi_devices=st.lists(st.sampled_from(["vendor.com/gpu=0", "gpu0", "a/b="]), max_size=2),
    memory_limit=st.none() | st.integers(-1, 10),
)


def runtime_accepts(config: WorkloadConfig) -> bool:
    try:
        validate_config("p", config)
    except WorkloadError:
        return False
    return True


@given(CONFIGS)
def test_the_kit_and_the_runtime_agree_on_every_config(config):
    assert runtime_accepts(config) == (config_problems(config) == [])


@given(NAMES, TEXT.filter(lambda v: not any(c in v for c in "\0\n\r")))
def test_posix_names_with_plain_values_pass_both(name, value):
    config = WorkloadConfig(env_vars={name: value})
    assert config_problems(config) == []
    assert runtime_accepts(config)


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (WorkloadConfig(env_vars={"A-B": "x"}), "'A-B' is not a valid name"),
        (WorkloadConfig(env_vars={"1X": "x"}), "'1X' is not a valid name"),
        (WorkloadConfig(env_vars={"A": "x\ny"}), "value with NUL or newline"),
        (WorkloadConfig(env_vars={"A": "x\0"}), "value with NUL or newline"),
        (WorkloadConfig(resource_data={"K=V": "x"}), "non-empty name without '='"),
        (WorkloadConfig(cpuset_cpus=()), "cpuset_cpus is empty"),
        (WorkloadConfig(cpuset_mems=()), "cpuset_mems is empty"),
        (
            WorkloadConfig(mounts=[Mount("/a", "/t"), Mount("/b", "/t/")]),
            "mount target '/t' appears twice",
        ),
        (WorkloadConfig(mounts=[Mount("dev/x", "/x")]), "source 'dev/x' is not an absolute path"),
    ],
)
def test_rules_both_sides_used_to_disagree_on(config, words):
    problems = config_problems(config)
    assert any(words in p for p in problems), problems
    with pytest.raises(WorkloadError, match="plugin 'p': "):
        validate_config("p", config)


def test_every_problem_is_named_at_once():
    config = WorkloadConfig(env_vars={"A-B": "x\n"}, memory_limit=0)
    with pytest.raises(WorkloadError) as info:
        validate_config("p", config)
    assert str(info.value).count(";") == 2


@given(st.dictionaries(NAMES, TEXT, max_size=4), st.lists(st.integers(0, 64), max_size=4))
def test_workload_configs_are_frozen_and_hashable(env, cpus):
    source = dict(env)
    config = WorkloadConfig(env_vars=source, cpuset_cpus=cpus, mounts=[Mount.device("/dev/x")])
    same = WorkloadConfig(
        env_vars=dict(env), cpuset_cpus=list(cpus), mounts=[Mount.device("/dev/x")]
    )
    assert config == same
    assert hash(config) == hash(same)
    assert {config, same} == {config}
    source["INJECTED"] = "1"  # the caller's dict is copied, never shared
    assert "INJECTED" not in config.env_vars
    with pytest.raises(TypeError):
        config.env_vars["X"] = "1"  # type: ignore[index]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.memory_limit = 1  # type: ignore[misc]
    assert json.loads(json.dumps(attrs.asdict(config)))["env_vars"] == env


@given(st.dictionaries(TEXT, TEXT, max_size=3))
def test_other_value_types_with_mappings_are_hashable(facts):
    info = NodeInfo("1", "2", facts)
    assert hash(info) == hash(NodeInfo("1", "2", dict(facts)))
    device = ComputeDevice("x", "0", "loc", None, 0, 1, extra=facts)
    assert hash(device) == hash(attrs.evolve(device))
    with pytest.raises(TypeError):
        device.extra["k"] = "v"  # type: ignore[index]
