"""The k8s-claims runtime: ResourceClaims that the DRA driver prepared on this node.

accelkit never starts these workloads: the kubelet runs the pods that use a claim. A handle
names the claim (namespace, name, uid), the node and how to reach the API server (a kubeconfig
file, or ``in-cluster``); the workload is alive while the claim still exists with that uid and
is reserved for a pod on this node that has not ended. An API server that cannot be reached is
``None`` (cannot tell): the booking is kept rather than hand out devices a pod may still use.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

from accelkit.runtime.base import RuntimeUnavailable, TrackingRuntime, WorkloadHandle
from accelkit.types import WorkloadType

__all__ = ["IN_CLUSTER", "K8sClaimsRuntime", "api_client", "claim_handle"]

log = logging.getLogger(__name__)

#: the handle's ``kubeconfig`` when the API server is reached with the pod's service account
IN_CLUSTER = "in-cluster"
#: seconds one API call may take before the API server counts as unreachable
REQUEST_TIMEOUT = 5
_ENDED = frozenset({"Succeeded", "Failed"})
_clients: dict[str, Any] = {}


def api_client(kubeconfig: str) -> Any:
    """A ``kubernetes.client.ApiClient`` for ``kubeconfig`` (a file, or ``in-cluster``); one per
    source and process."""
    if (found := _clients.get(kubeconfig)) is not None:
        return found
    from kubernetes import client, config

    if kubeconfig == IN_CLUSTER:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        made = client.ApiClient(configuration)
    else:
        made = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    _clients[kubeconfig] = made
    return made


def claim_handle(namespace: str, name: str, uid: str, node: str, kubeconfig: str) -> WorkloadHandle:
    """The handle of a booking made for a claim prepared on ``node``."""
    return WorkloadHandle(
        K8sClaimsRuntime.name,
        f"{namespace}/{name}",
        {"namespace": namespace, "name": name, "uid": uid, "node": node, "kubeconfig": kubeconfig},
    )


def _claim_in_use(handle: WorkloadHandle) -> bool:
    """Whether the claim exists (same uid) and a live pod on the node holds it; raises the
    client's errors when the API server cannot be asked."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    details = handle.details
    api = api_client(details.get("kubeconfig", IN_CLUSTER))
    namespace, name = details.get("namespace", ""), details.get("name", "")
    try:
        claim: Any = client.ResourceV1Api(api).read_namespaced_resource_claim(
            name, namespace, _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    if claim.metadata.uid != details.get("uid"):
        return False  # deleted, and another claim of that name made since
    reserved = (claim.status.reserved_for if claim.status else None) or []
    core = client.CoreV1Api(api)
    for consumer in reserved:
        if consumer.resource != "pods":
            return True  # reserved for something else accelkit cannot follow: in use
        try:
            pod: Any = core.read_namespaced_pod(
                consumer.name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        if pod.metadata.uid != consumer.uid or pod.spec.node_name != details.get("node"):
            continue
        if pod.metadata.deletion_timestamp is None and (pod.status.phase not in _ENDED):
            return True
    return False


class K8sClaimsRuntime(TrackingRuntime):
    """Answers for bookings the DRA driver made; runs nothing itself."""

    name: ClassVar[str] = "k8s-claims"
    tracks: ClassVar[str] = "pods that use ResourceClaims"
    workload_type: ClassVar[WorkloadType] = WorkloadType.CONTAINER

    async def stop(self, handle: WorkloadHandle, grace: float) -> None:
        """Nothing to stop from here: pods are deleted through Kubernetes. Refused while a
        pod on the node still holds the claim (``accelkit release --force`` frees it anyway)."""
        if await self.is_alive(handle):
            msg = (
                f"ResourceClaim {handle.ident} is still reserved for a running pod on node "
                f"{handle.details.get('node')!r}; delete the pod through Kubernetes"
            )
            raise RuntimeUnavailable(msg)

    async def is_alive(self, handle: WorkloadHandle) -> bool | None:
        """Whether the claim still exists and is held by a live pod on the node; ``None``
        without the API server."""
        try:
            return await asyncio.to_thread(_claim_in_use, handle)
        except Exception as exc:  # the client's errors, an unreadable kubeconfig: cannot tell
            log.info("cannot ask the API server about claim %s: %s", handle.ident, exc)
            return None

    def describe(self, handle: WorkloadHandle) -> list[str]:
        return [f"ResourceClaim {handle.ident} on node {handle.details.get('node', '?')}"]
