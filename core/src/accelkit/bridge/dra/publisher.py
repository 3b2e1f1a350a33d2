"""Publishing the node's pool through the API server, and keeping it as the devices are.

:class:`SlicePublisher` finds the slices an earlier run left (``spec.driver`` and
``spec.nodeName``), goes on from their generation, and publishes a new generation of every slice
whenever what they say changes: it creates the slices that are missing, replaces the others and
deletes those left over. A slice name taken by something else (409 on create) or a slice changed
under it (409 on replace) is read again and tried once more; what still conflicts is said, with
the slice's name, and tried again at the next change or tick.

The official client is synchronous: every call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from accelkit.bridge.dra.devices import DraDevice
from accelkit.bridge.dra.slices import Json, pool_slices

__all__ = ["PublishFailed", "SlicePublisher", "api_problem"]

log = logging.getLogger(__name__)

_ERRNO = re.compile(r"\[Errno -?\d+\][^\"')]*")
CONFLICT = 409
NOT_FOUND = 404


class PublishFailed(Exception):
    """The API server refused the slices or could not be reached; said in the message."""


def api_problem(exc: BaseException) -> str:
    """A one-line reason from a client exception (status and the server's message)."""
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status:
        body = str(getattr(exc, "body", "") or "")
        message = body
        try:
            import json

            message = json.loads(body).get("message", body)
        except ValueError:
            pass
        return f"{status} {reason}: {message}".strip().rstrip(":")
    text = str(getattr(exc, "reason", None) or exc)
    if (errno := _ERRNO.search(text)) is not None:  # urllib3's connection errors, in short
        return errno.group(0).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _without_generation(slices: Sequence[Json]) -> list[Any]:
    return [{**s["spec"], "pool": {**s["spec"]["pool"], "generation": 0}} for s in slices]


class SlicePublisher:
    """Keeps the node's pool of one driver published; see the module docstring."""

    def __init__(self, resource_api: Any, *, driver: str, node: str, agent: str) -> None:
        #: a ``kubernetes.client.ResourceV1Api``
        self.api = resource_api
        self.driver = driver
        self.node = node
        self.agent = agent
        self.generation = 0
        self.published: list[Json] = []
        self._started = False

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(method, *args, **kwargs)

    async def _ours(self) -> dict[str, Any]:
        selector = f"spec.driver={self.driver},spec.nodeName={self.node}"
        found = await self._call(self.api.list_resource_slice, field_selector=selector)
        return {s.metadata.name: s for s in found.items}

    async def start(self) -> None:
        """Read the slices an earlier run left; go on from their generation."""
        existing = await self._ours()
        self.generation = max(
            (s.spec.pool.generation or 0 for s in existing.values() if s.spec.pool), default=0
        )
        self._started = True

    async def publish(self, devices: Sequence[DraDevice], *, force: bool = False) -> bool:
        """Publish ``devices`` as a new generation if they changed (or ``force``); whether a
        new generation was written. Raises :class:`PublishFailed`."""
        from kubernetes.client.exceptions import ApiException

        if not self._started:
            await self.start()
        wanted = pool_slices(
            devices,
            driver=self.driver,
            node=self.node,
            agent=self.agent,
            generation=self.generation + 1,
        )
        if not force and _without_generation(wanted) == _without_generation(self.published):
            return False
        try:
            await self._apply(wanted)
        except ApiException as exc:
            msg = f"cannot publish the ResourceSlices of pool {self.node!r}: {api_problem(exc)}"
            raise PublishFailed(msg) from None
        except OSError as exc:  # urllib3's connection errors are OSErrors
            msg = f"cannot reach the API server to publish pool {self.node!r}: {exc}"
            raise PublishFailed(msg) from None
        self.generation += 1
        self.published = wanted
        return True

    async def _apply(self, wanted: Sequence[Json]) -> None:
        from kubernetes.client.exceptions import ApiException

        current = await self._ours()
        for body in wanted:
            name = body["metadata"]["name"]
            for attempt in (1, 2):
                try:
                    await self._put(body, current.get(name))
                    break
                except ApiException as exc:
                    if exc.status != CONFLICT:
                        raise
                    if attempt == 2:
                        msg = (
                            f"ResourceSlice {name!r} conflicts ({api_problem(exc)}); a slice "
                            f"of that name is not driver {self.driver!r}'s on node "
                            f"{self.node!r}, or keeps changing"
                        )
                        raise PublishFailed(msg) from None
                    current = await self._ours()  # changed under us: read it again
        names = {b["metadata"]["name"] for b in wanted}
        for name in sorted(set(current) - names):
            try:
                await self._call(self.api.delete_resource_slice, name)
            except ApiException as exc:
                if exc.status != NOT_FOUND:
                    raise

    async def _put(self, body: Json, existing: Any) -> None:
        name = body["metadata"]["name"]
        if existing is None:
            await self._call(self.api.create_resource_slice, body)
            return
        meta = {**body["metadata"], "resourceVersion": existing.metadata.resource_version}
        await self._call(self.api.replace_resource_slice, name, {**body, "metadata": meta})

    async def withdraw(self) -> None:
        """Delete the pool's slices (the driver is going away for good)."""
        from kubernetes.client.exceptions import ApiException

        for name in sorted(await self._ours()):
            try:
                await self._call(self.api.delete_resource_slice, name)
            except ApiException as exc:
                if exc.status != NOT_FOUND:
                    raise
        self.published = []
