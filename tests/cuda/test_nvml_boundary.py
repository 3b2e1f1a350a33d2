"""The NVML boundary: absent readings, foreign errors and older nvidia-ml-py releases."""

from __future__ import annotations

import pytest

from accelkit_cuda.nvml import NVMLLibrary, text

from . import fake_nvml as fk


class OldNVML(fk.FakeNVML):
    """An nvidia-ml-py release without NUMA and core-count functions."""

    def __getattribute__(self, name: str):
        if name in {"nvmlDeviceGetNumaNodeId", "nvmlDeviceGetNumGpuCores"}:
            raise AttributeError(name)
        return super().__getattribute__(name)


def started(nvml: fk.FakeNVML) -> tuple[NVMLLibrary, fk.FakeGpu]:
    library = NVMLLibrary(nvml)
    library.init()
    return library, nvml.gpus[0]


def test_functions_missing_from_the_module_read_as_absent():
    library, gpu = started(OldNVML([fk.FakeGpu(0, numa_node=1)]))
    assert library.numa_node(gpu) is None
    assert library.core_count(gpu) is None


def test_functions_missing_from_the_driver_read_as_absent():
    gpu = fk.FakeGpu(0, numa_node=1, errors={"nvmlDeviceGetNumaNodeId": 13})
    library, handle = started(fk.FakeNVML([gpu]))
    assert library.numa_node(handle) is None


def test_other_errors_in_optional_readings_propagate():
    gpu = fk.FakeGpu(0, errors={"nvmlDeviceGetPowerUsage": fk.NVML_ERROR_GPU_IS_LOST})
    library, handle = started(fk.FakeNVML([gpu]))
    with pytest.raises(fk.NVMLError) as caught:
        library.power_usage(handle)
    assert library.error_code(caught.value) == fk.NVML_ERROR_GPU_IS_LOST


def test_foreign_exceptions_carry_no_nvml_code():
    library = NVMLLibrary(fk.FakeNVML())
    assert library.error_code(ValueError(15)) is None
    odd = fk.NVMLError(15)
    odd.value = "15"  # type: ignore[assignment]
    assert library.error_code(odd) is None


def test_text_decodes_ctypes_bytes():
    assert text(b"00000000:3B:00.0") == "00000000:3B:00.0"
    assert text("GPU-1") == "GPU-1"
