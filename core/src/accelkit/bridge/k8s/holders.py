"""Who holds the bridge's devices: other workloads of the ledger, and the kubelet's pods.

:class:`ForeignHolders` finds, once per tick, the devices of each resource that something
other than this bridge's pod bookings holds (``accelkit run``, a Slurm job, a DRA claim): the
bridge advertises them ``Unhealthy`` to the kubelet while they are held, so the kubelet neither
counts nor picks them, and notes on the holder's workload why (``accelkit status`` shows it).
:func:`name_pods` joins the bookings to the kubelet's PodResources answer: a booking the kubelet
lists gets its pod and container in its handle (``namespace/pod/container``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from accelkit.bridge.k8s.resources import K8sResource
from accelkit.node import Node
from accelkit.node.health_notes import HealthNote, add_notes
from accelkit.runtime.kubelet_pods import KubeletPodsRuntime, PodListing, with_holder
from accelkit.types import AgentId
from accelkit.workload.record import LedgerRecord

__all__ = ["ForeignHolders", "name_pods", "pod_booking"]

#: a note's ``state`` on the holder's workload while the bridge advertises its device unhealthy
HELD_STATE = "held"


def pod_booking(record: LedgerRecord | None, agent_id: AgentId, resource: str) -> bool:
    """Whether ``record`` is a booking the bridge made for a pod, of ``agent_id``'s
    ``resource``."""
    return (
        record is not None
        and record.agent_id == agent_id
        and record.handle is not None
        and record.handle.runtime == KubeletPodsRuntime.name
        and record.handle.details.get("resource") == resource
    )


class ForeignHolders:
    """The devices of each resource held by something else, and who holds them."""

    def __init__(self, node: Node, agent_id: AgentId, resources: Sequence[K8sResource]) -> None:
        self.node = node
        self.agent_id = agent_id
        self.resources = resources
        #: per resource, device id -> ``workload 'W' of agent 'A'``
        self.held: dict[str, dict[str, str]] = {}
        #: per resource, whether each holder seen is one of the bridge's pod bookings
        self._ours: dict[str, dict[tuple[str, str], bool]] = {}

    def _scan(self, resource: K8sResource) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
        ledger = self.node.bookkeeper.ledger
        agent = self.node.agents[self.agent_id]
        ids: list[str] = [d.device_id for d in resource.devices(agent, {})]
        held: dict[str, str] = {}
        keys: dict[str, tuple[str, str]] = {}
        known = self._ours.get(resource.name, {})
        ours: dict[tuple[str, str], bool] = {}  # a record is read once while it holds
        for h in ledger.holders(resource.plugin, ids):
            key = (h.agent_id, h.workload_id)
            if key not in ours:
                if key in known:
                    ours[key] = known[key]
                else:
                    record = ledger.read(*key)
                    ours[key] = record is None or pod_booking(record, self.agent_id, resource.name)
            if ours[key]:
                continue
            held.setdefault(h.device_id, f"workload {h.workload_id!r} of agent {h.agent_id!r}")
            keys.setdefault(h.device_id, key)
        self._ours[resource.name] = ours
        return held, keys

    def update(self) -> list[dict[str, Any]]:
        """Look again; the events of what changed (``held`` and ``free``), each with a
        ``message``. A device newly held gets a note on its holder's workload."""
        events: list[dict[str, Any]] = []
        notes: list[HealthNote] = []
        for resource in self.resources:
            before = self.held.get(resource.name, {})
            now, keys = self._scan(resource)
            self.held[resource.name] = now
            for device, who in sorted(now.items()):
                if before.get(device) == who:
                    continue
                message = (
                    f"{resource.name} {device} advertised Unhealthy to the kubelet while "
                    f"{who} holds it"
                )
                events.append(
                    {"event": "held", "resource": resource.name, "device": device,
                     "holder": who, "message": message}
                )  # fmt: skip
                agent, workload = keys[device]
                notes.append(
                    HealthNote(
                        AgentId(agent), workload, str(int(time.time())), resource.plugin,
                        device, HELD_STATE,
                        f"advertised Unhealthy to the kubelet as {resource.name} while this "
                        "workload holds it",
                    )
                )  # fmt: skip
            for device in sorted(set(before) - set(now)):
                message = f"{resource.name} {device} advertised to the kubelet again (free)"
                events.append(
                    {"event": "free", "resource": resource.name, "device": device,
                     "message": message}
                )  # fmt: skip
        if notes:
            add_notes(self.node.bookkeeper.ledger, notes)
        return events


def name_pods(
    node: Node, agent_id: AgentId, resources: Sequence[K8sResource], listing: PodListing
) -> list[tuple[str, str]]:
    """Write the pod and container the kubelet lists into each booking that lacks them;
    ``(workload id, namespace/pod/container)`` of those written."""
    names = {r.name for r in resources}
    ledger = node.bookkeeper.ledger
    unnamed = [
        record
        for record in ledger.scan().records.values()
        if record.handle is not None
        and "pod" not in record.handle.details
        and "superseded-by" not in record.handle.details
        and any(pod_booking(record, agent_id, name) for name in names)
    ]
    named: list[tuple[str, str]] = []
    for record in unnamed:
        assert record.handle is not None
        details = record.handle.details
        wanted = frozenset(filter(None, details.get("devices", "").split(",")))
        found = listing.holders(details.get("resource", ""), wanted)
        exact = [c for c in found if c.device_ids == wanted] or found
        if not exact:
            continue
        with ledger.transaction():
            if ledger.read(*record.key) != record:  # changed meanwhile: next tick
                continue
            handle = with_holder(record.handle, exact[-1], listing.asked)
            ledger.write(record.with_handle(handle))
        named.append((record.workload.id, exact[-1].name))
    return named
