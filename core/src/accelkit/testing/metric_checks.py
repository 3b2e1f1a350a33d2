"""Checks that gathered metrics are well formed."""

from __future__ import annotations

import asyncio
import os

from accelkit.metrics import MetricContext
from accelkit.plugin import AbstractComputePlugin
from accelkit.testing.agent_setup import AgentSetup
from accelkit.testing.expectations import expect_none
from accelkit.testing.metric_rules import (
    node_metric_problems,
    process_metric_problems,
    workload_metric_problems,
)
from accelkit.types import Workload


class MetricChecks:
    """Node, workload and process metrics have unique, dot-free keys and Decimal readings."""

    def test_node_metrics_are_well_formed(
        self, started: AbstractComputePlugin, runner: asyncio.Runner
    ) -> None:
        ids = {d.device_id for d in started.devices}
        ctx = MetricContext()
        for gather in ("first", "second"):  # rates appear from the second gather on
            metrics = runner.run(started.gather_node_metrics(ctx))
            intro = f"the {gather} gather_node_metrics() returned malformed metrics"
            expect_none(node_metric_problems(metrics, ids), intro)
            ctx = ctx.advance()

    def test_workload_and_process_metrics_are_well_formed(
        self, agent: AgentSetup, runner: asyncio.Runner
    ) -> None:
        pid = os.getpid()
        workload = Workload.process_tree(f"pid:{pid}")
        ctx = MetricContext()
        workload_metrics = runner.run(agent.context.gather_workload_metrics(ctx, workload))
        expect_none(
            workload_metric_problems(workload_metrics, workload.id),
            "gather_workload_metrics() returned malformed metrics",
        )
        process_metrics = runner.run(agent.context.gather_process_metrics(ctx, pid))
        expect_none(
            process_metric_problems(process_metrics, pid),
            "gather_process_metrics() returned malformed metrics",
        )
