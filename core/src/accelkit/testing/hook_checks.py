"""Checks that lifecycle hooks return valid configs and keep no state of their own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from accelkit.errors import ResourceError
from accelkit.plugin import AbstractComputePlugin
from accelkit.testing.agent_setup import AGENT, AgentSetup, expect_started_again, partition_of
from accelkit.testing.config_rules import config_problems
from accelkit.testing.expectations import expect, expect_none
from accelkit.types import DeviceAllocation, Workload, WorkloadConfig

WORKLOAD = Workload.process_tree("conformance")


def allocate_smallest(agent: AgentSetup) -> DeviceAllocation:
    """One unit of the first slot the agent offers, from its own alloc map."""
    requests = agent.smallest_requests()
    if not requests:
        pytest.skip("the agent's devices have no capacity to allocate")
    slot, amount = next(iter(sorted(requests.items())))
    try:
        return agent.context.create_alloc_map().allocate({slot: amount})
    except ResourceError as exc:
        msg = (
            f"the agent's alloc map refused {amount} of {slot!r} although the agent's devices "
            f"offer {agent.context.available_slots().get(slot)}: {exc}"
        )
        expect(False, msg)
        raise  # unreachable: expect() failed the check


def pre_create(
    runner: asyncio.Runner, agent: AgentSetup, alloc: DeviceAllocation
) -> WorkloadConfig:
    """Build a hook through the agent's context and run its ``pre_create``."""
    hook = agent.context.create_lifecycle_hook(WORKLOAD, alloc)
    return runner.run(hook.pre_create())


def fresh_agent(
    runner: asyncio.Runner, factory: Callable[[], AbstractComputePlugin], agent: AgentSetup
) -> AgentSetup:
    """The same agent on a second plugin instance, as after a restart of the agent."""
    fresh = factory()
    expect(
        fresh is not agent.plugin,
        "plugin_factory must build a new plugin instance each time it is called",
    )
    expect_started_again(runner, fresh)
    by_id = {d.device_id: d for d in fresh.devices}
    inside = tuple(by_id[d.device_id] for d in agent.inside if d.device_id in by_id)
    expect(
        len(inside) == len(agent.inside),
        "a second instance built from the same configuration found different devices",
    )
    context = fresh.create_agent_context(AGENT, partition_of(fresh, inside))
    return AgentSetup(fresh, context, inside, agent.outside)


class HookChecks:
    """Hooks return valid configs, the same for the same input, across a fresh plugin."""

    def test_hook_returns_a_valid_config(self, agent: AgentSetup, runner: asyncio.Runner) -> None:
        config = pre_create(runner, agent, allocate_smallest(agent))
        expect_none(config_problems(config), "pre_create() returned an invalid WorkloadConfig")

    def test_hook_is_deterministic_across_a_fresh_plugin_instance(
        self,
        agent: AgentSetup,
        runner: asyncio.Runner,
        plugin_factory: Callable[[], AbstractComputePlugin],
    ) -> None:
        alloc = allocate_smallest(agent)
        first = pre_create(runner, agent, alloc)
        again = pre_create(runner, agent, alloc)
        expect(
            first == again,
            "two hooks for the same (workload, device_alloc) returned different configs:\n"
            f"  {first}\n  {again}",
        )
        restarted = fresh_agent(runner, plugin_factory, agent)
        try:
            after = pre_create(runner, restarted, alloc)
        finally:
            runner.run(restarted.plugin.cleanup())
        expect(
            first == after,
            "a hook built by a fresh plugin instance for the same (workload, device_alloc) "
            "returned a different config; hooks must rebuild everything from their input:\n"
            f"  first instance: {first}\n  fresh instance: {after}",
        )

    def test_hook_survives_a_restart_between_phases(
        self,
        agent: AgentSetup,
        runner: asyncio.Runner,
        plugin_factory: Callable[[], AbstractComputePlugin],
    ) -> None:
        alloc = allocate_smallest(agent)
        pre_create(runner, agent, alloc)
        restarted = fresh_agent(runner, plugin_factory, agent)
        try:
            hook = restarted.context.create_lifecycle_hook(WORKLOAD, alloc)
            for phase in ("post_create", "pre_terminate", "post_terminate"):
                try:
                    runner.run(getattr(hook, phase)())
                except Exception as exc:
                    msg = (
                        f"{phase}() of a hook rebuilt after a restart raised {exc!r}; a hook "
                        "must need nothing but (workload, device_alloc)"
                    )
                    expect(False, msg)
        finally:
            runner.run(restarted.plugin.cleanup())
