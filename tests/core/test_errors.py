from __future__ import annotations

import copy
from collections.abc import Callable
from decimal import Decimal

import pytest

from accelkit.errors import (
    AccelkitError,
    ConfigError,
    ConfigErrors,
    FractionalResourceFragmented,
    HookConflict,
    InsufficientResource,
    InvalidResourceArgument,
    InvalidResourceCombination,
    NotMultipleOfQuantum,
    PluginContractError,
    PluginError,
    PluginLoadError,
    PluginUnavailable,
    ResourceError,
    WorkloadCreationDeferred,
    WorkloadCreationDenied,
    WorkloadError,
)


@pytest.mark.parametrize(
    ("error", "parent"),
    [
        (ConfigError, AccelkitError),
        (PluginUnavailable, PluginError),
        (PluginLoadError, PluginError),
        (PluginContractError, PluginError),
        (InsufficientResource, ResourceError),
        (InvalidResourceArgument, ResourceError),
        (NotMultipleOfQuantum, ResourceError),
        (InvalidResourceCombination, ResourceError),
        (FractionalResourceFragmented, ResourceError),
        (WorkloadCreationDenied, WorkloadError),
        (WorkloadCreationDeferred, WorkloadError),
        (HookConflict, WorkloadError),
        (PluginError, AccelkitError),
        (ResourceError, AccelkitError),
        (WorkloadError, AccelkitError),
    ],
)
def test_the_hierarchy_of_design_section_5(error, parent):
    assert issubclass(error, parent)


def test_insufficient_resource_renders_its_message_when_read():
    error = InsufficientResource(
        slot="mem",
        requested=Decimal("5368709120"),
        allocatable=Decimal("5.36870912E+9"),
        context_tag="agent-1",
    )
    text = "[agent-1] slot 'mem': requested 5368709120, only 5368709120 allocatable"
    assert str(error) == text
    assert repr(error) == f"InsufficientResource({text!r})"
    assert (error.slot, error.requested) == ("mem", Decimal("5368709120"))


def test_insufficient_resource_keeps_a_given_message():
    error = InsufficientResource("custom", slot="cpu", requested=Decimal(2), allocatable=Decimal(1))
    assert str(error) == "custom"
    assert error.args == ("cpu", Decimal(2), Decimal(1), None)
    assert (error.slot, error.requested, error.allocatable, error.context_tag) == error.args


def test_config_error_names_file_agent_and_key():
    error = ConfigError("bad", file="/etc/h.toml", key="agents[0].resource.cpu", agent="a")
    assert str(error) == "/etc/h.toml: agent 'a': key 'agents[0].resource.cpu': bad"
    assert str(ConfigError("plain")) == "plain"


def test_config_errors_lists_every_problem():
    errors = ConfigErrors([ConfigError("one", key="a"), ConfigError("two", key="b")])
    assert str(errors).splitlines() == [
        "2 problem(s) in the configuration:",
        "  - key 'a': one",
        "  - key 'b': two",
    ]
    assert isinstance(errors, ConfigError)


@pytest.mark.parametrize("message", [None, "custom"])
@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy])
def test_insufficient_resource_can_be_copied(
    message: str | None, duplicate: Callable[[InsufficientResource], InsufficientResource]
) -> None:
    error = InsufficientResource(
        message, slot="cpu", requested=Decimal(2), allocatable=Decimal(1), context_tag="a"
    )
    twin = duplicate(error)
    assert type(twin) is InsufficientResource
    assert twin is not error
    assert twin.args == error.args == ("cpu", Decimal(2), Decimal(1), "a")
    assert str(twin) == str(error) == (message or "[a] slot 'cpu': requested 2, only 1 allocatable")
