"""The ResourceClaims allocated from this driver, kept by a watch, so a prepare reads no API.

:class:`ClaimCache` lists the claims of every namespace once and then follows a watch in a
thread, keeping those with an allocation result of the driver. :meth:`ClaimCache.get` answers
from it; a claim it does not hold with that uid and an allocation (the watch may lag the
scheduler by a moment, or be down) is read from the API server as before. A watch that ends
or fails is started again (listed anew after a ``410 Gone``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["ClaimCache"]

log = logging.getLogger(__name__)

#: seconds one watch request lasts before it is made again
WATCH_SECONDS = 240
#: seconds to wait before watching again after a failure
RETRY_SECONDS = 1.0
GONE = 410


def _ours(claim: Any, driver: str) -> bool:
    status = claim.status
    allocation = status.allocation if status is not None else None
    if allocation is None or allocation.devices is None:
        return False
    return any(r.driver == driver for r in allocation.devices.results or [])


class ClaimCache:
    """The driver's allocated claims by namespace and name; see the module docstring."""

    def __init__(
        self,
        resource_api: Any,
        driver: str,
        read: Callable[[str, str], Awaitable[Any]],
    ) -> None:
        self.api = resource_api
        self.driver = driver
        self._read = read
        self._claims: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        #: reads answered from the cache, and those that went to the API server
        self.hits = 0
        self.misses = 0

    def _keep(self, kind: str, claim: Any) -> None:
        key = (claim.metadata.namespace, claim.metadata.name)
        with self._lock:
            if kind == "DELETED" or not _ours(claim, self.driver):
                self._claims.pop(key, None)
            else:
                self._claims[key] = claim

    def _list(self) -> str:
        found = self.api.list_resource_claim_for_all_namespaces()
        with self._lock:
            self._claims = {
                (c.metadata.namespace, c.metadata.name): c
                for c in found.items
                if _ours(c, self.driver)
            }
        return str(found.metadata.resource_version)

    def _follow(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                self._watch = watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(
                    self.api.list_resource_claim_for_all_namespaces,
                    resource_version=version,
                    timeout_seconds=WATCH_SECONDS,
                ):
                    claim = event["object"]
                    if event["type"] == "ERROR":
                        version = None
                        break
                    version = claim.metadata.resource_version
                    self._keep(event["type"], claim)
            except ApiException as exc:
                if exc.status == GONE:
                    version = None
                    continue
                log.info("the watch of ResourceClaims failed: %s; watching again", exc)
                self._stop.wait(RETRY_SECONDS)
            except Exception as exc:  # the connection dropped: start again
                log.info("the watch of ResourceClaims ended: %s; watching again", exc)
                version = None
                self._stop.wait(RETRY_SECONDS)

    def start(self) -> None:
        """Follow the claims in a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._follow, name="claims", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop following (the thread ends with its current watch request)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    async def get(self, namespace: str, name: str, uid: str) -> Any:
        """The claim, from the cache when it holds it with ``uid``, else from the API server."""
        with self._lock:
            cached = self._claims.get((namespace, name))
        if cached is not None and cached.metadata.uid == uid:
            self.hits += 1
            return cached
        self.misses += 1
        return await self._read(namespace, name)
