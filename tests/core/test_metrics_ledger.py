"""`accelkit metrics` finds the workloads to measure in the allocation ledger."""

from __future__ import annotations

import asyncio
import subprocess
from decimal import Decimal

from accelkit.config import load_host_config
from accelkit.host import PartitionHost
from accelkit.metrics_export.gather import MetricsGatherer
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord, ProcessStamp


def test_workload_metrics_come_from_the_ledgers_live_records(tmp_path):
    (tmp_path / "host.toml").write_text(
        '[resource]\nreserved-cpu = 0\nreserved-mem = "0"\n'
        f'state-dir = "{tmp_path / "state"}"\n'
        '[plugins]\nallowed = ["cpu", "mem"]\n'
    )
    config = load_host_config(tmp_path / "host.toml")
    child = subprocess.Popen(["sleep", "60"])
    try:
        leader = ProcessStamp.of(child.pid)
        assert leader is not None
        workload = Workload.process_tree(f"pid:{child.pid}")
        cpu = DeviceName("cpu")
        allocation = {cpu: {SlotName("cpu"): {"0": Decimal(1)}}}
        record = LedgerRecord(
            AgentId("agent-1"), workload, allocation, (cpu,), owner=leader, leader=leader
        )
        Ledger(config.resource.state_dir).write(record)

        async def main():
            async with PartitionHost.open(config) as host:
                return await MetricsGatherer(host).gather()

        snapshot = asyncio.run(main())
    finally:
        child.kill()
        child.wait()
    found = {(s.device_name, s.metric.key, s.metric.workload_id) for s in snapshot.workloads}
    assert ("cpu", "cpu_used", workload.id) in found
    assert ("mem", "mem", workload.id) in found
    [rss] = [s.metric for s in snapshot.workloads if s.metric.key == "mem"]
    assert rss.value.value > 0


def test_a_node_without_a_ledger_measures_no_workloads(tmp_path):
    (tmp_path / "host.toml").write_text(
        f'[resource]\nstate-dir = "{tmp_path / "state"}"\n[plugins]\nallowed = ["mem"]\n'
    )
    config = load_host_config(tmp_path / "host.toml")

    async def main():
        async with PartitionHost.open(config) as host:
            return await MetricsGatherer(host).gather()

    snapshot = asyncio.run(main())
    assert snapshot.workloads == ()
    assert "mem" in snapshot.node


def test_an_unsafe_ledger_leaves_workloads_out_and_node_metrics_in(tmp_path):
    (tmp_path / "host.toml").write_text(
        f'[resource]\nstate-dir = "{tmp_path / "state"}"\n[plugins]\nallowed = ["mem"]\n'
    )
    config = load_host_config(tmp_path / "host.toml")
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "ledger.db").symlink_to(tmp_path / "elsewhere")

    async def main():
        async with PartitionHost.open(config) as host:
            return await MetricsGatherer(host).gather()

    snapshot = asyncio.run(main())
    assert snapshot.workloads == ()
    assert "mem" in snapshot.node
    assert not (tmp_path / "elsewhere").exists()
