"""accelkit plugin for the Acme NPU, registered as entry point ``npu``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from accelkit import hookimpl
from acme_npu.plugin import AcmeNPUPlugin


@hookimpl
def accelkit_compute_plugins(config: Mapping[str, Any]) -> Sequence[AcmeNPUPlugin]:
    return [AcmeNPUPlugin(config)]
