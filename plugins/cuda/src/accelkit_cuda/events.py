"""NVML events in a worker thread: one event set, ``nvmlEventSetWait_v2`` with a short timeout.

Every NVML event call (create, register, wait, free) runs in the one thread, so the set is
never freed under a wait. The thread hands events to the event loop and ends, freeing the set,
within one wait timeout of :meth:`EventThread.stop`.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
from collections.abc import Mapping

import attrs

from accelkit_cuda.nvml import (
    ERROR_TIMEOUT,
    EVENT_DOUBLE_BIT_ECC,
    EVENT_GPU_RECOVERY_ACTION,
    EVENT_GPU_UNAVAILABLE,
    EVENT_XID_CRITICAL,
    Handle,
)
from accelkit_cuda.nvml.health import NVMLHealth

log = logging.getLogger(__name__)

#: the event types watched, where a GPU supports them
WATCHED_EVENTS = (
    EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC | EVENT_GPU_UNAVAILABLE | EVENT_GPU_RECOVERY_ACTION
)
#: how long one wait lasts; bounds how long the thread takes to stop
WAIT_MS = 200


@attrs.frozen
class GPUEvent:
    """One NVML event: which GPU (its key in the watched mapping), what, and for which GI."""

    gpu: str
    event_type: int
    data: int
    gpu_instance: int


class EventThread:
    """Waits for events of the given GPUs and puts them (or ``None``: look again) on a queue.

    ``None`` is put after a wait fails with another error than a timeout (a lost GPU), so the
    reader re-reads every GPU's health.
    """

    def __init__(
        self,
        library: NVMLHealth,
        gpus: Mapping[str, Handle],
        queue: asyncio.Queue[GPUEvent | None],
    ) -> None:
        self._library = library
        self._gpus = dict(gpus)
        self._queue = queue
        self._loop = asyncio.get_running_loop()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="accelkit-cuda-events", daemon=True)

    def start(self) -> None:
        self.thread.start()

    async def stop(self) -> None:
        """Ask the thread to end and wait (without blocking the loop) until it has."""
        self._stop.set()
        while self.thread.is_alive():
            await asyncio.sleep(WAIT_MS / 4000)

    def _put(self, item: GPUEvent | None) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop closed under us: nobody is reading any more
            self._stop.set()

    def _run(self) -> None:
        library = self._library
        try:
            event_set = library.create_event_set()
        except library.error_type as exc:
            log.warning("cuda: no NVML event set (%s); health is polled only", exc)
            return
        try:
            keys = {
                self._register(event_set, key, handle): key for key, handle in self._gpus.items()
            }
            keys.pop(None, None)
            while not self._stop.is_set():
                self._wait(event_set, keys)
        finally:
            try:
                library.free_event_set(event_set)
            except library.error_type as exc:
                log.warning("cuda: nvmlEventSetFree failed: %s", exc)

    def _register(self, event_set: object, key: str, handle: Handle) -> object | None:
        """Register the watched types the GPU supports; the handle's identity, or ``None``."""
        library = self._library
        try:
            wanted = library.supported_events(handle) & WATCHED_EVENTS
            if wanted:
                library.register_events(handle, wanted, event_set)
        except library.error_type as exc:
            # NOT_SUPPORTED registers nothing, a lost GPU neither: its readings tell
            log.warning("cuda: no NVML events from %s: %s", key, exc)
            return None
        return handle_key(handle) if wanted else None

    def _wait(self, event_set: object, keys: Mapping[object, str]) -> None:
        library = self._library
        try:
            data = library.wait_for_event(event_set, WAIT_MS)
        except library.error_type as exc:
            if library.error_code(exc) == ERROR_TIMEOUT:
                return
            log.warning("cuda: waiting for NVML events failed: %s", exc)
            self._put(None)
            self._stop.wait(WAIT_MS / 1000)
            return
        key = keys.get(handle_key(data.device))
        if key is not None:
            event_type, value = int(data.eventType), int(data.eventData)
            self._put(GPUEvent(key, event_type, value, int(data.gpuInstanceId)))


def handle_key(handle: Handle) -> object:
    """Equal for two handles of one GPU: pynvml gives a new ctypes pointer in each event."""
    try:
        return ctypes.addressof(handle.contents)
    except (AttributeError, TypeError, ValueError):
        return id(handle)
