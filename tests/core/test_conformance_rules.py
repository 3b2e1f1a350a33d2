"""The rules the kit applies to hook configs and metrics, and the kit as a pytest plugin."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import attrs
import pytest

from accelkit.metrics import Measurement, MetricType, NodeMetric, ProcessMetric, WorkloadMetric
from accelkit.testing import (
    config_problems,
    node_metric_problems,
    process_metric_problems,
    workload_metric_problems,
)
from accelkit.types import Mount, WorkloadConfig

pytest_plugins = ["pytester"]


def tampered(instance: Any, **fields: Any) -> Any:
    """A copy of a frozen value with fields set past its validators, as a careless plugin might."""
    copy = attrs.evolve(instance)
    for name, value in fields.items():
        object.__setattr__(copy, name, value)
    return copy


GOOD = NodeMetric(
    "util", MetricType.GAUGE, "percent", Measurement(5, 100), {"npu0": Measurement(5)}
)


def test_a_valid_config_has_no_problems():
    config = WorkloadConfig(
        env_vars={"NPUS": "npu0"},
        resource_data={"NPU_IDS": "0"},
        mounts=[Mount.device("/dev/npu0")],
        cdi_devices=["acme.example/npu=npu0"],
        cpuset_cpus=(0, 1),
        memory_limit=1024,
    )
    assert config_problems(config) == []


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"a": 1}, "must return a WorkloadConfig, not dict"),
        (WorkloadConfig(env_vars={"1X": "a"}), "'1X' is not a valid name"),
        (tampered(WorkloadConfig(), env_vars={"X": 1}), "'X' must be a string, not int"),
        (WorkloadConfig(resource_data={"": "a"}), "non-empty name"),
        (WorkloadConfig(cdi_devices=["npu0"]), "'npu0' is not a fully qualified"),
        (
            WorkloadConfig(mounts=[Mount("dev/x", "/x")]),
            "mount source 'dev/x' is not an absolute path",
        ),
        (WorkloadConfig(mounts=[Mount("/x", "x")]), "mount target 'x' is not an absolute path"),
        (tampered(WorkloadConfig(), mounts=("/x",)), "must be Mount objects, got str"),
        (WorkloadConfig(cpuset_cpus=(-1,)), "cpuset_cpus must hold non-negative integers"),
        (
            tampered(WorkloadConfig(), cpuset_mems=(True,)),
            "cpuset_mems must hold non-negative integers",
        ),
        (
            tampered(WorkloadConfig(), extra_gids=("a",)),
            "extra_gids must hold non-negative integers",
        ),
        (WorkloadConfig(memory_limit=0), "memory_limit must be a positive number of bytes"),
    ],
)
def test_each_config_problem_is_a_sentence(config, problem):
    problems = config_problems(config)
    assert any(problem in p for p in problems), problems


def test_well_formed_metrics_have_no_problems():
    assert node_metric_problems([GOOD], {"npu0"}) == []
    workload = WorkloadMetric("used", "gauge", "bytes", "w1", Measurement(1))
    assert workload_metric_problems((workload,), "w1") == []
    process = ProcessMetric("used", "gauge", "bytes", 7, Measurement(1))
    assert process_metric_problems([process], 7) == []


def test_a_count_has_no_unit_and_is_well_formed():
    count = NodeMetric("workloads", MetricType.GAUGE, "", Measurement(2), {"npu0": Measurement(2)})
    assert node_metric_problems([count], {"npu0"}) == []
    assert any(
        "not in accelkit's unit table" in p
        for p in node_metric_problems([tampered(count, unit="things")], {"npu0"})
    )


@pytest.mark.parametrize(
    ("metrics", "problem"),
    [
        ("util", "must return a sequence"),
        (None, "must return a sequence (a list or tuple), not NoneType"),
        ([GOOD, GOOD], "'util' appears twice"),
        ([object()], "returned a object; it must return NodeMetrics"),
        ([tampered(GOOD, key="npu.util")], "'npu.util' must be lower-case"),
        ([tampered(GOOD, type="gauge")], "must have a MetricType"),
        ([tampered(GOOD, per_device={"npu7": Measurement(1)})], "'npu7', which is not one"),
        ([tampered(GOOD, node=5)], "(node) must be a Measurement, not int"),
        ([tampered(GOOD, node=tampered(Measurement(1), value=0.5))], "finite Decimal, got 0.5"),
        (
            [tampered(GOOD, node=tampered(Measurement(1), capacity=Decimal("NaN")))],
            "the capacity must be a finite Decimal",
        ),
    ],
)
def test_each_node_metric_problem_is_a_sentence(metrics, problem):
    problems = node_metric_problems(metrics, {"npu0"})
    assert any(problem in p for p in problems), problems


def test_workload_and_process_metric_problems_name_the_mismatch():
    workload = WorkloadMetric("used", "gauge", "bytes", "w2", Measurement(1))
    assert (
        "names workload 'w2', but it was gathered for 'w1'"
        in workload_metric_problems([workload], "w1")[0]
    )
    assert "must return a sequence" in workload_metric_problems(3, "w1")[0]
    process = ProcessMetric("used", "gauge", "bytes", 8, tampered(Measurement(1), value="1"))
    problems = process_metric_problems([process], 7)
    assert "names pid 8, not 7" in problems[0]
    assert "finite Decimal, got '1'" in problems[1]
    assert "must return a sequence" in process_metric_problems({}, 7)[0]


VENDOR_TESTS = """
import pytest
from collections.abc import Sequence
from accelkit.metrics import Measurement, MetricType, NodeMetric
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook
from accelkit.testing import PluginConformance
from accelkit.types import ComputeDevice, DeviceSlotInfo, SlotSpec, SlotType, WorkloadConfig


