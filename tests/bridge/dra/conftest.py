"""A mock node and a DRA driver's preparer served on a unix socket, with claims made in memory."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from accelkit.bridge.dra.api import dra_v1_pb2_grpc as dra_grpc
from accelkit.bridge.dra.claim_cdi import ClaimSpecs
from accelkit.bridge.dra.devices import dra_devices
from accelkit.bridge.dra.prepare import ClaimPreparer
from accelkit.bridge.dra.services import DraPluginService
from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.types import AgentId

DRIVER = "accelkit.io"
POOL = "node-a"
AGENT = AgentId("agent-1")

DEVICES = """\
[[kinds]]
key = "cuda"
[[kinds.devices]]
id = "cuda0"
model = "Mock GPU 40G"
memory = "40G"
numa-node = 0
[[kinds.devices]]
id = "cuda1"
model = "Mock GPU 40G"
memory = "40G"
numa-node = 1
[[kinds]]
key = "vgpu"
allocation = "fractional"
quantum = "0.05"
[[kinds.devices]]
id = "vgpu0"
model = "Mock GPU 80G"
memory = "80G"
numa-node = 0
"""

HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{root}/state"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
health-interval = "0.05"
"""


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A short directory (unix socket paths are limited to 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="adra-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def dra_node(short_root: Path) -> Path:
    """The host config of a mock node: cuda0 and cuda1 whole, vgpu0 in shares of 0.05."""
    (short_root / "devices.toml").write_text(DEVICES)
    config = short_root / "host.toml"
    config.write_text(HOST.format(root=short_root))
    return config


def result(
    device: str,
    *,
    driver: str = DRIVER,
    pool: str = POOL,
    request: str = "gpu",
    shares: str | None = None,
    share_id: str | None = None,
) -> Any:
    return client.V1DeviceRequestAllocationResult(
        driver=driver,
        pool=pool,
        device=device,
        request=request,
        consumed_capacity=None if shares is None else {"shares": shares},
        share_id=share_id,
    )


def claim(name: str, uid: str, results: list[Any] | None) -> Any:
    """A ResourceClaim as the client reads it; ``results=None``: not allocated."""
    allocation = (
        None
        if results is None
        else client.V1AllocationResult(devices=client.V1DeviceAllocationResult(results=results))
    )
    return client.ResourceV1ResourceClaim(
        metadata=client.V1ObjectMeta(name=name, namespace="default", uid=uid),
        spec=client.V1ResourceClaimSpec(),
        status=client.V1ResourceClaimStatus(allocation=allocation),
    )


class Claims:
    """The API server's claims, as far as the preparer reads them."""

    def __init__(self) -> None:
        self.by_name: dict[str, Any] = {}
        self.reads = 0

    def add(self, made: Any) -> Any:
        self.by_name[made.metadata.name] = made
        return made

    async def read(self, namespace: str, name: str, uid: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        self.reads += 1
        found = self.by_name.get(name)
        if found is None:
            raise ApiException(status=404, reason="Not Found")
        return found


class Served:
    """The node, its preparer, the claims it reads and a gRPC stub on the driver's socket."""

    def __init__(self, node: Node, preparer: ClaimPreparer, claims: Claims, stub: Any) -> None:
        self.node = node
        self.preparer = preparer
        self.claims = claims
        self.stub = stub

    @property
    def specs(self) -> ClaimSpecs:
        return self.preparer.specs


@asynccontextmanager
async def serving(config_path: Path, root: Path) -> AsyncIterator[Served]:
    """The DRA service of a preparer for the node at ``config_path``, on ``root/dra.sock``."""
    config = load_host_config(config_path)
    claims = Claims()
    async with Node.open(config) as node:
        agent = node.agents[AGENT]
        preparer = ClaimPreparer(
            node,
            AGENT,
            driver=DRIVER,
            pool=POOL,
            node_name=POOL,
            kubeconfig=str(root / "no-kubeconfig"),
            specs=ClaimSpecs(root / "cdi", DRIVER),
            read_claim=claims.read,
            devices=lambda: dra_devices(agent, node.health.snapshot()),
        )
        server = grpc.aio.server()
        dra_grpc.add_DRAPluginServicer_to_server(DraPluginService(preparer, POOL), server)  # type: ignore[no-untyped-call]
        socket = root / "dra.sock"
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
                stub = dra_grpc.DRAPluginStub(channel)  # type: ignore[no-untyped-call]
                yield Served(node, preparer, claims, stub)
        finally:
            await server.stop(0)
            preparer.hand_overs.write()  # as the driver does before it ends
            await asyncio.sleep(0)
