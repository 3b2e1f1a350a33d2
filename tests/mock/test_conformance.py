"""Every mock kind passes the conformance kit."""

from __future__ import annotations

import pytest

from accelkit.testing import PluginConformance
from accelkit_mock import accelkit_compute_plugins

KINDS = [
    {"key": "cpu", "devices": [{"id": str(i), "numa-node": i % 2} for i in range(4)]},
    {"key": "mem", "devices": [{"memory": "4G"}]},
    {"key": "cuda", "devices": [{"id": f"cuda{i}", "memory": "40G"} for i in range(3)]},
    {
        "key": "npu",
        "allocation": "fractional",
        "quantum": "0.25",
        "devices": [{"id": "npu0", "amount": "1"}, {"id": "npu1", "amount": "2"}],
    },
]


class TestMockConformance(PluginConformance):
    @pytest.fixture(params=[k["key"] for k in KINDS])
    def plugin(self, request):
        (kind,) = [k for k in KINDS if k["key"] == request.param]
        (plugin,) = accelkit_compute_plugins(config={"kinds": [kind]})
        return plugin
