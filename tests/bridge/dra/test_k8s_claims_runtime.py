"""The k8s-claims runtime without an API server: it cannot tell, so the booking is kept."""

from __future__ import annotations

import asyncio
from pathlib import Path

from accelkit.runtime.k8s_claims import K8sClaimsRuntime, claim_handle
from accelkit.runtime.registry import default_runtimes


def test_without_the_api_server_a_claim_is_neither_alive_nor_gone(tmp_path: Path) -> None:
    handle = claim_handle("default", "c1", "uid-1", "node-a", str(tmp_path / "no-kubeconfig"))
    runtime = K8sClaimsRuntime()
    assert asyncio.run(runtime.is_alive(handle)) is None
    assert runtime.describe(handle) == ["ResourceClaim default/c1 on node node-a"]
    assert handle.to_json()["details"] == {
        "namespace": "default",
        "name": "c1",
        "uid": "uid-1",
        "node": "node-a",
        "kubeconfig": str(tmp_path / "no-kubeconfig"),
    }


def test_every_accelkit_process_can_answer_for_claims() -> None:
    assert isinstance(default_runtimes()["k8s-claims"], K8sClaimsRuntime)
