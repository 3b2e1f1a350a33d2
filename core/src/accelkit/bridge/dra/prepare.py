"""Preparing and unpreparing claims: the ledger booking, the plugins' hooks, the CDI spec.

:meth:`ClaimPreparer.prepare` reads the claim from the API server, books its devices in the
node's ledger (workload ``k8s-claim:<namespace>/<name>:<uid>``, a ``k8s-claims`` handle written
with the booking), runs the plugins' ``pre_create``, writes the claim's CDI spec and hands the
record over: the claim's pods outlive the driver, and whichever accelkit process finds the claim
gone frees it. A claim already prepared is answered again without booking anything (the kubelet
retries). :meth:`ClaimPreparer.unprepare` runs the teardown, frees the devices and removes the
spec; a claim not prepared here is done already. Every refusal is one line naming the claim,
and nothing stays booked.

Before its answer a prepare writes the ledger once, synced: the booking and the intent of the
first ``pre_create`` are one write, durable before any hook runs (a hook made for it that fails
leaves nothing held). The hand-over is written after the answer, with the others answered
meanwhile (:mod:`accelkit.bridge.hand_over`); :meth:`ClaimPreparer.unprepare` writes the pending
ones first. A driver killed after answering and before that write leaves the claim booked
under its dead process, which every accelkit process judges through the claim's handle, as
it does a claim handed over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from accelkit.bridge.dra.claim_cdi import ClaimSpecs
from accelkit.bridge.dra.claims import ClaimBooking, ClaimRefused, claim_booking, claim_workload_id
from accelkit.bridge.dra.devices import DraDevice
from accelkit.bridge.hand_over import HandOvers
from accelkit.errors import AccelkitError
from accelkit.node import Node
from accelkit.runtime.k8s_claims import claim_handle
from accelkit.types import AgentId, Workload

__all__ = ["ClaimPreparer", "ClaimRef", "Prepared"]

log = logging.getLogger(__name__)


@attrs.frozen
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    name: str
    uid: str

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def workload_id(self) -> str:
        return claim_workload_id(self.namespace, self.name, self.uid)


@attrs.frozen
class Prepared:
    """A prepared claim: its booking and the CDI device its containers get."""

    booking: ClaimBooking
    cdi_device: str


class ClaimPreparer:
    """Prepares the claims of one driver and agent; see the module docstring."""

    def __init__(
        self,
        node: Node,
        agent_id: AgentId,
        *,
        driver: str,
        pool: str,
        node_name: str,
        kubeconfig: str,
        specs: ClaimSpecs,
        read_claim: Callable[[str, str, str], Awaitable[Any]],
        devices: Callable[[], Sequence[DraDevice]],
    ) -> None:
        self.node = node
        self.agent_id = agent_id
        self.driver = driver
        self.pool = pool
        self.node_name = node_name
        self.kubeconfig = kubeconfig
        self.specs = specs
        self._read_claim = read_claim
        self._devices = devices
        self._locks: dict[str, asyncio.Lock] = {}
        #: the claims answered and not handed over yet
        self.hand_overs = HandOvers(node.bookkeeper)

    def _lock(self, uid: str) -> asyncio.Lock:
        return self._locks.setdefault(uid, asyncio.Lock())

    async def _booking(self, ref: ClaimRef) -> ClaimBooking:
        from kubernetes.client.exceptions import ApiException

        try:
            claim = await self._read_claim(ref.namespace, ref.name, ref.uid)
        except ApiException as exc:
            if exc.status == 404:
                msg = f"claim {ref.label} does not exist"
                raise ClaimRefused(msg) from None
            msg = f"cannot read claim {ref.label} from the API server: {exc.status} {exc.reason}"
            raise ClaimRefused(msg) from None
        except OSError as exc:
            msg = f"cannot reach the API server to read claim {ref.label}: {exc}"
            raise ClaimRefused(msg) from None
        if claim.metadata.uid != ref.uid:
            msg = f"claim {ref.label} has uid {claim.metadata.uid}, not {ref.uid} (made anew)"
            raise ClaimRefused(msg)
        return claim_booking(claim, driver=self.driver, pool=self.pool, devices=self._devices())

    async def prepare(self, ref: ClaimRef) -> Prepared:
        """Book and prepare the claim (or answer again for one prepared already); raises
        :class:`ClaimRefused`."""
        async with self._lock(ref.uid):
            booking = await self._booking(ref)
            cdi_device = self.specs.device_id(ref.uid)
            if self.node.bookkeeper.ledger.exists(self.agent_id, ref.workload_id):
                if not self.specs.exists(ref.uid):
                    msg = (
                        f"claim {ref.label} is booked but its CDI spec "
                        f"{self.specs.path(ref.uid)} is gone; unprepare it to prepare it again"
                    )
                    raise ClaimRefused(msg)
                return Prepared(booking, cdi_device)
            await self._book(ref, booking)
            return Prepared(booking, cdi_device)

    async def _book(self, ref: ClaimRef, booking: ClaimBooking) -> None:
        handle = claim_handle(ref.namespace, ref.name, ref.uid, self.node_name, self.kubeconfig)
        try:
            record = await self.node.bookkeeper.book_devices(
                self.agent_id,
                Workload.container(ref.workload_id),
                booking.allocation(),
                handle=handle,
                started=True,  # pre_create's intent in the same write, synced
            )
        except AccelkitError as exc:
            msg = f"claim {ref.label}: cannot book its devices: {exc}{self._holders(booking)}"
            raise ClaimRefused(msg) from None
        lifecycle = self.node.lifecycle(record)
        try:
            config = await lifecycle.prepare()  # a failure tears down and frees
        except AccelkitError as exc:
            msg = f"claim {ref.label}: pre_create refused it: {exc}"
            raise ClaimRefused(msg) from None
        try:
            self.specs.write(ref.uid, ref.label, config)
        except (OSError, ValueError) as exc:
            await lifecycle.terminate()
            msg = f"claim {ref.label}: cannot write its CDI spec in {self.specs.directory}: {exc}"
            raise ClaimRefused(msg) from None
        self.hand_overs.add(record.key)

    def _holders(self, booking: ClaimBooking) -> str:
        """``" (held by ...)"``: the ledger's workloads holding any of the claim's devices."""
        wanted = {(r.device.plugin, r.device.device_id) for r in booking.results}
        holders = sorted(
            f"{workload} of agent {agent}"
            for (agent, workload), record in self.node.bookkeeper.ledger.scan().records.items()
            if any(
                (plugin, device) in wanted
                for plugin, slots in record.allocation.items()
                for devices in slots.values()
                for device in devices
            )
        )
        return f" (held by {', '.join(holders)})" if holders else ""

    async def unprepare(self, ref: ClaimRef) -> bool:
        """Tear down and free the claim's booking, remove its spec; whether one was booked.
        Raises :class:`ClaimRefused` while a live pod on the node still holds it."""
        async with self._lock(ref.uid):
            self.hand_overs.write()  # the release finds the claim handed over
            bookkeeper = self.node.bookkeeper
            if not bookkeeper.ledger.exists(self.agent_id, ref.workload_id):
                self.specs.remove(ref.uid)
                return False
            try:
                report = await bookkeeper.release_workload(
                    ref.workload_id, agent=self.agent_id, force=True
                )
            except AccelkitError as exc:
                msg = f"claim {ref.label}: cannot free its devices: {exc}"
                raise ClaimRefused(msg) from None
            for problem in report.errors:
                log.warning("claim %s: %s", ref.label, problem)
            self.specs.remove(ref.uid)
            self._locks.pop(ref.uid, None)
            return True
