"""Checks of hooks across workload types: valid configs, device isolation, repeatable teardown."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator

import pytest

from accelkit.errors import WorkloadError
from accelkit.plugin import AbstractComputePlugin
from accelkit.testing.agent_setup import AgentSetup
from accelkit.testing.expectations import fail_rule
from accelkit.testing.hook_checks import allocate_smallest, fresh_agent
from accelkit.types import ComputeDevice, DeviceAllocation, MountType, Workload, WorkloadConfig
from accelkit.workload.validate import validate_config

#: one workload of each type, as the process and container runtimes create them
WORKLOADS = (Workload.process_tree("conformance-tree"), Workload.container("conformance-ctr"))


def granted(alloc: DeviceAllocation) -> frozenset[str]:
    """The device ids an allocation grants more than zero of."""
    return frozenset(d for per in alloc.values() for d, amount in per.items() if amount > 0)


def _run_pre_create(
    runner: asyncio.Runner, agent: AgentSetup, workload: Workload, alloc: DeviceAllocation
) -> WorkloadConfig:
    rule = "hooks serve both workload types"
    try:
        return runner.run(agent.context.create_lifecycle_hook(workload, alloc).pre_create())
    except Exception as exc:
        fail_rule(
            agent.plugin,
            rule,
            f"pre_create() for a {workload.type} workload raised {exc!r}",
            "build the config from (workload, device_alloc) for both WorkloadType.PROCESS_TREE "
            "and WorkloadType.CONTAINER; deny with WorkloadCreationDenied only on purpose",
        )


def _texts(config: WorkloadConfig) -> Iterator[tuple[str, str]]:
    """Every place a hook can name a device in, with the text it holds."""
    for name, value in config.env_vars.items():
        yield f"environment variable {name}", value
    for name, value in config.resource_data.items():
        yield f"resource data {name}", value
    for mount in config.mounts:
        yield f"mount {mount.target}", f"{mount.source} {mount.target}"
    for name in config.cdi_devices:
        yield "CDI device", name


def _names_of(device: ComputeDevice) -> Iterator[str]:
    """How a config can name a device: its id (unless a bare number), uuid and location.

    A bare number such as a core id cannot be told apart from a thread count in text; core ids
    are checked in ``cpuset_cpus`` instead.
    """
    if not device.device_id.isdigit():
        yield device.device_id
    if device.uuid:
        yield device.uuid
    if device.hw_location and not device.hw_location.isdigit():
        yield device.hw_location


def exposure_problems(config: WorkloadConfig, others: list[ComputeDevice]) -> list[str]:
    """Where ``config`` names a device of ``others`` (devices the hook was not given)."""
    problems = []
    texts = list(_texts(config))
    for device in others:
        for name in _names_of(device):
            pattern = re.compile(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])")
            problems += [
                f"{where} names device {device.device_id!r} ({name!r})"
                for where, text in texts
                if pattern.search(text)
            ]
        if device.device_id.isdigit() and int(device.device_id) in (config.cpuset_cpus or ()):
            problems.append(f"cpuset_cpus holds core {device.device_id}")
    return problems


class WorkloadChecks:
    """Hooks serve containers and process trees alike, expose only their devices, and can be
    torn down more than once."""

    def test_hooks_serve_both_workload_types(
        self, agent: AgentSetup, runner: asyncio.Runner
    ) -> None:
        alloc = allocate_smallest(agent)
        for workload in WORKLOADS:
            config = _run_pre_create(runner, agent, workload, alloc)
            try:
                validate_config(agent.plugin.key, config)
            except WorkloadError as exc:
                fail_rule(
                    agent.plugin,
                    "hooks return configs the runtimes accept",
                    f"pre_create() for a {workload.type} workload returned a config the "
                    f"runtime refuses: {exc}",
                    "environment names and values, resource data, mounts and CDI names must "
                    "hold no NUL or newline; mount targets must be absolute and distinct",
                )

    def test_env_values_hold_no_newline_or_nul(
        self, agent: AgentSetup, runner: asyncio.Runner
    ) -> None:
        alloc = allocate_smallest(agent)
        for workload in WORKLOADS:
            config = _run_pre_create(runner, agent, workload, alloc)
            try:
                validate_config(agent.plugin.key, WorkloadConfig(env_vars=config.env_vars))
            except WorkloadError as exc:
                fail_rule(
                    agent.plugin,
                    "environment values hold no newline or NUL",
                    f"pre_create() for a {workload.type} workload: {exc}",
                    "an environment block is NUL-separated and env files are line-based: "
                    "join lists with ',' and drop control characters from values",
                )

    def test_hook_exposes_only_the_devices_it_was_given(
        self, agent: AgentSetup, runner: asyncio.Runner
    ) -> None:
        alloc = allocate_smallest(agent)
        given = granted(alloc)
        others = [d for d in agent.plugin.devices if d.device_id not in given]
        if not others:
            pytest.skip("this check needs a device the hook was not given")
        for workload in WORKLOADS:
            config = _run_pre_create(runner, agent, workload, alloc)
            if problems := exposure_problems(config, others):
                fail_rule(
                    agent.plugin,
                    "a hook exposes only the devices it was given",
                    f"the hook of a {workload.type} workload given {sorted(given)} exposes "
                    f"other devices: {'; '.join(problems)}",
                    "build env vars, device nodes, CDI names and resource data from the "
                    "hook's allocated_device_ids (or its device_alloc) only",
                )
            for mount in config.mounts:
                if mount.type is MountType.DEVICE and not mount.source.startswith("/dev/"):
                    fail_rule(
                        agent.plugin,
                        "a hook exposes only the devices it was given",
                        f"device mount {mount.source!r} is not a device node under /dev",
                        "expose device nodes with Mount.device('/dev/...')",
                    )

    def test_post_terminate_is_idempotent(
        self,
        agent: AgentSetup,
        runner: asyncio.Runner,
        plugin_factory: Callable[[], AbstractComputePlugin],
    ) -> None:
        alloc = allocate_smallest(agent)
        for workload in WORKLOADS:
            hook = agent.context.create_lifecycle_hook(workload, alloc)
            runner.run(hook.pre_create())
            runner.run(hook.post_create())
            runner.run(hook.pre_terminate())
            calls = [("once", hook), ("twice", hook)]
            restarted = fresh_agent(runner, plugin_factory, agent)
            try:
                calls.append(
                    (
                        "again on a hook rebuilt after a crash",
                        restarted.context.create_lifecycle_hook(workload, alloc),
                    )
                )
                for when, target in calls:
                    try:
                        runner.run(target.post_terminate())
                    except Exception as exc:
                        fail_rule(
                            agent.plugin,
                            "post_terminate is idempotent",
                            f"post_terminate() of a {workload.type} workload called {when} "
                            f"raised {exc!r}",
                            "after a crash accelkit calls post_terminate again: treat what is "
                            "already released (a file removed, a limit reset) as done",
                        )
            finally:
                runner.run(restarted.plugin.cleanup())
