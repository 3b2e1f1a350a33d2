"""How a workload's GPU share is held, as ``accelkit status`` shows it: the cuda plugin says so in
its ``pre_create`` resource data, the ledger keeps it with the workload's record, and status reads
it back (JSON: ``resource_data``; table: ``cuda:cuda0:0.5(mps)``), in another process too."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.cli.status_cmd import _devices
from accelkit.node import Node
from accelkit.plugin import PluginRole
from accelkit.types import AgentId, SlotName, Workload, WorkloadType

from . import fake_nvml as fk
from .test_mps import FAKE
from .test_node_health import node_over

AGENT = AgentId("agent-1")
HALF = {SlotName("cuda.shares"): Decimal("0.5")}
ROLES = {"cuda": PluginRole.ACCELERATOR}


@pytest.fixture
def mps_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("FAKE_MPS_RECORD", str(tmp_path / "mps-record"))
    root = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp"))  # short enough for the sockets
    yield root
    for pidfile in root.glob("*/pipe/nvidia-cuda-mps-control.pid"):  # the stand-in daemons
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)


def _node(tmp_path: Path, sysfs: Path, mps: Path, control: Path) -> Node:
    shares = f'allocation = "fractional"\nmps-control = "{control}"\nmps-directory = "{mps}"\n'
    return node_over(tmp_path, fk.FakeNVML(fk.gpus(1)), sysfs, shares)


async def _prepare_share(node: Node, name: str) -> None:
    record = await node.book(AGENT, Workload(name, WorkloadType.PROCESS_TREE), HALF)
    lifecycle = node.lifecycle(record)
    await lifecycle.prepare()
    await lifecycle.post_create()


@pytest.mark.parametrize(
    ("control", "shown", "held"),
    [(FAKE, "enforced:mps", "(mps)"), (None, "advisory", "(advisory)")],
)
def test_status_shows_how_each_share_is_held(tmp_path, sysfs, mps_root, control, shown, held):
    control = control or tmp_path / "no-such-mps-control"

    async def main() -> None:
        async with _node(tmp_path, sysfs, mps_root, control) as node:
            await _prepare_share(node, "pid:share-1")
        # another process (a fresh node over the same ledger) reads what this one recorded
        async with _node(tmp_path, sysfs, mps_root, control) as other:
            (status,) = await other.status()
            row = status.to_json()
            assert row["resource_data"]["cuda"]["CUDA_SHARE_ENFORCEMENT"] == shown
            assert _devices(row, ROLES) == f"cuda:cuda0:0.5{held}"
        # the record stays in tmp_path: releasing it would stop its owner, this test process

    asyncio.run(main())


def test_whole_devices_and_plugins_that_say_nothing_show_no_enforcement():
    row = {"amounts": {"cuda": {"cuda0": "1"}, "x": {"d0": "0.5"}}, "resource_data": {"x": {}}}
    assert _devices(row, {**ROLES, "x": PluginRole.ACCELERATOR}) == "cuda:cuda0 x:d0:0.5"
