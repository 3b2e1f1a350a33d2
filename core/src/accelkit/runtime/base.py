"""The runtime interface: what contains a workload and can always stop it (DESIGN §14).

A runtime turns a booked workload whose hooks have run into something running, and answers for
it until it is gone. The steps are split so that the ledger can record what identifies the
workload *before* any of the user's code runs:

1. :meth:`Runtime.new_workload` gives the workload its identity before anything is booked (the
   process runtime parks a leader process and names the workload ``pid:<n>``; the docker
   runtime picks a container name);
2. :meth:`Runtime.create` contains it (cgroups made and limited, container created) and returns
   the :class:`WorkloadHandle` the ledger records;
3. :meth:`Runtime.start` lets the user's command run;
4. :meth:`Runtime.wait`, :meth:`Runtime.signal` and :meth:`Runtime.stop` while it runs;
   :meth:`Runtime.is_alive` and :meth:`Runtime.adopt` from any later process (reconciliation,
   ``accelkit release``), through the recorded handle alone.

:meth:`Runtime.discard` gives up a workload that never started (a hook refused it, say).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import ClassVar

import attrs

from accelkit.errors import WorkloadError
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import AgentId, Workload, WorkloadConfig, WorkloadType


class RuntimeUnavailable(WorkloadError):
    """The runtime cannot be used here (no engine, no cgroup access, no such image)."""


class WorkloadUnreachable(RuntimeUnavailable):
    """The runtime cannot be reached to stop a workload or to say whether it still runs (its
    container engine does not answer): the workload may run on, so its devices stay booked."""


def _str_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return {str(k): str(v) for k, v in value.items()}


def _argv(value: Iterable[str]) -> tuple[str, ...]:
    # a function of ours, not ``tuple``: attrs reads a converter's signature, and a builtin's
    # is parsed from its text with the tokenizer's patterns, compiled for that alone
    return tuple(value)


@attrs.frozen(repr=False)
class WorkloadHandle:
    """What identifies a workload in its runtime; the ledger records it as plain strings.

    ``ident`` is the process runtime's cgroup path and the docker runtime's container id;
    ``details`` holds what else a later process needs to find it (per-controller directories,
    the engine's address) and what ``accelkit status`` shows.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    runtime: str
    ident: str
    details: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)

    def to_json(self) -> dict[str, object]:
        """Plain JSON for the ledger."""
        return {"runtime": self.runtime, "ident": self.ident, "details": dict(self.details)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> WorkloadHandle:
        """The inverse of :meth:`to_json`; ``ValueError`` on anything else."""
        runtime, ident, details = data.get("runtime"), data.get("ident"), data.get("details", {})
        if not isinstance(runtime, str) or not runtime or not isinstance(ident, str):
            msg = f"malformed workload handle: {data!r}"
            raise ValueError(msg)
        if not isinstance(details, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in details.items()
        ):
            msg = f"malformed workload handle details: {details!r}"
            raise ValueError(msg)
        return cls(runtime, ident, details)


@attrs.frozen(repr=False)
class LaunchSpec:
    """Everything a runtime needs to create one workload.

    ``config`` is the merged :class:`~accelkit.types.WorkloadConfig` of the hooks; each runtime
    renders it its own way. ``node_device_nodes`` are the accelerator device nodes of the whole
    node: a runtime that can deny device access denies those not among the config's DEVICE
    mounts. ``memory_limit_required`` is false when the operator accepted a run without one
    (``--no-memory-limit``). ``ledger_id`` is the identity of the ledger that booked the
    workload (:attr:`accelkit.workload.Ledger.ledger_id`): a runtime that labels what it makes
    labels it with that, so that what no record names can be found again. ``pids_max`` and
    ``terminal`` are said where they are declared.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    agent_id: AgentId
    workload: Workload
    argv: tuple[str, ...] = attrs.field(converter=_argv)
    config: WorkloadConfig = attrs.field(factory=WorkloadConfig)
    base_env: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)
    ledger_key: str = ""
    image: str | None = None
    node_device_nodes: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    memory_limit_required: bool = True
    ledger_id: str = ""
    #: the most processes (and threads) the workload may have at once (``pids.max``)
    pids_max: int | None = None
    #: ``<fds>:<path>``: a pseudo-terminal the workload gets as its controlling terminal on
    #: those descriptors (``012:/dev/pts/3``); empty for none (the process runtime's)
    terminal: str = ""


class Runtime(abc.ABC):
    """Contains workloads of one kind; see the module docstring for the order of the calls."""

    #: the name recorded in the ledger and given to ``accelkit run --runtime``
    name: ClassVar[str]
    #: the type of the workloads it runs
    workload_type: ClassVar[WorkloadType]
    #: whether it makes containers named after the workload id (a container record without a
    #: handle is asked of the one runtime that does); the kubelet-pods runtime makes none
    creates_containers: ClassVar[bool] = True

    @abc.abstractmethod
    async def new_workload(self, agent_id: AgentId) -> Workload:
        """A new workload's identity, before anything is booked for it."""

    @abc.abstractmethod
    async def create(self, spec: LaunchSpec) -> WorkloadHandle:
        """Contain the workload (nothing of the user's runs yet); raise ``RuntimeUnavailable``."""

    @abc.abstractmethod
    async def start(self, handle: WorkloadHandle) -> None:
        """Let the workload's command run."""

    @abc.abstractmethod
    async def wait(self, handle: WorkloadHandle) -> int:
        """Wait until the workload is gone; its shell-style exit status (128 + N for signal N)."""

    @abc.abstractmethod
    async def signal(self, handle: WorkloadHandle, signum: int) -> None:
        """Send ``signum`` to every process of the workload."""

    @abc.abstractmethod
    async def stop(self, handle: WorkloadHandle, grace: float) -> None:
        """SIGTERM everything, SIGKILL what outlives ``grace`` seconds, then remove what the
        runtime made (cgroups, the container). Idempotent; returns when nothing is left.
        ``WorkloadUnreachable`` when it cannot be told whether the workload still runs."""

    @abc.abstractmethod
    async def discard(self, workload: Workload, handle: WorkloadHandle | None) -> None:
        """Give up a workload that never started; idempotent."""

    @abc.abstractmethod
    async def is_alive(self, handle: WorkloadHandle) -> bool | None:
        """Whether anything of the workload still runs; ``None`` when it cannot be told."""

    async def adopt(self, handle: WorkloadHandle) -> bool:
        """Take over a workload recorded by another (dead) process; ``False`` when it is gone."""
        return bool(await self.is_alive(handle))

    async def exit_notes(self, handle: WorkloadHandle) -> list[str]:
        """Why the workload ended, where the runtime knows more than its status (an OOM kill);
        asked after :meth:`wait`, before :meth:`stop`."""
        return []

    def describe(self, handle: WorkloadHandle) -> list[str]:
        """Lines for ``accelkit run -v`` and ``accelkit status``: what contains the workload."""
        return [f"{self.name} {handle.ident}"]

    async def close(self) -> None:  # noqa: B027 - optional: most runtimes hold nothing
        """Release what the runtime holds (engine connections)."""


class TrackingRuntime(Runtime):
    """A runtime for workloads that something else runs (a kubelet's pods, Slurm's jobs).

    accelkit books their devices and runs the hooks, but never starts them: making, starting
    or waiting for one is refused with ``RuntimeUnavailable`` naming ``tracks``, and giving
    up a booking leaves nothing to remove. A subclass answers :meth:`is_alive` and
    :meth:`stop` (and may send signals) through the system that runs the workloads.
    """

    #: what the runtime follows, for the refusal: "pods the kubelet runs"
    tracks: ClassVar[str]
    creates_containers: ClassVar[bool] = False

    def _refuse(self) -> RuntimeUnavailable:
        msg = f"the {self.name} runtime only tracks {self.tracks}; it starts nothing"
        return RuntimeUnavailable(msg)

    async def new_workload(self, agent_id: AgentId) -> Workload:
        raise self._refuse()

    async def create(self, spec: LaunchSpec) -> WorkloadHandle:
        raise self._refuse()

    async def start(self, handle: WorkloadHandle) -> None:
        raise self._refuse()

    async def wait(self, handle: WorkloadHandle) -> int:
        raise self._refuse()

    async def signal(self, handle: WorkloadHandle, signum: int) -> None:
        raise self._refuse()

    async def discard(self, workload: Workload, handle: WorkloadHandle | None) -> None:
        return None
