"""The runtimes shipped with accelkit, registered through the hook a third party uses.

Every plugin manager that builds runtimes registers this module (as ``accelkit-runtimes``), so
the built-ins and a distribution's runtimes are found, checked and listed the same way. The
classes are imported when the hook is called, so that importing this module starts nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import cast

from accelkit.hookspecs import hookimpl
from accelkit.runtime.base import Runtime

__all__ = ["CLASSES", "NAME", "accelkit_runtimes", "builtin_class"]

#: the name this module is registered under
NAME = "accelkit-runtimes"

#: accelkit's own runtimes by name: each class's module and name, so that a node knows them
#: all without importing them (a process run imports no container engine's or tracker's code)
CLASSES: dict[str, tuple[str, str]] = {
    "process": ("accelkit.runtime.process", "ProcessRuntime"),
    "docker": ("accelkit.runtime.docker", "DockerRuntime"),
    "kubelet-pods": ("accelkit.runtime.kubelet_pods", "KubeletPodsRuntime"),
    "slurm-jobs": ("accelkit.runtime.slurm_jobs", "SlurmJobsRuntime"),
    "k8s-claims": ("accelkit.runtime.k8s_claims", "K8sClaimsRuntime"),
}


def builtin_class(name: str) -> type[Runtime]:
    """The class of accelkit's runtime ``name`` (a key of :data:`CLASSES`), imported now."""
    module, qualname = CLASSES[name]
    return cast("type[Runtime]", getattr(importlib.import_module(module), qualname))


@hookimpl
def accelkit_runtimes() -> Sequence[type[Runtime]]:
    """process and docker run workloads; kubelet-pods, slurm-jobs and k8s-claims track them."""
    return [builtin_class(name) for name in CLASSES]
