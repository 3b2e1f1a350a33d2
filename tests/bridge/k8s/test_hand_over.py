"""The device-plugin bridge hands its bookings over after answering the kubelet.

The service is driven in process (its ``Allocate`` called as the gRPC server calls it) on a node
of mock GPUs, with the hand-over's delay long enough that only the bridge's own steps write it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

import pytest

from accelkit.bridge.hand_over import HandOvers
from accelkit.bridge.k8s.device_plugin import DevicePluginService
from accelkit.bridge.k8s.resources import k8s_resources
from accelkit.config import load_host_config
from accelkit.errors import ConfigError
from accelkit.node import Node
from accelkit.runtime.kubelet_api import deviceplugin_v1beta1_pb2 as pb
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.types import AgentId

from .bridge_process import write_node

AGENT = AgentId("agent-1")
GPU = "accelkit.io/cuda.device"


class Context:
    """What ``Allocate`` uses of a gRPC servicer context: a refusal ends the call."""

    async def abort(self, code: Any, details: str) -> NoReturn:
        raise AssertionError(f"refused: {code} {details}")


def allocate(*ids: str) -> pb.AllocateRequest:
    return pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])


def service_of(node: Node, root: Path) -> DevicePluginService:
    agent = node.agents[AGENT]
    [resource] = [r for r in k8s_resources(agent, "accelkit.io") if r.name == GPU]

    async def changed(seen: int) -> int:
        return seen + 1

    return DevicePluginService(
        node,
        AGENT,
        resource,
        pod_resources=str(root / "no-kubelet.sock"),
        admission_grace=Decimal(600),
        settle=Decimal("0.01"),
        listing=lambda r: r.devices(agent, {}),
        changed=changed,
        hand_overs=HandOvers(node.bookkeeper, Decimal(600)),
    )


def test_allocate_answers_before_the_hand_over_and_a_reuse_writes_it_first(
    k8s_root: Path,
) -> None:
    config = load_host_config(write_node(k8s_root, grace="600"))
    me = ProcessStamp.of(os.getpid())

    async def main() -> None:
        async with Node.open(config) as node:
            service = service_of(node, k8s_root)
            ledger = node.bookkeeper.ledger
            reply = await service.Allocate(allocate("cuda0"), Context())  # type: ignore[arg-type]
            assert reply.container_responses[0].envs["MOCK_CUDA_DEVICES"] == "cuda0"
            [record] = ledger.scan().records.values()
            assert record.owner == me  # answered; handed over later
            assert service.hand_overs.pending == [record.key]

            # the kubelet gives cuda0 to the pod's next container: the booking answered just
            # now is handed over first, then superseded and booked anew
            await service.Allocate(allocate("cuda0"), Context())  # type: ignore[arg-type]
            [again] = ledger.scan().records.values()
            assert again.workload.id == f"k8s:{GPU}:cuda0"
            assert service.hand_overs.pending == [again.key]

            service.hand_overs.write()
            assert [r.owner for r in ledger.scan().records.values()] == [None]
            assert not service.hand_overs.pending

    asyncio.run(main())


def test_a_hand_over_the_ledger_refuses_is_said_and_the_bookings_stay(
    k8s_root: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_host_config(write_node(k8s_root, grace="600"))

    async def main() -> list[Any]:
        async with Node.open(config) as node:
            service = service_of(node, k8s_root)
            await service.Allocate(allocate("cuda1"), Context())  # type: ignore[arg-type]

            def refused(key: Any) -> NoReturn:
                raise ConfigError("ledger: cannot commit (disk I/O error)")

            monkeypatch.setattr(node.bookkeeper, "hand_over", refused)
            with caplog.at_level(logging.WARNING, "accelkit.bridge.hand_over"):
                service.hand_overs.write()
            assert not service.hand_overs.pending
            return [r.owner for r in node.bookkeeper.ledger.scan().records.values()]

    owners = asyncio.run(main())
    assert owners == [ProcessStamp.of(os.getpid())]  # still booked, still this process's
    said = f"cannot hand over k8s:{GPU}:cuda1 (kept by this process until it ends): ledger: "
    assert said + "cannot commit (disk I/O error)" in caplog.text
