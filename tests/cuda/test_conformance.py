"""The accelkit conformance suite against the cuda plugin, over the fake and the real NVML."""

from __future__ import annotations

import pytest

from accelkit.testing import PluginConformance
from accelkit_cuda import CUDAPlugin

from . import fake_nvml as fk


class TestDiscreteGPUs(PluginConformance):
    @pytest.fixture
    def plugin(self, sysfs):
        return CUDAPlugin({}, nvml=fk.FakeNVML(fk.gpus(8)), sysfs_root=sysfs)


class TestFractionalUUIDs(PluginConformance):
    @pytest.fixture
    def plugin(self, sysfs):
        config = {"allocation": "fractional", "device-id": "uuid", "quantum": "0.5"}
        return CUDAPlugin(config, nvml=fk.FakeNVML(fk.gpus(2)), sysfs_root=sysfs)


class TestMIGAndWholeGPUs(PluginConformance):
    @pytest.fixture
    def plugin(self, sysfs):
        gpus = [fk.mig_gpu(0, ["3g.40gb", "1g.10gb"]), fk.FakeGpu(1)]
        return CUDAPlugin({}, nvml=fk.FakeNVML(gpus), sysfs_root=sysfs)


@pytest.mark.gpu
class TestRealNVML(PluginConformance):
    """Skips (through the suite's ``started`` fixture) without a driver or GPU."""

    @pytest.fixture
    def plugin(self):
        return CUDAPlugin({})
