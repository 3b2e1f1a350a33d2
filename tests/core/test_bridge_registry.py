"""Bridges registered through the ``accelkit_bridges`` hook, built-ins included (DESIGN §18)."""

from __future__ import annotations

import types
from typing import Any

import click
import pytest

from accelkit import hookimpl
from accelkit.bridge import Bridge
from accelkit.cli import app, bridges
from accelkit.discovery import PluginLoader

BUILTIN = ["k8s-device-plugin", "dra-driver", "slurm"]


@click.command()
def hello() -> None:
    """Say hello."""
    click.echo("hello")


class Hello(Bridge):
    name = "hello"
    summary = "a test scheduler"

    @classmethod
    def command(cls) -> click.Command:
        return hello


def adding(*classes: Any) -> types.SimpleNamespace:
    @hookimpl
    def accelkit_bridges() -> Any:
        return list(classes)

    return types.SimpleNamespace(accelkit_bridges=accelkit_bridges)


def collect(*distributions: tuple[str, Any]) -> tuple[dict[str, Any], list[str]]:
    loader = PluginLoader()
    for name, module in distributions:
        loader.register(module, name)
    warnings: list[str] = []
    found = bridges.bridge_classes(loader.pm, reserved=app.COMMANDS, warn=warnings.append)
    return found, warnings


def test_the_built_ins_come_first_then_a_distributions():
    found, warnings = collect(("vendor", adding(Hello)))
    assert list(found) == [*BUILTIN, "hello"]
    assert found["hello"] is Hello
    assert warnings == []


def test_the_built_ins_are_found_without_any_distribution():
    assert list(bridges.builtin_bridges()) == BUILTIN
    for cls in bridges.builtin_bridges().values():
        assert isinstance(cls.command(), click.Command)
        assert cls.summary


class Nameless(Hello):
    name = ""


class Abstract(Bridge):
    name = "abstract"


class TakesRun(Hello):
    name = "run"


class TakesSlurm(Hello):
    name = "slurm"


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ([object], "plugin 'vendor' returned <class 'object'>, which is not a Bridge subclass"),
        ([Nameless], "bridge Nameless of plugin 'vendor' has no valid 'name' (got '')"),
        ([Abstract], "bridge 'abstract' of plugin 'vendor' does not implement command"),
        ([TakesRun], "bridge TakesRun of plugin 'vendor' takes the name 'run' of an accelkit"),
        (
            [TakesSlurm],
            "bridge name 'slurm' claimed by both SlurmBridge (plugin 'accelkit-bridges') and "
            "TakesSlurm (plugin 'vendor'); the first is kept",
        ),
    ],
)
def test_a_class_that_cannot_be_a_bridge_is_refused_and_named(returned, message):
    found, warnings = collect(("vendor", adding(*returned, Hello)))
    assert list(found) == [*BUILTIN, "hello"]
    assert found["slurm"] is bridges.SlurmBridge
    [warning] = warnings
    assert warning.startswith(message)


def test_a_hook_that_raises_leaves_only_its_distribution_out():
    @hookimpl
    def accelkit_bridges() -> Any:
        raise RuntimeError("boom")

    found, warnings = collect(
        ("broken", types.SimpleNamespace(accelkit_bridges=accelkit_bridges)),
        ("vendor", adding(Hello)),
    )
    assert list(found) == [*BUILTIN, "hello"]
    assert warnings == ["plugin 'broken' failed to register its bridges: RuntimeError: boom"]


class NotACommand(Hello):
    name = "not-a-command"

    @classmethod
    def command(cls) -> Any:
        return "echo hello"


def test_a_bridge_whose_command_is_no_click_command_is_an_internal_error(monkeypatch, capsys):
    monkeypatch.setattr(app.cli, "commands", dict(app.cli.commands))  # the group is global
    monkeypatch.setattr(
        bridges, "registered_bridges", lambda **_: {"not-a-command": NotACommand, "hello": Hello}
    )
    assert app.main(["not-a-command"]) == app.EXIT_ERROR
    err = capsys.readouterr().err
    assert "bridge 'not-a-command' (NotACommand) is not a click command ('echo hello')" in err
    assert app.main(["hello"]) == 0
    assert capsys.readouterr().out == "hello\n"
