"""A prepare syncs the ledger once, and its claim survives the driver killed right after.

Prepare syncs the ledger once (the booking is committed unsynced and made durable by the
``pre_create`` intent written after it): a driver process killed at once leaves the claim
booked, handed over to its ``k8s-claims`` handle, with its CDI spec; the next driver answers
the kubelet's retry from that booking and books nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelkit.bridge.dra.api import dra_v1_pb2 as pb
from accelkit.errors import AccelkitError
from accelkit.testing.cli_runner import cli_env
from accelkit.types import DeviceName, Workload
from accelkit.workload.ledger import Ledger

from .conftest import AGENT, claim, result, serving

TESTS = Path(__file__).resolve().parents[1]

CHILD = """\
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from dra.conftest import claim, result, serving
from accelkit.bridge.dra.api import dra_v1_pb2 as pb

async def main():
    async with serving(Path({config!r}), Path({root!r})) as served:
        served.claims.add(claim("one", "uid-1", [result("cuda1")]))
        ref = pb.Claim(namespace="default", name="one", uid="uid-1")
        request = pb.NodePrepareResourcesRequest(claims=[ref])
        answer = await served.stub.NodePrepareResources(request)
        print("answered:" + answer.claims["uid-1"].error, flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_claim_prepared_before_a_kill_stays_booked_and_is_answered_again(
    dra_node: Path, short_root: Path
) -> None:
    script = CHILD.format(tests=str(TESTS), config=str(dra_node), root=str(short_root))
    env = cli_env()
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    os.kill(child.pid, signal.SIGKILL)  # no cleanup of any kind
    child.wait(timeout=60)
    child.stdout.close()
    assert line == "answered:\n"

    async def main() -> tuple[Any, Any, bool, str]:
        async with serving(dra_node, short_root) as served:
            records = served.node.bookkeeper.ledger.scan().records
            [(key, record)] = records.items()
            spec = served.specs.exists("uid-1")
            served.claims.add(claim("one", "uid-1", [result("cuda1")]))
            ref = pb.Claim(namespace="default", name="one", uid="uid-1")
            again = await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref])
            )
            try:
                await served.node.bookkeeper.book_devices(
                    AGENT,
                    Workload.container("intruder"),
                    {DeviceName("cuda"): {"cuda.device": {"cuda1": 1}}},
                )
                refused = ""
            except AccelkitError as exc:
                refused = str(exc)
            return (key, record), again.claims["uid-1"], spec, refused

    (key, record), again, spec, refused = asyncio.run(main())
    assert key == (AGENT, "k8s-claim:default/one:uid-1")
    assert record.allocation == {DeviceName("cuda"): {"cuda.device": {"cuda1": 1}}}
    assert record.handle.runtime == "k8s-claims"
    assert record.owner is None  # handed over before the answer
    assert spec
    assert again.error == ""
    assert [d.device_name for d in again.devices] == ["cuda1"]
    assert "cuda1" in refused


def test_a_prepare_syncs_the_ledger_once(
    dra_node: Path, short_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits: list[bool] = []  # per outermost ledger transaction: whether it was synced
    level = Ledger._sync_level

    @contextlib.contextmanager
    def counted(self: Ledger, durable: bool) -> Iterator[None]:
        commits.append(durable)
        with level(self, durable):
            yield

    async def main() -> str:
        async with serving(dra_node, short_root) as served:
            served.claims.add(claim("one", "uid-1", [result("cuda1")]))
            ref = pb.Claim(namespace="default", name="one", uid="uid-1")
            monkeypatch.setattr(Ledger, "_sync_level", counted)
            answer = await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref])
            )
            monkeypatch.setattr(Ledger, "_sync_level", level)
            return str(answer.claims["uid-1"].error)

    assert asyncio.run(main()) == ""
    assert commits.count(True) == 1, commits
