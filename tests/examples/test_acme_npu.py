"""The acme-npu example: small, installed through its entry point, and working end to end."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import tokenize
from pathlib import Path

import pytest
from acme_npu.plugin import AcmeNPUPlugin

from accelkit.cli.app import main
from accelkit.errors import PluginUnavailable
from accelkit.metrics import Measurement, MetricContext
from accelkit.types import DeviceId, Mount, Workload, WorkloadConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "docs" / "examples" / "acme-npu"
SOURCES = sorted((PACKAGE / "src" / "acme_npu").glob("*.py"))


def _load_fake_card():
    spec = importlib.util.spec_from_file_location(
        "acme_tests", PACKAGE / "tests" / "test_conformance.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fake_card


fake_card = _load_fake_card()


@pytest.fixture
def sysfs(tmp_path):
    root = tmp_path / "acme_npu"
    for card, numa in (("npu10", 1), ("npu2", 0), ("npu0", 0)):
        fake_card(root, card, numa_node=numa, busy={"npu0": 20, "npu2": 30, "npu10": 70}[card])
    return root


def started(sysfs):
    plugin = AcmeNPUPlugin({"sysfs-dir": str(sysfs)})
    asyncio.run(plugin.discover())
    return plugin


def code_lines(path: Path) -> int:
    """Lines holding code: no blank lines, comments, docstrings or imports."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            skipped.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.update(range(node.lineno, node.end_lineno + 1))
    lines = set()
    with path.open("rb") as source:
        for token in tokenize.tokenize(source.readline):
            if token.type not in (
                tokenize.COMMENT,
                tokenize.NL,
                tokenize.NEWLINE,
                tokenize.ENCODING,
            ):
                lines.add(token.start[0])
    return len(lines - skipped - {0})


def test_the_plugin_is_at_most_60_lines_of_code_and_6_methods():
    assert sum(code_lines(p) for p in SOURCES) <= 60
    methods = [
        item.name
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    assert len(methods) <= 6, methods


def test_cards_are_listed_in_natural_order_with_their_facts(sysfs):
    devices = started(sysfs).devices
    assert [d.device_id for d in devices] == ["npu0", "npu2", "npu10"]
    assert devices[2].numa_node == 1
    assert devices[2].hw_location == "0000:10:00.0"
    assert devices[0].memory_size == 16 * 1024**3
    assert devices[0].model_name == "Acme NPU 16G"


def test_without_the_driver_the_plugin_is_unavailable(tmp_path):
    plugin = AcmeNPUPlugin({"sysfs-dir": str(tmp_path / "absent")})
    with pytest.raises(PluginUnavailable, match="no Acme NPU driver"):
        asyncio.run(plugin.discover())


def test_the_hook_exposes_exactly_the_allocated_cards(sysfs):
    plugin = started(sysfs)
    alloc = {"npu.device": {DeviceId("npu2"): 1, DeviceId("npu10"): 1, DeviceId("npu0"): 0}}
    config = asyncio.run(plugin.create_lifecycle_hook(Workload("w"), alloc, {}).pre_create())
    assert config == WorkloadConfig(
        env_vars={"ACME_VISIBLE_NPUS": "npu2,npu10"},
        mounts=[Mount.device("/dev/acme_npu2"), Mount.device("/dev/acme_npu10")],
        cdi_devices=["acme.example/npu=npu2", "acme.example/npu=npu10"],
    )


def test_busy_is_read_per_card_and_averaged(sysfs):
    (metric,) = asyncio.run(started(sysfs).gather_node_metrics(MetricContext()))
    assert metric.key == "busy"
    assert metric.node == Measurement(40, 100)
    assert metric.per_device["npu10"] == Measurement(70, 100)


def test_the_installed_entry_point_serves_the_accelkit_command(sysfs, tmp_path, capsys):
    config = tmp_path / "host.toml"
    config.write_text(  # sysfs-dir is relative: it resolves against the config's directory
        '[plugins]\nallowed = ["npu"]\nstrict = true\n'
        f'[plugins.config.npu]\nsysfs-dir = "{sysfs.name}"\n'
    )
    assert main(["devices", "--config", str(config), "--json"]) == 0
    devices = json.loads(capsys.readouterr().out)
    assert [d["device_id"] for d in devices["npu"]] == ["npu0", "npu2", "npu10"]
