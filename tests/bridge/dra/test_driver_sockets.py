"""The driver's sockets as the kubelet's plugin watcher and DRA manager use them, the health
stream, and what the driver says when the kubelet's folders or the API server are missing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from accelkit.bridge.dra.api import dra_health_v1alpha1_pb2 as health_pb
from accelkit.bridge.dra.api import dra_health_v1alpha1_pb2_grpc as health_grpc
from accelkit.bridge.dra.api import pluginregistration_v1_pb2 as reg_pb
from accelkit.bridge.dra.api import pluginregistration_v1_pb2_grpc as reg_grpc
from accelkit.bridge.dra.driver import DraDriver, DraSettings
from accelkit.config import load_host_config
from accelkit.node import Node

from .conftest import AGENT, DRIVER

UNREACHABLE = "https://127.0.0.1:9"  # the discard port: nothing answers there


def settings(root: Path, **changes: Any) -> DraSettings:
    values: dict[str, Any] = {
        "node_name": "node-a",
        "kubeconfig": str(root / "no-kubeconfig"),
        "registry_dir": root / "plugins_registry",
        "plugins_dir": root / "plugins",
        "cdi_dir": root / "cdi",
        **changes,
    }
    return DraSettings(**values)


def unreachable_api() -> Any:
    configuration = client.Configuration()
    configuration.host = UNREACHABLE
    configuration.retries = 0
    return client.ApiClient(configuration)


async def until(predicate: Any, what: str) -> None:
    while not predicate():  # the test's own timeout ends a wait that never comes true
        await asyncio.sleep(0.01)


def test_the_kubelet_registers_the_driver_and_reads_its_health(
    dra_node: Path, short_root: Path
) -> None:
    (short_root / "plugins_registry").mkdir()
    (short_root / "plugins").mkdir()
    events: list[dict[str, Any]] = []

    async def main() -> tuple[Any, list[Any]]:
        async with Node.open(load_host_config(dra_node)) as node:
            driver = DraDriver(node, AGENT, settings(short_root), events.append, unreachable_api())
            await driver.ensure_serving()
            registration = f"unix://{driver.settings.registration_socket}"
            async with grpc.aio.insecure_channel(registration) as channel:
                stub = reg_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
                info = await stub.GetInfo(reg_pb.InfoRequest())
                await stub.NotifyRegistrationStatus(
                    reg_pb.RegistrationStatus(plugin_registered=True)
                )
                await stub.NotifyRegistrationStatus(
                    reg_pb.RegistrationStatus(plugin_registered=False, error="no such version")
                )
            seen: list[Any] = []
            async with grpc.aio.insecure_channel(f"unix://{info.endpoint}") as channel:
                watch = health_grpc.DRAResourceHealthStub(channel)  # type: ignore[no-untyped-call]
                stream = watch.NodeWatchResources(health_pb.NodeWatchResourcesRequest())
                seen.append(await stream.read())
                devices = short_root / "devices.toml"
                text = devices.read_text().replace(
                    'id = "cuda1"\n',
                    'id = "cuda1"\nhealth = "unhealthy"\nhealth-reason = "XID 79"\n',
                )
                devices.write_text(text)
                await node.health_keeper.refresh()
                await driver._bump()
                seen.append(await stream.read())
                stream.cancel()
            await driver.close()
            assert not driver.settings.registration_socket.exists()
            return info, seen

    info, seen = asyncio.run(main())
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(short_root / "plugins" / DRIVER / "dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin"]
    assert {"event": "registered", "driver": DRIVER} in events
    assert {
        "event": "warning",
        "message": "the kubelet refused the driver: no such version",
    } in events

    def states(reply: Any) -> dict[str, tuple[int, str]]:
        return {
            d.device.device_name: (d.health, d.message)
            for d in reply.devices
            if d.device.pool_name == "node-a"
        }

    healthy = (health_pb.HEALTHY, "")
    assert states(seen[0]) == {"cuda0": healthy, "cuda1": healthy, "vgpu0": healthy}
    assert states(seen[1])["cuda1"] == (health_pb.UNHEALTHY, "XID 79")


def test_missing_kubelet_folders_are_said_once_and_nothing_is_served(
    dra_node: Path, short_root: Path
) -> None:
    events: list[dict[str, Any]] = []

    async def main() -> DraDriver:
        async with Node.open(load_host_config(dra_node)) as node:
            driver = DraDriver(node, AGENT, settings(short_root), events.append, unreachable_api())
            await driver.ensure_serving()
            await driver.ensure_serving()
            return driver

    driver = asyncio.run(main())
    assert events == [
        {
            "event": "warning",
            "message": f"no kubelet plugin registry directory at {short_root / 'plugins_registry'} "
            "(is the kubelet running, with DRA?); looking again every tick",
        }
    ]
    assert driver.registration is None
    assert driver.dra is None


def test_an_api_server_down_at_start_is_tried_again_with_a_growing_wait(
    dra_node: Path, short_root: Path
) -> None:
    events: list[dict[str, Any]] = []

    async def main() -> None:
        async with Node.open(load_host_config(dra_node)) as node:
            from decimal import Decimal

            quick = settings(short_root, first_backoff=Decimal("0.01"))
            driver = DraDriver(node, AGENT, quick, events.append, unreachable_api())
            connecting = asyncio.create_task(driver.connect())
            await until(lambda: len(events) >= 3, "three tries")
            connecting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await connecting
            assert await node.status() == []  # nothing booked

    asyncio.run(main())
    messages = [e["message"] for e in events[:3]]
    assert all(m.startswith(f"cannot reach the API server at {UNREACHABLE} (") for m in messages)
    assert [m.rsplit("trying again in ", 1)[1] for m in messages] == ["0.01 s", "0.02 s", "0.04 s"]


def test_connection_errors_are_said_in_short() -> None:
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    from accelkit.bridge.dra.publisher import api_problem

    refused = NewConnectionError(
        None, "Failed to establish a new connection: [Errno 111] Connection refused"
    )
    assert api_problem(MaxRetryError(None, "/apis", refused)) == "[Errno 111] Connection refused"
    assert api_problem(ValueError("something else\nand more")) == "something else"
