"""Registering a plugin's socket with the kubelet, and noticing that the kubelet restarted.

The kubelet forgets its plugins when it restarts and removes the sockets in its
device-plugins directory; it then creates ``kubelet.sock`` anew. :class:`KubeletWatch` tells a
new ``kubelet.sock`` (another inode) from the one registered with.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import grpc

from accelkit.runtime.kubelet_api import deviceplugin_v1beta1_pb2 as pb
from accelkit.runtime.kubelet_api import deviceplugin_v1beta1_pb2_grpc as pb_grpc

__all__ = ["API_VERSION", "KubeletWatch", "RegistrationFailed", "register"]

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
#: seconds a ``Register`` call may take
REGISTER_TIMEOUT = Decimal(5)


class RegistrationFailed(Exception):
    """The kubelet could not be reached or refused the plugin."""


async def register(
    kubelet_dir: Path, endpoint: str, resource: str, options: pb.DevicePluginOptions
) -> None:
    """``Registration.Register`` on ``<kubelet_dir>/kubelet.sock``; raise RegistrationFailed."""
    socket = kubelet_dir / KUBELET_SOCKET
    if not socket.exists():
        msg = f"no kubelet socket at {socket} (is the kubelet running?)"
        raise RegistrationFailed(msg)
    request = pb.RegisterRequest(
        version=API_VERSION, endpoint=endpoint, resource_name=resource, options=options
    )
    try:
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            stub: Any = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            await stub.Register(request, timeout=float(REGISTER_TIMEOUT))
    except grpc.aio.AioRpcError as exc:
        msg = f"the kubelet at {socket} refused {resource}: {exc.code().name}: {exc.details()}"
        raise RegistrationFailed(msg) from None


class KubeletWatch:
    """Which ``kubelet.sock`` the plugins were last registered with (device and inode)."""

    def __init__(self, kubelet_dir: Path) -> None:
        self.socket = kubelet_dir / KUBELET_SOCKET
        self.registered_with: tuple[int, int] | None = None

    def current(self) -> tuple[int, int] | None:
        """The socket's identity now; ``None`` when there is none."""
        try:
            st = os.stat(self.socket)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def needs_registration(self) -> bool:
        """A socket is there that the plugins were not registered with (new, or recreated)."""
        now = self.current()
        return now is not None and now != self.registered_with
