"""A prepare syncs the ledger once, and its claim survives the driver killed right after.

Prepare writes the ledger once on its way to the answer (the booking with the ``pre_create``
intent, synced); the hand-over follows the answer. A driver process killed after answering
and before that write leaves the claim booked under its dead process, with its CDI spec: the
next driver judges it through its ``k8s-claims`` handle (not as another process's), answers
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
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from accelkit.bridge.dra.api import dra_v1_pb2 as pb
from accelkit.errors import AccelkitError
from accelkit.events import WorkloadPhase
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.testing.cli_runner import cli_env
from accelkit.types import DeviceName, Workload
from accelkit.workload.ledger import Ledger
from accelkit.workload.liveness import Liveness

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
        served.preparer.hand_overs.delay = 600  # killed before the hand-over is written
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

    async def main() -> tuple[Any, Any, bool, str, Liveness]:
        async with serving(dra_node, short_root) as served:
            records = served.node.bookkeeper.ledger.scan().records
            [(key, record)] = records.items()
            judged = await served.node.bookkeeper.reconciler.liveness(record)
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
            return (key, record), again.claims["uid-1"], spec, refused, judged

    (key, record), again, spec, refused, judged = asyncio.run(main())
    assert key == (AGENT, "k8s-claim:default/one:uid-1")
    assert record.allocation == {DeviceName("cuda"): {"cuda.device": {"cuda1": 1}}}
    assert record.handle.runtime == "k8s-claims"
    assert record.owner is not None  # not handed over: the kill came first
    assert record.owner.pid == child.pid
    assert record.was_started(DeviceName("cuda"), WorkloadPhase.PRE_CREATE)
    assert judged is Liveness.UNKNOWN  # by its handle (no API server here), kept
    assert spec
    assert again.error == ""
    assert [d.device_name for d in again.devices] == ["cuda1"]
    assert "cuda1" in refused


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per outermost ledger transaction from now on: whether it was synced."""
    made: list[bool] = []
    level = Ledger._sync_level

    @contextlib.contextmanager
    def counted(self: Ledger, durable: bool) -> Iterator[None]:
        made.append(durable)
        with level(self, durable):
            yield

    monkeypatch.setattr(Ledger, "_sync_level", counted)
    return made


def prepare(name: str, uid: str) -> pb.NodePrepareResourcesRequest:
    return pb.NodePrepareResourcesRequest(
        claims=[pb.Claim(namespace="default", name=name, uid=uid)]
    )


def test_a_prepare_writes_the_ledger_once_before_its_answer_synced(
    dra_node: Path, short_root: Path, commits: list[bool]
) -> None:
    async def main() -> tuple[str, list[bool]]:
        async with serving(dra_node, short_root) as served:
            served.preparer.hand_overs.delay = Decimal(600)
            served.claims.add(claim("one", "uid-1", [result("cuda1")]))
            commits.clear()
            answer = await served.stub.NodePrepareResources(prepare("one", "uid-1"))
            return str(answer.claims["uid-1"].error), list(commits)

    error, made = asyncio.run(main())
    assert error == ""
    assert made == [True]  # the booking with pre_create's intent; the hand-over comes after


def test_hand_overs_follow_the_answers_in_one_write_and_an_unprepare_writes_them_first(
    dra_node: Path, short_root: Path, commits: list[bool]
) -> None:
    me = ProcessStamp.of(os.getpid())

    async def main() -> None:
        async with serving(dra_node, short_root) as served:
            ledger = served.node.bookkeeper.ledger
            pending = served.preparer.hand_overs.pending
            served.claims.add(claim("one", "uid-1", [result("cuda0")]))
            served.claims.add(claim("two", "uid-2", [result("cuda1")]))
            await served.stub.NodePrepareResources(prepare("one", "uid-1"))
            await served.stub.NodePrepareResources(prepare("two", "uid-2"))
            owners = {w: r.owner for (_a, w), r in ledger.scan().records.items()}
            assert set(owners.values()) == {me}  # answered, still this driver's
            assert len(pending) == 2
            commits.clear()
            while pending:  # within the delay after the first answer
                await asyncio.sleep(0.01)
            assert commits == [False]  # both in one write, not synced
            assert {r.owner for r in ledger.scan().records.values()} == {None}

            served.preparer.hand_overs.delay = Decimal(600)
            served.claims.add(claim("three", "uid-3", [result("vgpu0", shares="0.5")]))
            await served.stub.NodePrepareResources(prepare("three", "uid-3"))
            assert len(pending) == 1
            done = await served.stub.NodeUnprepareResources(
                pb.NodeUnprepareResourcesRequest(
                    claims=[pb.Claim(namespace="default", name="three", uid="uid-3")]
                )
            )
            assert done.claims["uid-3"].error == ""  # handed over first, then released
            assert not pending
            assert len(ledger.scan().records) == 2

    asyncio.run(main())
