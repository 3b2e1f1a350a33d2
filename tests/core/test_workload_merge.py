"""Checking one hook's config, and merging several plugins' configs."""

from __future__ import annotations

import pytest

from accelkit.errors import HookConflict, WorkloadError
from accelkit.types import Mount, MountType, WorkloadConfig
from accelkit.workload import merge_configs, validate_config


def test_merge_unions_lists_and_keeps_equal_values_once():
    merged = merge_configs(
        [
            (
                "cuda",
                WorkloadConfig(
                    env_vars={"A": "1", "SAME": "x"},
                    mounts=[Mount.device("/dev/nvidia0"), Mount("/lib", "/lib")],
                    extra_gids=[44],
                    cdi_devices=["nvidia.com/gpu=0"],
                    networks=["n1"],
                    extra_syscalls=["perf_event_open"],
                    resource_data={"K": "v"},
                ),
            ),
            (
                "cpu",
                WorkloadConfig(
                    env_vars={"B": "2", "SAME": "x"},
                    cpuset_cpus=[3, 1],
                    cpuset_mems=[0],
                    mounts=[Mount("/lib", "/lib/")],
                    extra_gids=[44, 45],
                    networks=["n1", "n2"],
                ),
            ),
            ("mem", WorkloadConfig(memory_limit=1024, cpuset_mems=[1])),
        ]
    )
    assert merged.env_vars == {"A": "1", "SAME": "x", "B": "2"}
    assert [m.target for m in merged.mounts] == ["/dev/nvidia0", "/lib"]
    assert merged.extra_gids == (44, 45)
    assert merged.networks == ("n1", "n2")
    assert merged.cdi_devices == ("nvidia.com/gpu=0",)
    assert merged.extra_syscalls == ("perf_event_open",)
    assert merged.cpuset_cpus == (1, 3)
    assert merged.cpuset_mems == (0, 1)
    assert merged.memory_limit == 1024
    assert merged.resource_data == {"K": "v"}


def test_merge_of_nothing_is_empty():
    assert merge_configs([]) == WorkloadConfig()


@pytest.mark.parametrize(
    ("first", "second", "key"),
    [
        (WorkloadConfig(env_vars={"X": "1"}), WorkloadConfig(env_vars={"X": "2"}), "'X'"),
        (WorkloadConfig(resource_data={"R": "1"}), WorkloadConfig(resource_data={"R": "2"}), "'R'"),
        (
            WorkloadConfig(mounts=[Mount("/a", "/t")]),
            WorkloadConfig(mounts=[Mount("/b", "/t/")]),
            "'/t'",
        ),
        (
            WorkloadConfig(mounts=[Mount("/a", "/t")]),
            WorkloadConfig(mounts=[Mount("/a", "/t", read_only=True)]),
            "'/t'",
        ),
        (WorkloadConfig(memory_limit=1), WorkloadConfig(memory_limit=2), "'memory_limit'"),
    ],
)
def test_conflicts_name_both_plugins_and_the_key(first, second, key):
    with pytest.raises(HookConflict) as info:
        merge_configs([("cuda", first), ("rocm", second)])
    message = str(info.value)
    assert "'cuda'" in message
    assert "'rocm'" in message
    assert key in message


def test_a_valid_config_passes():
    validate_config(
        "cuda",
        WorkloadConfig(
            env_vars={"A": "x y"},
            mounts=[Mount.device("/dev/x")],
            extra_gids=[0],
            cpuset_cpus=[0],
            cdi_devices=["vendor.com/gpu=GPU-0:1"],
            memory_limit=1,
        ),
    )


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (WorkloadConfig(env_vars={"A\n": "x"}), "environment variable name"),
        (WorkloadConfig(env_vars={"A=B": "x"}), "environment variable name"),
        (WorkloadConfig(env_vars={"": "x"}), "environment variable name"),
        (WorkloadConfig(env_vars={"A": "x\0"}), "value with NUL"),
        (WorkloadConfig(env_vars={"A": "a\nb"}), "value with NUL"),
        (WorkloadConfig(resource_data={"K": "a\rb"}), "resource data"),
        (WorkloadConfig(mounts=[Mount("/x", "rel")]), "not an absolute path"),
        (WorkloadConfig(mounts=[Mount("", "/t")]), "malformed source"),
        (WorkloadConfig(mounts=[Mount("/x", "/t\n")]), "holds NUL or newline"),
        (WorkloadConfig(mounts=[Mount("/a", "/t"), Mount("/b", "/t/")]), "appears twice"),
        (WorkloadConfig(extra_gids=[-1]), "extra_gids"),
        (WorkloadConfig(cpuset_cpus=[-1]), "cpuset_cpus"),
        (WorkloadConfig(cpuset_cpus=()), "cpuset_cpus is empty"),
        (WorkloadConfig(cpuset_mems=[-2]), "cpuset_mems"),
        (WorkloadConfig(cdi_devices=["nvidia.com/gpu"]), "not a fully qualified name"),
        (WorkloadConfig(cdi_devices=["gpu=0"]), "not a fully qualified name"),
        (WorkloadConfig(networks=[""]), "networks"),
        (WorkloadConfig(extra_syscalls=["a\nb"]), "extra_syscalls"),
        (WorkloadConfig(memory_limit=0), "memory_limit"),
    ],
)
def test_invalid_configs_are_refused_naming_the_plugin(config, match):
    with pytest.raises(WorkloadError, match=match) as info:
        validate_config("cuda", config)
    assert "'cuda'" in str(info.value)


def test_something_other_than_a_config_is_refused():
    with pytest.raises(WorkloadError, match="must return a WorkloadConfig, not dict"):
        validate_config("cuda", {"env_vars": {}})  # type: ignore[arg-type]


def test_device_mount_type_is_kept_through_the_merge():
    merged = merge_configs([("cuda", WorkloadConfig(mounts=[Mount.device("/dev/x")]))])
    assert merged.mounts[0].type is MountType.DEVICE
