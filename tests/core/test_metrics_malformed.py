"""A plugin whose metrics are malformed is that plugin's scrape error, never the command's."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any, ClassVar

import attrs
import pytest
from click.testing import CliRunner

from accelkit import hookimpl
from accelkit.cli.metrics_cmd import metrics_table, prometheus_text
from accelkit.config import HostConfig
from accelkit.discovery import PluginLoader
from accelkit.host import PartitionHost
from accelkit.metrics import Measurement, MetricContext, MetricType, NodeMetric, WorkloadMetric
from accelkit.metrics_export import MetricsGatherer, MetricsSnapshot
from accelkit.metrics_export.gather import checked
from accelkit.plugin import MaskedAgentContext
from accelkit.selection import PluginSelection
from accelkit.types import AgentId, DeviceName, Workload

from .one_device_plugin import OneDevicePlugin

GOOD = NodeMetric("answered", MetricType.GAUGE, "", Measurement(Decimal(1)))


class Context(MaskedAgentContext):
    async def gather_workload_metrics(self, ctx: MetricContext, workload: Workload) -> Any:
        return getattr(self.plugin, "workload_answer", ())


class Plugin(OneDevicePlugin):
    key: ClassVar[DeviceName] = DeviceName("good")
    api_version: ClassVar[str] = "2.0"
    agent_context_class = Context
    answer: ClassVar[Any] = (GOOD,)
    workload_answer: ClassVar[Any] = ()

    async def gather_node_metrics(self, ctx: MetricContext) -> Any:
        return self.answer


def gather(answer: Any = (GOOD,), workload_answer: Any = ()) -> MetricsSnapshot:
    bad = type("BadPlugin", (Plugin,), {"key": "bad", "answer": answer})
    bad.workload_answer = workload_answer
    loader = PluginLoader(PluginSelection())
    for cls in (Plugin, bad):

        class Distribution:
            @hookimpl
            def accelkit_compute_plugins(self, config: Any, cls: Any = cls) -> Any:
                return [cls(config)]

        loader.register(Distribution(), cls.key)
    loader.build()
    config = attrs.evolve(HostConfig(), plugins=attrs.evolve(HostConfig().plugins))
    workloads = {AgentId("agent-1"): [Workload.process_tree("w")]}

    async def main() -> MetricsSnapshot:
        async with PartitionHost.open(config, loader=loader) as host:
            return await MetricsGatherer(host, workloads).gather()

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ("answered 1", "gather_node_metrics returned str, not a sequence of NodeMetric"),
        (b"answered", "gather_node_metrics returned bytes, not a sequence of NodeMetric"),
        (None, "gather_node_metrics returned NoneType, not a sequence of NodeMetric"),
        (42, "gather_node_metrics returned int, not a sequence of NodeMetric"),
        ({"answered": 1}, "gather_node_metrics returned dict, not a sequence of NodeMetric"),
        (["answered"], "gather_node_metrics returned a str among its NodeMetrics"),
        (
            [NodeMetric("answered", MetricType.GAUGE, "", "1")],  # type: ignore[arg-type]
            "gather_node_metrics returned metric 'answered' with a reading of str, "
            "not a Measurement",
        ),
        (
            [NodeMetric("answered", MetricType.GAUGE, "", Measurement(1), {"bad0": 1})],  # type: ignore[dict-item]
            "gather_node_metrics returned metric 'answered' with a reading of int, "
            "not a Measurement",
        ),
    ],
)
def test_malformed_node_metrics_are_the_plugins_scrape_error(answer, said):
    snapshot = gather(answer)
    assert snapshot.node == {"good": (GOOD,)}
    assert snapshot.errors == {"bad": f"PluginContractError: {said}"}
    # every output renders, naming the plugin
    assert 'accelkit_plugin_scrape_error{plugin="bad"} 1.0' in prometheus_text(snapshot)
    assert snapshot.as_json()["errors"] == {"bad": f"PluginContractError: {said}"}
    metrics_table(snapshot)


def test_malformed_workload_metrics_leave_the_node_metrics_and_name_the_plugin():
    snapshot = gather(workload_answer="w 1")
    assert snapshot.node == {"good": (GOOD,), "bad": (GOOD,)}
    assert snapshot.errors == {
        "bad": "PluginContractError: gather_workload_metrics returned str, "
        "not a sequence of WorkloadMetric"
    }


def test_well_formed_metrics_pass_the_check():
    metric = WorkloadMetric("used", MetricType.GAUGE, "", "w", Measurement(Decimal(2)))
    assert checked("m", WorkloadMetric, [metric]) == (metric,)
    assert checked("m", NodeMetric, iter([GOOD])) == (GOOD,)
    assert checked("m", NodeMetric, ()) == ()


def test_the_metrics_command_shows_the_malformed_plugin_and_exits_0(mock_node, monkeypatch):
    from accelkit.cli.app import cli
    from accelkit_mock.plugin import MockPlugin

    async def answer(self: Any, ctx: MetricContext) -> Any:
        return "utilisation 1" if self.key == "cuda" else ()

    monkeypatch.setattr(MockPlugin, "gather_node_metrics", answer)
    result = CliRunner().invoke(cli, ["metrics", "--config", str(mock_node(gpus=1)), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert "gather_node_metrics returned str" in data["errors"]["cuda"]
    assert "cuda" not in data["node"]
    assert set(data["errors"]) == {"cuda"}  # the other plugins answered
