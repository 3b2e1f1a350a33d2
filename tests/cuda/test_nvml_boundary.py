"""The NVML boundary: absent readings, foreign errors and older nvidia-ml-py releases."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pynvml  # nvidia-ml-py, a dependency of accelkit-cuda: no driver needed here
import pytest

import accelkit_cuda
from accelkit_cuda.nvml import NVMLCalls, text
from accelkit_cuda.nvml.library import NVMLLibrary

from . import fake_nvml as fk


class OldNVML(fk.FakeNVML):
    """An nvidia-ml-py release without NUMA and core-count functions."""

    def __getattribute__(self, name: str):
        if name in {"nvmlDeviceGetNumaNodeId", "nvmlDeviceGetNumGpuCores"}:
            raise AttributeError(name)
        return super().__getattribute__(name)


def started(nvml: fk.FakeNVML) -> tuple[NVMLLibrary, fk.FakeGpu]:
    library = NVMLLibrary.over(nvml)
    library.system.init()
    return library, nvml.gpus[0]


def test_functions_missing_from_the_module_read_as_absent():
    library, gpu = started(OldNVML([fk.FakeGpu(0, numa_node=1)]))
    assert library.devices.numa_node(gpu) is None
    assert library.devices.core_count(gpu) is None


def test_functions_missing_from_the_driver_read_as_absent():
    gpu = fk.FakeGpu(0, numa_node=1, errors={"nvmlDeviceGetNumaNodeId": 13})
    library, handle = started(fk.FakeNVML([gpu]))
    assert library.devices.numa_node(handle) is None


def test_other_errors_in_optional_readings_propagate():
    gpu = fk.FakeGpu(0, errors={"nvmlDeviceGetPowerUsage": fk.NVML_ERROR_GPU_IS_LOST})
    library, handle = started(fk.FakeNVML([gpu]))
    with pytest.raises(fk.NVMLError) as caught:
        library.readings.power_usage(handle)
    assert library.readings.error_code(caught.value) == fk.NVML_ERROR_GPU_IS_LOST


def test_foreign_exceptions_carry_no_nvml_code():
    calls = NVMLCalls(fk.FakeNVML())
    assert calls.error_code(ValueError(15)) is None
    odd = fk.NVMLError(15)
    odd.value = "15"  # type: ignore[assignment]
    assert calls.error_code(odd) is None


def test_text_decodes_ctypes_bytes():
    assert text(b"00000000:3B:00.0") == "00000000:3B:00.0"
    assert text("GPU-1") == "GPU-1"


# -- the fake behaves like the real pynvml ------------------------------------------------------

CODES = [
    fk.NVML_ERROR_UNINITIALIZED,
    fk.NVML_ERROR_INVALID_ARGUMENT,
    fk.NVML_ERROR_NOT_SUPPORTED,
    fk.NVML_ERROR_NO_PERMISSION,
    fk.NVML_ERROR_NOT_FOUND,
    fk.NVML_ERROR_INSUFFICIENT_SIZE,
    fk.NVML_ERROR_DRIVER_NOT_LOADED,
    fk.NVML_ERROR_LIBRARY_NOT_FOUND,
    fk.NVML_ERROR_FUNCTION_NOT_FOUND,
    fk.NVML_ERROR_GPU_IS_LOST,
    fk.NVML_ERROR_TIMEOUT,
    fk.NVML_ERROR_UNKNOWN,
]


@pytest.mark.parametrize("code", CODES)
def test_errors_are_per_code_subclasses_as_in_pynvml(code):
    real, fake = pynvml.NVMLError(code), fk.NVMLError(code)
    assert type(fake).__name__ == type(real).__name__
    assert isinstance(fake, fk.NVMLError)
    assert (fake.value, fake.args, str(fake)) == (real.value, real.args, str(real))
    # the subclass built without a code carries its own, as pynvml's do
    assert getattr(fk, type(fake).__name__)().value == code


def test_errors_are_unhashable_and_compare_by_code_as_in_pynvml():
    for module in (pynvml, fk):
        error = module.NVMLError(fk.NVML_ERROR_NOT_FOUND)
        with pytest.raises(TypeError, match="unhashable"):
            hash(error)
        assert error == module.NVMLError(fk.NVML_ERROR_NOT_FOUND)
        with pytest.raises(AttributeError):
            error == ValueError()  # noqa: B015 - pynvml's __eq__ fails on foreign objects


def test_the_mismatch_error_is_no_nvml_error_as_in_pynvml():
    assert not issubclass(pynvml.NVMLLibraryMismatchError, pynvml.NVMLError)
    assert not issubclass(fk.NVMLLibraryMismatchError, fk.NVMLError)


def test_the_fake_offers_the_functions_accelkit_calls_with_pynvml_names():
    called = {
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetNumGpuCores",
        "nvmlDeviceGetAttributes",
        "nvmlDeviceSetMemoryLimits_v1",
        "c_nvmlSetMemoryLimits_v1_t",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetSupportedEventTypes",
        "nvmlDeviceRegisterEvents",
        "nvmlEventSetCreate",
        "nvmlEventSetWait_v2",
        "nvmlEventSetFree",
    }
    assert all(hasattr(pynvml, name) for name in called)
    assert all(hasattr(fk.FakeNVML, name) for name in called)


def test_the_fake_and_the_plugin_use_pynvml_constants():
    from accelkit_cuda import health, nvml

    names = [n for n in dir(fk) if n.startswith(("nvmlEventType", "NVML_GPU_", "NVML_FI_"))]
    names += ["NVML_COMPUTE_INSTANCE_ID_ANY", "NVML_VALUE_TYPE_UNSIGNED_INT"]
    assert {n: getattr(fk, n) for n in names} == {n: getattr(pynvml, n) for n in names}
    assert nvml.FI_DEV_GET_GPU_RECOVERY_ACTION == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    assert nvml.ERROR_TIMEOUT == pynvml.NVML_ERROR_TIMEOUT
    assert nvml.ERROR_UNKNOWN == pynvml.NVML_ERROR_UNKNOWN
    assert nvml.GPU_INSTANCE_ANY == pynvml.NVML_GPU_INSTANCE_ID_ANY
    assert (
        pynvml.nvmlEventTypeXidCriticalError,
        pynvml.nvmlEventTypeDoubleBitEccError,
        pynvml.nvmlEventTypeGpuUnavailableError,
        pynvml.nvmlEventTypeGpuRecoveryAction,
    ) == (
        nvml.EVENT_XID_CRITICAL,
        nvml.EVENT_DOUBLE_BIT_ECC,
        nvml.EVENT_GPU_UNAVAILABLE,
        nvml.EVENT_GPU_RECOVERY_ACTION,
    )
    actions = {
        getattr(pynvml, f"NVML_GPU_RECOVERY_ACTION_{name}"): name
        for name in health.RECOVERY_ACTIONS.values()
    }
    assert actions == health.RECOVERY_ACTIONS


def test_a_mismatch_error_anywhere_reads_as_absent():
    class Mismatched(fk.FakeNVML):
        def nvmlDeviceGetNumGpuCores(self, handle):
            raise fk.NVMLLibraryMismatchError("no")

    library, gpu = started(Mismatched([fk.FakeGpu(0)]))
    assert library.devices.core_count(gpu) is None
    assert library.devices.gpu_sm_count(gpu) is None


def test_memory_limits_where_the_driver_has_them():
    library, gpu = started(fk.FakeNVML([fk.FakeGpu(0)], missing=set()))
    assert library.processes.set_memory_limit(gpu, "w1", 4 * fk.GIB) is True
    assert gpu.memory_limits == {"w1": (4 * fk.GIB, 4 * fk.GIB)}
    assert library.processes.set_memory_limit(gpu, "w1", None) is True
    assert gpu.memory_limits == {}


def test_memory_limits_are_skipped_where_the_driver_lacks_them():
    library, gpu = started(fk.FakeNVML([fk.FakeGpu(0)]))  # the default driver lacks the call
    assert library.processes.set_memory_limit(gpu, "w1", fk.GIB) is False
    unsupported = fk.FakeGpu(0, errors={"nvmlDeviceSetMemoryLimits_v1": 3})
    library, gpu = started(fk.FakeNVML([unsupported], missing=set()))
    assert library.processes.set_memory_limit(gpu, "w1", fk.GIB) is False
    lost = fk.FakeGpu(0, errors={"nvmlDeviceSetMemoryLimits_v1": fk.NVML_ERROR_GPU_IS_LOST})
    library, gpu = started(fk.FakeNVML([lost], missing=set()))
    with pytest.raises(fk.NVMLError):
        library.processes.set_memory_limit(gpu, "w1", fk.GIB)


def test_only_the_nvml_package_calls_pynvml():
    """The rest of the plugin reads NVML through a part of the boundary, never the module."""
    package = Path(accelkit_cuda.__file__).parent
    outside = [p for p in package.rglob("*.py") if "nvml" not in p.relative_to(package).parts]
    assert len(outside) > 10, "the plugin's modules were found"
    calls = {
        f"{path.name}:{node.lineno}"
        for path in outside
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and (node.attr == "module" or re.match(r"(c_)?nvml[A-Z]", node.attr))
    }
    assert calls == set()
