"""accelkit-cuda: NVIDIA GPUs as accelkit devices, through NVML (nvidia-ml-py, ``pynvml``).

Importing this module is cheap: ``pynvml`` is imported by :meth:`CUDAPlugin.init` only, and
no GPU, driver or library makes the plugin ``unavailable`` with the reason.

Devices are ``cuda0``, ``cuda1``, … in NVML index order (or the GPU UUIDs). A GPU with MIG mode
on is not offered whole: each MIG instance is a device named by its GPU-instance id
(``cuda0-mig7``, or its ``MIG-…`` UUID) in the UNIQUE slot ``cuda.mig-<profile>``, ``<profile>``
being NVIDIA's name such as ``1g.10gb``. ``cuda.device``, ``cuda.shares`` and ``cuda.mig-*``
cannot be requested together.

Host-config keys, in ``[plugins.config.cuda]``:

``device-id``
    ``"index"`` (default): ``cuda<index>``; ``"uuid"``: the NVML UUID (``GPU-…``, ``MIG-…``).
``allocation``
    ``"discrete"`` (default): slot ``cuda.device``, 1 per GPU;
    ``"fractional"``: slot ``cuda.shares``, ``shares-per-device`` per GPU.
``shares-per-device``
    Capacity of one GPU in ``cuda.shares``, a decimal string (default ``"1"``); a multiple of
    ``quantum``.
``quantum``
    Smallest grant of ``cuda.shares``, a decimal string (default ``"0.01"``).
``allow-fragmentation``
    ``true`` (default) or ``false``: whether a share request may spread over more GPUs than it
    needs (see ``FractionAllocMap``).
``health-interval``
    Seconds between two readings of every GPU's health while ``watch_health()`` runs (lost
    GPU, recovery action), default ``5``; XID and ECC events arrive as they happen.

``shares``
    ``"advisory"`` (default) or ``"enforced"``: refuse a ``cuda.shares`` grant that CUDA MPS
    cannot enforce (see :mod:`accelkit_cuda.shares`).
``mps``
    ``true`` (default): enforce shares of one GPU through CUDA MPS where the control
    executable exists; ``false``: never.
``mps-control``
    The MPS control executable, a path or a name on ``PATH`` (``nvidia-cuda-mps-control``).
``mps-directory``
    Where the MPS daemons' pipe and log directories go (default: ``cuda-mps`` in the default
    state directory).

Health: see :mod:`accelkit_cuda.health` for what makes a GPU unhealthy and what recovers it.

Workload metrics find a workload's processes as :mod:`accelkit_cuda.processes` documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from accelkit import hookimpl
from accelkit_cuda.plugin import CUDAPlugin

__all__ = ["CUDAPlugin", "accelkit_compute_plugins"]


@hookimpl
def accelkit_compute_plugins(config: Mapping[str, Any]) -> Sequence[CUDAPlugin]:
    """The cuda plugin, configured from ``[plugins.config.cuda]``."""
    return [CUDAPlugin(config)]
