"""The lifecycle driver: every involved plugin's hook around one workload's life (DESIGN §9).

Order and guarantees:

* :meth:`WorkloadLifecycle.prepare` creates each plugin's hook and runs ``pre_create`` in
  allocation order, checks each returned config, and merges them. When anything fails there (a
  hook refusing with ``WorkloadCreationDenied`` or ``WorkloadCreationDeferred``, an invalid config,
  a ``HookConflict``), the hooks whose ``pre_create`` succeeded get ``post_terminate`` in reverse
  order, the allocation is released, and the exception reaches the caller.
* The caller creates the workload, then calls :meth:`~WorkloadLifecycle.post_create`. If creation
  fails, or ``post_create`` raises, the caller stops what exists and terminates.
* Termination: :meth:`~WorkloadLifecycle.pre_terminate` (reverse order, only when the workload was
  created; it cannot cancel; its errors, a failing ``on_phase`` listener's included, are kept),
  the caller stops the workload, :meth:`~WorkloadLifecycle.post_terminate` (reverse order), then
  the allocation is released.
  Both are idempotent: each hook whose ``pre_create`` succeeded gets exactly one
  ``post_terminate`` and the allocation is released exactly once, however the calls are repeated
  or interleaved with failures. Errors of the termination hooks are raised together at the end,
  after the release, as one :class:`~accelkit.errors.WorkloadError`.

``on_start(plugin, phase)`` is called before each hook call (the bookkeeper records the intent in
the ledger, so a crash during the call is known), ``on_phase(plugin, phase)`` after each hook
finishes a phase; ``notify(event)`` after a whole phase completes (node-wide observers). A hook
that keeps the base class's empty ``post_create``, ``pre_terminate`` or ``post_terminate`` is not
called for it (:func:`implements`): ``on_phase`` alone says the phase is done. A hook
whose ``pre_create`` was *started* counts as prepared: when it fails (or times out) it gets
``post_terminate`` too (hooks must take ``post_terminate`` without a finished ``pre_create``).
``pre_create``'s intent is recorded before the hook is made, and the plugin's worker makes the
hook and runs ``pre_create`` in one hand-off (:mod:`accelkit.workload.hook_start`); a hook that
was never made has nothing to tear down: ``on_phase(plugin, POST_TERMINATE)`` says so.

Every hook call runs under ``hook_timeout`` seconds (:func:`accelkit.calls.call_async`): a
``pre_create`` that hangs fails the creation like any error; a ``post_terminate`` that hangs is
left *unfinished* (:attr:`WorkloadLifecycle.unfinished`): it was started and never completed, so
the ledger keeps it and a later reconciliation tries it again. A ``post_terminate`` that raises
counts as done (it ran), its error is raised at the end.

An error raised by a hook names the plugin and the hook wherever it surfaces (``plugin 'cuda'
pre_create: no free MIG slice``): ``WorkloadCreationDenied`` and ``WorkloadCreationDeferred``
keep their type, any other exception becomes a :class:`~accelkit.errors.WorkloadError`; the
hook's own exception is the ``__cause__``. Time-outs (:class:`~accelkit.errors.PluginTimeout`)
name both already and pass as they are.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import TypeVar

import attrs

from accelkit.calls import DEFAULT_HOOK_TIMEOUT, call_async, call_sync
from accelkit.errors import (
    AccelkitError,
    PluginTimeout,
    WorkloadCreationDeferred,
    WorkloadCreationDenied,
    WorkloadError,
)
from accelkit.events import WorkloadEvent, WorkloadPhase
from accelkit.plugin import AbstractAgentContext, AbstractLifecycleHook
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import AgentId, DeviceAllocation, DeviceName, Workload, WorkloadConfig
from accelkit.workload.hook_start import HookStart
from accelkit.workload.merge import merge_configs
from accelkit.workload.validate import validate_config

log = logging.getLogger(__name__)

_T = TypeVar("_T")
PhaseListener = Callable[[DeviceName, WorkloadPhase], None]
#: told each plugin's checked ``pre_create`` config (the ledger keeps its resource data)
ConfigListener = Callable[[DeviceName, WorkloadConfig], None]
EventSink = Callable[[WorkloadEvent], None]


@attrs.frozen(repr=False)
class HookTarget:
    """One plugin's part of a workload: its key, the agent's context and what it allocated."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    key: DeviceName
    context: AbstractAgentContext
    device_alloc: DeviceAllocation


