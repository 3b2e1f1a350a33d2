"""The accelkit conformance suite against the cuda plugin, over the fake and the real NVML."""

from __future__ import annotations

import pytest

from accelkit.errors import PluginUnavailable
from accelkit.testing import PluginConformance
from accelkit_cuda import CUDAPlugin

from . import fake_nvml as fk
from .support import no_gpu, run


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
    """Skips without a driver or GPU (fails under ``ACCELKIT_REQUIRE_GPU=1``)."""

    @pytest.fixture
    def plugin(self):
        probe = CUDAPlugin({})
        try:
            run(probe.init())
        except PluginUnavailable as exc:
            no_gpu(str(exc))
        run(probe.cleanup())
        return CUDAPlugin({})