class Hook(AbstractLifecycleHook):
    async def pre_create(self):
        return WorkloadConfig(env_vars={"NPUS": ",".join(self.allocated_device_ids)})


class NPU(AbstractComputePlugin):
    key = "npu"
    api_version = "2.0"
    metric_key = "util"

    async def list_devices(self):
        return [ComputeDevice("npu", f"npu{i}", "pci", 0, 0, 1) for i in range(2)]

    def configurable_slots(self):
        return [SlotSpec("npu.device", SlotType.COUNT)]

    def device_slots(self, devices):
        return {d.device_id: DeviceSlotInfo("count", "npu.device", 1) for d in devices}

    def create_lifecycle_hook(self, workload, device_alloc, devices):
        return Hook(workload, device_alloc, devices=devices)

    async def gather_node_metrics(self, ctx):
        return [NodeMetric("util", MetricType.GAUGE, "percent", Measurement(1))] * 2


class TestNPU(PluginConformance):
    @pytest.fixture
    def plugin(self):
        return NPU({})
"""


def test_a_vendor_suite_runs_through_the_registered_pytest_plugin(pytester):
    pytester.makepyfile(test_vendor=VENDOR_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    # skipped: the registration check (not installed), and the health check while the plugin
    # API has no device_health()
    from accelkit.plugin import AbstractComputePlugin

    skipped = 1 + (not hasattr(AbstractComputePlugin, "device_health"))
    result.assert_outcomes(passed=len(_checks()) - 1 - skipped, failed=1, skipped=skipped)
    result.stdout.fnmatch_lines(
        [
            "*TestNPU.test_node_metrics_are_well_formed*",
            "*the first gather_node_metrics() returned malformed metrics:",
            "*metric key 'util' appears twice; keys must be unique within a plugin",
        ]
    )
    assert "accelkit/testing/" not in result.stdout.str()


def _checks() -> list[str]:
    from accelkit.testing import PluginConformance

    return [n for n in dir(PluginConformance) if n.startswith("test_")]