class LifecycleState(enum.Enum):
    """How far the driver got."""

    NEW = "new"
    PREPARED = "prepared"  # every pre_create succeeded, the config is merged
    CREATED = "created"  # the workload exists (post_create was started)
    TERMINATING = "terminating"  # pre_terminate done (or skipped)
    DONE = "done"  # post_terminate done, allocation released


class WorkloadLifecycle:
    """Drives the hooks of one workload; see the module docstring for the guarantees."""

    def __init__(
        self,
        agent_id: AgentId,
        workload: Workload,
        targets: Sequence[HookTarget],
        *,
        release: Callable[[], object],
        on_phase: PhaseListener | None = None,
        notify: EventSink | None = None,
        allocation: Mapping[DeviceName, DeviceAllocation] | None = None,
        on_start: PhaseListener | None = None,
        hook_timeout: Decimal = DEFAULT_HOOK_TIMEOUT,
        on_config: ConfigListener | None = None,
    ) -> None:
        self.agent_id = agent_id
        self._on_config = on_config
        self.workload = workload
        self.targets = tuple(targets)
        self.state = LifecycleState.NEW
        self._release = release
        self._released = False
        self._on_phase = on_phase
        self._on_start = on_start
        self.hook_timeout = hook_timeout
        #: ``plugin`` for each ``post_terminate`` that timed out (started, never completed)
        self.unfinished: list[DeviceName] = []
        self._notify = notify
        self._announced = False  # observers saw pre_create, so they will see post_terminate
        self._prepared: list[tuple[DeviceName, AbstractLifecycleHook]] = []
        self._errors: list[BaseException] = []
        self._allocation = (
            {t.key: t.device_alloc for t in self.targets} if allocation is None else allocation
        )

    @classmethod
    def resume(
        cls,
        agent_id: AgentId,
        workload: Workload,
        hooks: Sequence[tuple[DeviceName, AbstractLifecycleHook]],
        *,
        release: Callable[[], object],
        on_phase: PhaseListener | None = None,
        allocation: Mapping[DeviceName, DeviceAllocation] | None = None,
        notify: EventSink | None = None,
        on_start: PhaseListener | None = None,
        hook_timeout: Decimal = DEFAULT_HOOK_TIMEOUT,
    ) -> WorkloadLifecycle:
        """A driver for a workload that is already gone, to finish its teardown.

        ``hooks`` are the hooks (rebuilt from the record) whose ``pre_create`` succeeded and whose
        ``post_terminate`` has not run; only :meth:`post_terminate` is left to call.
        """
        driver = cls(
            agent_id,
            workload,
            (),
            release=release,
            on_phase=on_phase,
            notify=notify,
            allocation=allocation or {},
            on_start=on_start,
            hook_timeout=hook_timeout,
        )
        driver._prepared = list(hooks)
        driver._announced = True
        driver.state = LifecycleState.TERMINATING
        return driver

    @property
    def allocation(self) -> dict[DeviceName, DeviceAllocation]:
        """What the workload holds, per plugin."""
        return dict(self._allocation)

    @property
    def released(self) -> bool:
        """Whether the allocation has been released."""
        return self._released

    # -- creation --------------------------------------------------------------------------------

    async def prepare(self) -> WorkloadConfig:
        """Run every ``pre_create`` in order and return the merged, checked config."""
        if self.state is not LifecycleState.NEW:
            msg = f"workload {self.workload.id!r}: prepare() called in state {self.state.value}"
            raise WorkloadError(msg)
        parts: list[tuple[str, WorkloadConfig]] = []
        try:
            for target in self.targets:
                self._phase_start(target.key, WorkloadPhase.PRE_CREATE)
                config = await self._made_and_prepared(target)
                self._phase_done(target.key, WorkloadPhase.PRE_CREATE)
                validate_config(target.key, config)
                if self._on_config is not None:
                    self._on_config(target.key, config)
                parts.append((target.key, config))
            merged = merge_configs(parts)
        except BaseException as exc:
            self.state = LifecycleState.TERMINATING
            await self._finish(cause=exc)
            raise
        self.state = LifecycleState.PREPARED
        self._event(WorkloadPhase.PRE_CREATE)
        self._announced = True
        return merged

    async def post_create(self) -> None:
        """Tell every hook, in order, that the workload exists; the first error stops it."""
        if self.state is not LifecycleState.PREPARED:
            msg = f"workload {self.workload.id!r}: post_create() called in state {self.state.value}"
            raise WorkloadError(msg)
        self.state = LifecycleState.CREATED
        for key, hook in self._prepared:
            if not implements(hook, WorkloadPhase.POST_CREATE):
                self._phase_done(key, WorkloadPhase.POST_CREATE)
                continue
            self._phase_start(key, WorkloadPhase.POST_CREATE)
            await self._call(key, WorkloadPhase.POST_CREATE, hook.post_create)
            self._phase_done(key, WorkloadPhase.POST_CREATE)
        self._event(WorkloadPhase.POST_CREATE)

    # -- termination -----------------------------------------------------------------------------

    async def pre_terminate(self) -> None:
        """Before the workload stops: ``pre_terminate`` in reverse order (if it was created)."""
        if self.state in (LifecycleState.TERMINATING, LifecycleState.DONE):
            return
        was_created = self.state is LifecycleState.CREATED
        self.state = LifecycleState.TERMINATING
        if not was_created:
            return
        for key, hook in reversed(self._prepared):
            if not implements(hook, WorkloadPhase.PRE_TERMINATE):
                self._safe_phase_done(key, WorkloadPhase.PRE_TERMINATE)
                continue
            try:
                self._phase_start(key, WorkloadPhase.PRE_TERMINATE)
                await self._call(key, WorkloadPhase.PRE_TERMINATE, hook.pre_terminate)
            except Exception as exc:
                log.warning("plugin %s: pre_terminate failed", key, exc_info=True)
                self._errors.append(exc)
                continue
            self._safe_phase_done(key, WorkloadPhase.PRE_TERMINATE)
        self._event(WorkloadPhase.PRE_TERMINATE)

    async def post_terminate(self) -> None:
        """After the workload is gone: ``post_terminate`` in reverse order, then release.

        Raises one :class:`~accelkit.errors.WorkloadError` listing the hooks that failed, once
        everything else is done.
        """
        if self.state is LifecycleState.DONE:
            return
        await self.pre_terminate()
        await self._finish(cause=None)
        if errors := self._errors:
            self._errors = []
            details = "; ".join(str(e) for e in errors)
            msg = f"workload {self.workload.id!r}: teardown finished with errors: {details}"
            raise WorkloadError(msg) from errors[0]

    async def terminate(self) -> None:
        """``pre_terminate`` then ``post_terminate``, for a workload already stopped."""
        await self.pre_terminate()
        await self.post_terminate()

    async def _finish(self, *, cause: BaseException | None) -> None:
        hooks, self._prepared = self._prepared, []
        for key, hook in reversed(hooks):
            if not implements(hook, WorkloadPhase.POST_TERMINATE):
                self._safe_phase_done(key, WorkloadPhase.POST_TERMINATE)
                continue
            try:
                self._phase_start(key, WorkloadPhase.POST_TERMINATE)
            except Exception as exc:  # the intent is not recorded: do not call the hook
                self._errors.append(exc)
                self.unfinished.append(key)
                continue
            try:
                await self._call(key, WorkloadPhase.POST_TERMINATE, hook.post_terminate)
            except PluginTimeout as exc:
                log.warning("plugin %s: %s", key, exc)
                self._errors.append(exc)
                self.unfinished.append(key)  # recorded as started: retried later
                continue
            except Exception as exc:
                log.warning("plugin %s: post_terminate failed", key, exc_info=True)
                self._errors.append(exc)
            self._safe_phase_done(key, WorkloadPhase.POST_TERMINATE)
        self.state = LifecycleState.DONE
        if self._announced:
            self._event(WorkloadPhase.POST_TERMINATE)
        try:
            self._release_once()
        except Exception as exc:
            self._errors.append(exc)
        if cause is not None:
            for error in self._errors:
                cause.add_note(f"during cleanup: {error}")
            self._errors = []

    def _release_once(self) -> None:
        if self._released:
            return
        self._released = True  # set first: a release that raises is not retried
        self._release()

    # -- notifications ---------------------------------------------------------------------------

    async def _made_and_prepared(self, target: HookTarget) -> WorkloadConfig:
        """Make the plugin's hook and run its ``pre_create`` (the intent is recorded): one
        hand-off to the plugin's worker (:mod:`accelkit.workload.hook_start`). The hook, once
        made, joins the prepared ones (it gets ``post_terminate``); a hook never made has
        nothing to tear down, which is recorded, so the release frees its devices."""
        start = HookStart(target, self.workload, self.hook_timeout)
        try:
            if start.worker is None:  # no worker: two calls, as a call of no plugin runs
                start.hook = await self._create_hook(target)
                return await self._call(target.key, WorkloadPhase.PRE_CREATE, start.hook.pre_create)
            try:
                return await start.run()
            except Exception as exc:
                if isinstance(exc, AccelkitError) and start.hook is None:
                    raise  # accelkit's own (a device outside the mask), as _create_hook's
                named = _named(exc, target.key, start.method)
                if named is exc:
                    raise
                raise named from exc
        finally:
            if (hook := start.close()) is not None:
                self._prepared.append((target.key, hook))
            else:
                self._safe_phase_done(target.key, WorkloadPhase.POST_TERMINATE)

    async def _create_hook(self, target: HookTarget) -> AbstractLifecycleHook:
        """The plugin's hook, made on the plugin's worker; a plugin bug there is named like a
        hook's, accelkit's errors (a device outside the agent's mask, a timeout) pass as they
        are."""
        create = functools.partial(
            target.context.create_lifecycle_hook, self.workload, target.device_alloc
        )
        try:
            return await call_sync(target.key, "create_lifecycle_hook", self.hook_timeout, create)
        except AccelkitError:
            raise
        except Exception as exc:
            raise _named(exc, target.key, "create_lifecycle_hook") from exc

    async def _call(
        self, key: DeviceName, phase: WorkloadPhase, call: Callable[[], Awaitable[_T]]
    ) -> _T:
        try:
            return await call_async(key, phase.value, self.hook_timeout, call)
        except Exception as exc:  # not BaseException: cancellation passes as it is
            named = _named(exc, key, phase.value)
            if named is exc:
                raise
            raise named from exc

    def _phase_start(self, key: DeviceName, phase: WorkloadPhase) -> None:
        if self._on_start is not None:
            self._on_start(key, phase)

    def _phase_done(self, key: DeviceName, phase: WorkloadPhase) -> None:
        if self._on_phase is not None:
            self._on_phase(key, phase)

    def _safe_phase_done(self, key: DeviceName, phase: WorkloadPhase) -> None:
        # during teardown a failing listener must not rob later hooks of their post_terminate
        try:
            self._phase_done(key, phase)
        except Exception as exc:
            self._errors.append(exc)

    def _event(self, phase: WorkloadPhase) -> None:
        if self._notify is None:
            return
        event = WorkloadEvent(self.agent_id, self.workload, phase, self.allocation)
        try:
            self._notify(event)
        except Exception:
            log.warning("workload observers failed on %s", phase.value, exc_info=True)


