"""``accelkit metrics`` and ``devices`` start with what they show: without a state directory
there is no ledger to read (no ledger module, no SQLite), and a table is drawn without
``rich``; JSON needs no Prometheus client."""

from __future__ import annotations

from pathlib import Path

import pytest

from .imported_modules import modules_of

#: what a table or JSON of a node with no ledger yet never needs
NOT_ON_THE_WAY = (
    "sqlite3",
    "accelkit.workload.ledger",
    "accelkit.workload.record",
    "rich",
    "prometheus_client",
)


@pytest.fixture(params=[("metrics",), ("metrics", "--json"), ("devices",), ("devices", "--json")])
def imported(request, mock_node) -> tuple[str, set[str]]:
    config: Path = mock_node(cpus=2, mem="4G", gpus=1)
    command, *options = request.param
    modules = modules_of(command, "--config", str(config), *options)
    assert not (config.parent / "state").exists()
    return command, modules


@pytest.mark.parametrize("module", NOT_ON_THE_WAY)
def test_a_command_without_a_ledger_does_not_import(imported, module):
    command, modules = imported
    assert f"accelkit.cli.{command}_cmd" in modules  # the listing is the command's
    assert module not in modules
