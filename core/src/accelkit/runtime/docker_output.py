"""A container's stdout and stderr copied to ours, byte for byte, while it runs.

The pump attaches to the container *before* it starts, so no output is lost (asking for the
logged output as well would repeat what arrives while attaching); it ends when the container's
streams close. The containers accelkit makes have no terminal (``Tty`` false), so the attach is
asked for straight away, without the inspection ``DockerContainer.attach`` makes to learn that.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiodocker
import aiohttp
from aiodocker.stream import Stream
from yarl import URL

from accelkit.runtime.docker_values import OutputTarget

__all__ = ["OutputPump"]


class OutputPump:
    """Copies one container's output to an :class:`OutputTarget` in a task of its own."""

    def __init__(
        self, container: aiodocker.containers.DockerContainer, target: OutputTarget
    ) -> None:
        self._container = container
        self._target = target
        self._attached = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(), name=f"output of {container.id[:12]}")

    async def attached(self) -> None:
        """Return once the pump listens (raise what made attaching fail)."""
        await asyncio.wait({self._attached, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if self._task.done() and not self._attached.done():
            self._task.result()  # re-raise the attach failure

    def _stream(self) -> Stream:
        """The container's stdout and stderr, multiplexed (no terminal), from now on."""
        query = {"stdout": "1", "stderr": "1", "stream": "1", "logs": "0", "stdin": "0"}
        url = URL(f"containers/{self._container.id}/attach").with_query(query)

        async def setup() -> tuple[URL, bytes | None, bool]:
            return url, None, False

        return Stream(self._container.docker, setup)  # the client's connect timeout, no other

    async def _run(self) -> None:
        stream = self._stream()
        async with stream:
            self._attached.set_result(None)
            while (message := await stream.read_out()) is not None:
                out = self._target.stream(message.stream)
                out.write(message.data)
                out.flush()

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the rest of the output, then stop copying."""
        with contextlib.suppress(TimeoutError, aiodocker.DockerError, aiohttp.ClientError, OSError):
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        await self.cancel()

    async def cancel(self) -> None:
        """Stop copying now."""
        self._task.cancel()
        with contextlib.suppress(
            asyncio.CancelledError, aiodocker.DockerError, aiohttp.ClientError, OSError
        ):
            await self._task