def implements(hook: AbstractLifecycleHook, phase: WorkloadPhase) -> bool:
    """Whether ``hook`` has code of its own for ``phase``: the base class's empty
    ``post_create``, ``pre_terminate`` and ``post_terminate`` need no call, so no hand-off to
    the plugin's worker and no intent to record."""
    name = phase.value
    mine = getattr(hook, "__dict__", {}).get(name, getattr(type(hook), name, None))
    return mine is not getattr(AbstractLifecycleHook, name, None)


#: refusals that keep their type when named, so callers can still tell "never" from "later"
_REFUSALS: tuple[type[WorkloadError], ...] = (WorkloadCreationDenied, WorkloadCreationDeferred)


def _named(exc: Exception, key: DeviceName, where: str) -> Exception:
    """``exc``, raised by plugin ``key`` in ``where`` (a hook), as an error naming both.

    The caller raises it ``from exc``, so ``--verbose`` still shows the hook's traceback.
    """
    if isinstance(exc, PluginTimeout):  # "plugin 'cuda' timed out after 60 s in pre_create"
        return exc
    text = str(exc)
    if not isinstance(exc, WorkloadError):  # a bug or a library error: say which one
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    msg = f"plugin {key!r} {where}: {text or type(exc).__name__}"
    kind = next((k for k in _REFUSALS if isinstance(exc, k)), WorkloadError)
    return kind(msg)
