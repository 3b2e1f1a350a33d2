"""The conformance suite a vendor subclasses, and the fixtures its checks share."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from accelkit.plugin import AbstractComputePlugin
from accelkit.testing.agent_setup import AgentSetup, copier, start_plugin
from accelkit.testing.contract_checks import ContractChecks
from accelkit.testing.health_checks import HealthChecks
from accelkit.testing.hook_checks import HookChecks
from accelkit.testing.kind_checks import SlotKindChecks
from accelkit.testing.mask_checks import MaskChecks
from accelkit.testing.metric_checks import MetricChecks
from accelkit.testing.registration_checks import RegistrationChecks
from accelkit.testing.workload_checks import WorkloadChecks


class PluginConformance(
    ContractChecks,
    MaskChecks,
    HookChecks,
    WorkloadChecks,
    MetricChecks,
    RegistrationChecks,
    HealthChecks,
    SlotKindChecks,
):
    """Subclass this and provide a ``plugin`` fixture returning a fresh, not started plugin.

    The checks start the plugin themselves and skip (never fail) when it is unavailable. Some
    checks build a second instance to prove hooks keep no state; by default it is a deep copy
    of ``plugin`` taken before it starts. Override ``plugin_factory`` when your plugin cannot be
    copied (it holds a library handle, a lock, ...).
    """

    @pytest.fixture
    def runner(self) -> Iterator[asyncio.Runner]:
        """One event loop for every call of a check, as an agent would use."""
        with asyncio.Runner() as runner:
            yield runner

    @pytest.fixture
    def plugin_factory(self, plugin: AbstractComputePlugin) -> Callable[[], AbstractComputePlugin]:
        """Builds new, not yet started instances configured like ``plugin``."""
        return copier(plugin)

    @pytest.fixture
    def started(
        self,
        plugin: AbstractComputePlugin,
        plugin_factory: Callable[[], AbstractComputePlugin],
        runner: asyncio.Runner,
    ) -> Iterator[AbstractComputePlugin]:
        """The plugin after ``init`` and discovery; the check is skipped when it is unavailable.

        ``plugin_factory`` is set up first, so its default copy is of the plugin not yet started.
        """
        start_plugin(runner, plugin)
        yield plugin
        runner.run(plugin.cleanup())

    @pytest.fixture
    def agent(self, started: AbstractComputePlugin, runner: asyncio.Runner) -> Iterator[AgentSetup]:
        """An agent given every other device of the plugin; its context is closed afterwards."""
        setup = AgentSetup.build(started)
        yield setup
        runner.run(setup.context.close())
