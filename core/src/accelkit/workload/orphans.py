"""Orphan containers: this ledger's containers that no record names, found and removed.

Every container the docker runtime makes carries the ``io.accelkit.ledger`` label, the identity
of the ledger that booked it (:attr:`~accelkit.workload.ledger.Ledger.ledger_id`), and the
engine it was made on is noted in the ledger's ``container_engines`` table before it is
created. A container whose record is gone (freed by ``accelkit release --force`` while the
engine could not be reached, set aside as unreadable, lost to a crash in a path no
reconciliation covers) would otherwise run on, holding devices nobody has booked.
:func:`sweep_orphans` lists, on each noted engine, the containers with this ledger's label,
and stops (with the grace) and removes those whose ``(agent, workload)`` has no record.

The race with a concurrent accelkit process: its record is written, and committed, before its
container is created (the booking precedes ``create``), and records are removed only after the
container is (teardown: stop, hooks, free). So the sweep lists the containers *first* and reads
the records *after*, inside a ledger transaction (``BEGIN IMMEDIATE``, the lock every booking
holds): a container that was listed has its record committed by then, or a booking holding the
lock is waited for. On top of that a container younger than :data:`ORPHAN_MIN_AGE_S` (on the
engine's clock) is never swept, for programs that create before they record.

A ledger with no noted engine (process-runtime workloads only) costs nothing: no engine is
asked. An engine that cannot be reached is a problem in the report, never an error; a unix
socket that does not exist is not even connected to.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import attrs

from accelkit.errors import WorkloadError
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.workload.container_engines import (
    container_engines,
    missing_socket,
    note_container_engine,
)

if TYPE_CHECKING:  # a ledger whose records name no engine imports no docker module
    from accelkit.runtime.docker import DockerRuntime
    from accelkit.runtime.docker_values import ContainerRecord
    from accelkit.workload.ledger import Ledger

__all__ = [
    "ORPHAN_GRACE_S",
    "ORPHAN_MIN_AGE_S",
    "OrphanContainer",
    "SweepReport",
    "container_engines",
    "note_container_engine",
    "sweep_orphans",
]

#: a container younger than this (seconds, the engine's clock) is never taken for an orphan
ORPHAN_MIN_AGE_S = 30.0
#: seconds between SIGTERM and SIGKILL when an orphan is stopped
ORPHAN_GRACE_S = 5.0
#: how long an engine may take to list its containers before the sweep gives it up
LIST_LIMIT_S = 5.0
#: how long removing one orphan may take beyond its grace
REMOVE_LIMIT_S = 60.0


@attrs.frozen(repr=False)
class OrphanContainer:
    """A container of this ledger that no record named; it was stopped and removed."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    id: str
    name: str
    agent_id: str
    workload_id: str
    engine: str

    @classmethod
    def of(cls, container: ContainerRecord) -> OrphanContainer:
        """From the engine's listing."""
        return cls(
            container.id,
            container.name,
            container.agent_id,
            container.workload_id,
            container.engine,
        )

    def message(self) -> str:
        """One line for the operator."""
        return (
            f"removed orphan container {self.name} ({self.id[:12]}) of workload "
            f"{self.workload_id!r}: no ledger record"
        )


@attrs.frozen(repr=False)
class SweepReport:
    """What a sweep removed, what it left because it was too young, and what went wrong."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    removed: tuple[OrphanContainer, ...] = ()
    #: names of containers without a record, spared because they were just created
    too_young: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    def __add__(self, other: SweepReport) -> SweepReport:
        return SweepReport(
            (*self.removed, *other.removed),
            (*self.too_young, *other.too_young),
            (*self.problems, *other.problems),
        )


async def sweep_orphans(
    ledger: Ledger,
    runtime: DockerRuntime,
    *,
    grace: float | None = None,
    min_age: float | None = None,
) -> SweepReport:
    """Stop and remove, on every engine the ledger noted, its containers that no record names.

    Each is stopped with ``grace`` seconds between SIGTERM and SIGKILL (default
    :data:`ORPHAN_GRACE_S`), side by side. ``min_age`` (default :data:`ORPHAN_MIN_AGE_S`)
    spares containers created less than that many seconds ago. See the module docstring for
    the race with a concurrent booking.
    """
    stop_grace = ORPHAN_GRACE_S if grace is None else grace
    age = ORPHAN_MIN_AGE_S if min_age is None else min_age
    report = SweepReport()
    for url in container_engines(ledger):
        report += await _sweep_engine(ledger, runtime, url, stop_grace, age)
    return report


async def _sweep_engine(
    ledger: Ledger, runtime: DockerRuntime, url: str, grace: float, min_age: float
) -> SweepReport:
    skipped = "orphan containers there were not looked for"
    if (path := missing_socket(url)) is not None:
        why = f"cannot reach the Docker engine at {url}: no socket {path}"
        return SweepReport(problems=(f"{why}; {skipped}",))
    ledger_id = ledger.ledger_id
    try:
        async with asyncio.timeout(LIST_LIMIT_S):
            listed = await runtime.containers(ledger_id=ledger_id, engine=url)
            now = await runtime.engine_clock(url)
    except TimeoutError:
        why = f"the Docker engine at {url} did not answer within {LIST_LIMIT_S:g} s"
        return SweepReport(problems=(f"{why}; {skipped}",))
    except WorkloadError as exc:  # RuntimeUnavailable: it cannot be reached
        return SweepReport(problems=(f"{exc}; {skipped}",))
    # only containers of this ledger, whatever the engine's filter did
    ours = [c for c in listed if c.ledger_id == ledger_id and c.agent_id and c.workload_id]
    old = [c for c in ours if c.created and now - c.created >= min_age]  # 0: age unknown
    # the records are read after the listing, under the lock a booking holds: a container
    # listed above has its record committed by now (see the module docstring)
    with ledger.transaction():
        orphans = [c for c in old if not ledger.exists(c.agent_id, c.workload_id)]
        too_young = tuple(
            c.name for c in ours if c not in old and not ledger.exists(c.agent_id, c.workload_id)
        )
    results = await asyncio.gather(*(_remove(runtime, c, grace) for c in orphans))
    removed = tuple(
        OrphanContainer.of(c) for c, result in zip(orphans, results, strict=True) if result is True
    )
    problems = tuple(result for result in results if isinstance(result, str))
    return SweepReport(removed, too_young, problems)


async def _remove(runtime: DockerRuntime, container: ContainerRecord, grace: float) -> bool | str:
    """``True`` when removed here, ``False`` when it was gone already, else the problem."""
    try:
        async with asyncio.timeout(grace + REMOVE_LIMIT_S):
            return await runtime.remove_container(container, grace)
    except TimeoutError:
        why = f"no answer within {grace + REMOVE_LIMIT_S:g} s"
    except WorkloadError as exc:
        why = str(exc)
    return (
        f"cannot remove orphan container {container.name} ({container.id[:12]}) of workload "
        f"{container.workload_id!r}: {why}"
    )
