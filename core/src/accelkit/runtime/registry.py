"""The runtimes a node offers, by name (``accelkit run --runtime NAME``)."""

from __future__ import annotations

from accelkit.runtime.base import Runtime
from accelkit.runtime.docker import DockerRuntime
from accelkit.runtime.k8s_claims import K8sClaimsRuntime
from accelkit.runtime.kubelet_pods import KubeletPodsRuntime
from accelkit.runtime.process import ProcessRuntime
from accelkit.runtime.slurm_jobs import SlurmJobsRuntime


def default_runtimes() -> dict[str, Runtime]:
    """The runtimes shipped with accelkit, ready to use; built on demand, nothing starts yet."""
    runtimes: dict[str, Runtime] = {}
    runtimes[ProcessRuntime.name] = ProcessRuntime()  # cgroups are made per workload
    runtimes[DockerRuntime.name] = DockerRuntime()  # connects on first use
    runtimes[KubeletPodsRuntime.name] = KubeletPodsRuntime()  # asks the kubelet per call
    runtimes[SlurmJobsRuntime.name] = SlurmJobsRuntime()  # asks Slurm per call
    runtimes[K8sClaimsRuntime.name] = K8sClaimsRuntime()  # asks the API server per call
    return runtimes
