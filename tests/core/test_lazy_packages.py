"""``accelkit.metrics_export``, ``accelkit.node`` and ``accelkit.workload`` import their names
when first used.

Read-only commands (``accelkit plan``, ``accelkit devices``) use the health modules of
``accelkit.node`` and the state directory's checks of ``accelkit.workload``; importing the node,
the ledger and the runtimes with them cost a sixth of such a command's start. ``accelkit
metrics`` prints one snapshot: the HTTP server's aiohttp took longer than the rest of it.
"""

from __future__ import annotations

import importlib

import pytest

from ..distribution_probes import loaded_by_importing

LAZY = ["accelkit.metrics_export", "accelkit.node", "accelkit.workload"]


@pytest.mark.parametrize("package", LAZY)
def test_every_exported_name_resolves_and_others_are_attribute_errors(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        assert getattr(value, "__name__", name) == name  # a class or function of that name
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        _ = module.nothing_here
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)  # the star import resolves too
    assert set(module.__all__) <= set(namespace)


def test_the_health_view_of_plan_and_devices_imports_no_node_ledger_or_runtime():
    imports = "accelkit.node.health_view, accelkit.workload.state_dir"
    heavy = ["accelkit.node.node", "accelkit.workload.ledger", "accelkit.runtime.process"]
    assert loaded_by_importing(imports, heavy) == []


def test_the_metrics_command_imports_no_http_server_or_prometheus_client():
    """Both are for other outputs: the server for ``serve-metrics``, the client for
    ``--prometheus`` (imported when that output is asked for)."""
    imports = "accelkit.cli.metrics_cmd"
    assert loaded_by_importing(imports, ["aiohttp", "prometheus_client"]) == []


def test_the_config_package_imports_the_line_scanner_where_errors_are_placed():
    """A valid file has no error to place on its line: loading it imports no scanner."""
    from accelkit.config import with_lines
    from accelkit.config.lines import with_lines as scanner

    assert with_lines is scanner
    assert loaded_by_importing("accelkit.config", ["accelkit.config.lines"]) == []
