"""The accelkit conformance kit: a pytest plugin with a reusable suite for compute plugins.

A vendor subclasses :class:`PluginConformance` in its tests and provides a ``plugin`` fixture
that returns a fresh, not yet initialised instance of its plugin::

    from accelkit.testing import PluginConformance

    class TestMyPlugin(PluginConformance):
        @pytest.fixture
        def plugin(self):
            return MyPlugin({})

Every failure is one sentence naming the broken rule. Installing accelkit registers this module
with pytest (entry point ``pytest11``), so the suite needs no further set-up.
"""

from __future__ import annotations

from accelkit.testing.agent_setup import AgentSetup
from accelkit.testing.config_rules import config_problems
from accelkit.testing.metric_rules import (
    node_metric_problems,
    process_metric_problems,
    workload_metric_problems,
)
from accelkit.testing.reporting import pytest_runtest_makereport  # noqa: F401 - the kit's hook
from accelkit.testing.suite import PluginConformance

__all__ = [
    "AgentSetup",
    "PluginConformance",
    "config_problems",
    "node_metric_problems",
    "process_metric_problems",
    "workload_metric_problems",
]
