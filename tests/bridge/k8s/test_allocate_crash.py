"""An ``Allocate`` leaves no moment where its booking is written without the hook's intent.

The bridge used to commit the booking first and the intent of ``pre_create`` in a second
write: a bridge killed between the two left a booking whose hook's call was not recorded.
Here a real ``accelkit k8s-device-plugin`` process is stopped at its first commit that holds
the pod's booking and killed there (SIGKILL): that commit already records the intent, synced,
so whichever process finds the pod gone gives the hook ``post_terminate`` and frees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from accelkit.events import WorkloadPhase
from accelkit.testing.cli_runner import cli_env
from accelkit.types import DeviceName
from accelkit.workload.ledger import Ledger
from accelkit.workload.record import LedgerRecord

from .bridge_process import ACCELKIT, write_node
from .kubelet_standin import KubeletStandIn

pytestmark = pytest.mark.slow  # real accelkit processes

GPU = "accelkit.io/cuda.device"

#: the bridge, stopped after its first commit that holds a pod's booking (said on stderr)
STOPPED_AT_BOOKING = """\
import contextlib, sys, time
from accelkit.workload.ledger import Ledger

plain = Ledger.transaction
looking = []

@contextlib.contextmanager
def watched(self, *, durable=True):
    with plain(self, durable=durable):
        yield self
    if self.in_transaction or looking:
        return
    looking.append(True)  # scan() may take the lock too
    booked = any(w.startswith("k8s:") for _a, w in self.scan().records)
    looking.clear()
    if booked:
        print(f"booked durable={durable}", file=sys.stderr, flush=True)
        time.sleep(600)

Ledger.transaction = watched
from accelkit.cli.app import run
run()
"""


def test_a_bridge_killed_at_its_booking_has_recorded_the_hooks_intent(k8s_root: Path) -> None:
    config = write_node(k8s_root, grace="0.2")

    async def scenario() -> tuple[str, int, LedgerRecord, list[str]]:
        kubelet = KubeletStandIn(
            k8s_root / "device-plugins", k8s_root / "pod-resources" / "kubelet.sock"
        )
        await kubelet.start()
        child = subprocess.Popen(
            [*ACCELKIT[:2], STOPPED_AT_BOOKING, "k8s-device-plugin", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        try:
            gpu = await kubelet.wait_registered(GPU)
            allocating = asyncio.create_task(gpu.allocate(["cuda1"]))
            assert child.stderr is not None
            line = ""
            while not line.startswith("booked"):
                line = await asyncio.to_thread(child.stderr.readline)
                assert line, "the bridge ended before it booked"
            os.kill(child.pid, signal.SIGKILL)  # no cleanup of any kind
            await asyncio.to_thread(child.wait, 60)
            with contextlib.suppress(grpc.aio.AioRpcError):
                await allocating  # never answered
            ledger = Ledger(k8s_root / "state")
            try:
                [record] = ledger.scan().records.values()
            finally:
                ledger.close()
            # no pod lists cuda1: another accelkit process finishes the booking and frees it
            left = await asyncio.to_thread(workloads_until_none, config)
            return line.strip(), child.pid, record, left
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            if child.stderr is not None:
                child.stderr.close()
            await kubelet.close()

    line, pid, record, left = asyncio.run(scenario())
    assert line == "booked durable=True"  # the booking's one write is synced
    assert record.workload.id == f"k8s:{GPU}:cuda1"
    assert record.handle is not None
    assert record.handle.runtime == "kubelet-pods"
    assert record.owner is not None
    assert record.owner.pid == pid
    assert record.was_started(DeviceName("cuda"), WorkloadPhase.PRE_CREATE)
    assert left == []


def workloads_until_none(config: Path, timeout: float = 60.0) -> list[str]:
    """``accelkit status`` until it lists no workload (the admission grace has to pass)."""
    deadline = time.monotonic() + timeout
    while True:
        status = subprocess.run(
            [*ACCELKIT, "status", "--json", "--config", str(config)],
            capture_output=True,
            text=True,
            env=cli_env(),
            timeout=120,
            check=False,
        )
        assert status.returncode == 0, status.stderr
        found = [row["workload"] for row in json.loads(status.stdout)]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)
