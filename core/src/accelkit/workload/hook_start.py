"""A plugin's lifecycle hook made and its ``pre_create`` run in one hand-off to its worker.

The lifecycle records the intent of ``pre_create`` first, then hands both calls to the
plugin's worker (:mod:`accelkit.calls`) at once: one trip between the threads instead of two,
under one hook time limit. A hook made while its caller still waits is kept
(:attr:`HookStart.hook`) and gets ``post_terminate`` whatever happens next; one made after the
caller gave up (:meth:`HookStart.close`) never runs ``pre_create``. A hook whose ``pre_create``
belongs to another worker than its context (or to none) has it called there, as before.
"""

from __future__ import annotations

import functools
import threading
from decimal import Decimal
from typing import TYPE_CHECKING

from accelkit.calls import PluginWorker, call_async, plugin_of, worker_of
from accelkit.errors import PluginTimeout
from accelkit.events import WorkloadPhase
from accelkit.plugin import AbstractLifecycleHook
from accelkit.types import Workload, WorkloadConfig

if TYPE_CHECKING:
    from accelkit.workload.lifecycle import HookTarget

__all__ = ["CREATE", "HookStart"]

CREATE = "create_lifecycle_hook"
PRE_CREATE = WorkloadPhase.PRE_CREATE.value


class _Elsewhere:
    """``pre_create`` runs on another worker than the context's."""


class HookStart:
    """One plugin's hook, made and started; see the module docstring."""

    def __init__(self, target: HookTarget, workload: Workload, timeout: Decimal) -> None:
        self.key = target.key
        self.timeout = timeout
        self._create = functools.partial(
            target.context.create_lifecycle_hook, workload, target.device_alloc
        )
        self._plugin = plugin_of(self._create)
        #: the plugin's worker; ``None``: the calls belong to no plugin (made by the caller)
        self.worker: PluginWorker | None = None if self._plugin is None else worker_of(self._plugin)
        #: the hook, once made (on the worker)
        self.hook: AbstractLifecycleHook | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def method(self) -> str:
        """The call under way: making the hook, or its ``pre_create``."""
        return CREATE if self.hook is None else PRE_CREATE

    async def run(self) -> WorkloadConfig:
        """Make the hook and run ``pre_create`` on the worker; their errors as they are, a
        time-out (or a failed plugin's refusal) naming the call it stopped."""
        assert self.worker is not None
        try:
            done = await self.worker.run_async(self.key, PRE_CREATE, self.timeout, self._both)
        except PluginTimeout as exc:
            if self.hook is not None:
                raise
            text = str(exc).replace(f"in {PRE_CREATE}", f"in {CREATE}")
            raise PluginTimeout(text.replace(f"{PRE_CREATE} is not", f"{CREATE} is not")) from None
        if isinstance(done, _Elsewhere):
            assert self.hook is not None
            return await call_async(self.key, PRE_CREATE, self.timeout, self.hook.pre_create)
        return done

    async def _both(self) -> WorkloadConfig | _Elsewhere:
        hook = self._create()
        with self._lock:
            if self._closed:  # the caller stopped waiting while it was made: it never starts
                msg = f"plugin {self.key!r}: its hook was made after its caller gave up"
                raise RuntimeError(msg)
            self.hook = hook
        if plugin_of(hook.pre_create) is not self._plugin:
            return _Elsewhere()
        return await hook.pre_create()

    def close(self) -> AbstractLifecycleHook | None:
        """Stop taking the hook; the hook made so far, if any (it gets ``post_terminate``)."""
        with self._lock:
            self._closed = True
            return self.hook
