"""The runtimes shipped with accelkit, registered through the hook a third party uses.

Every plugin manager that builds runtimes registers this module (as ``accelkit-runtimes``), so
the built-ins and a distribution's runtimes are found, checked and listed the same way. The
classes are imported when the hook is called, so that importing this module starts nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from accelkit.hookspecs import hookimpl
from accelkit.runtime.base import Runtime

__all__ = ["NAME", "accelkit_runtimes"]

#: the name this module is registered under
NAME = "accelkit-runtimes"


@hookimpl
def accelkit_runtimes() -> Sequence[type[Runtime]]:
    """process and docker run workloads; kubelet-pods, slurm-jobs and k8s-claims track them."""
    from accelkit.runtime.docker import DockerRuntime
    from accelkit.runtime.k8s_claims import K8sClaimsRuntime
    from accelkit.runtime.kubelet_pods import KubeletPodsRuntime
    from accelkit.runtime.process import ProcessRuntime
    from accelkit.runtime.slurm_jobs import SlurmJobsRuntime

    return [ProcessRuntime, DockerRuntime, KubeletPodsRuntime, SlurmJobsRuntime, K8sClaimsRuntime]
