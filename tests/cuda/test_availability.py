"""init/cleanup: absent library, driver or GPU is ``unavailable``; NVML is opened and closed."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import accelkit_cuda
from accelkit.errors import PluginError, PluginUnavailable
from accelkit_cuda import CUDAPlugin

from . import fake_nvml as fk
from .support import run


def test_import_does_not_load_pynvml():
    code = "import sys, accelkit_cuda; print('pynvml' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_hookimpl_returns_one_configured_plugin():
    plugins = accelkit_cuda.accelkit_compute_plugins({"device-id": "uuid"})
    assert len(plugins) == 1
    assert isinstance(plugins[0], CUDAPlugin)
    assert plugins[0].settings.device_id == "uuid"
    assert plugins[0].key == "cuda"


def test_missing_pynvml_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(PluginUnavailable, match="nvidia-ml-py is not installed"):
        run(CUDAPlugin({}).init())


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (fk.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
        (fk.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
        (fk.NVML_ERROR_UNKNOWN, "Unknown Error"),
    ],
)
def test_nvml_init_error_is_unavailable_with_the_reason(code, reason):
    nvml = fk.FakeNVML(fk.gpus(1), init_error=code)
    with pytest.raises(PluginUnavailable, match=f"NVML could not start: {reason}"):
        run(CUDAPlugin({}, nvml=nvml).init())


def test_no_gpu_is_unavailable_and_nvml_is_shut_down():
    nvml = fk.FakeNVML([])
    with pytest.raises(PluginUnavailable, match="found no NVIDIA GPU"):
        run(CUDAPlugin({}, nvml=nvml).init())
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def test_count_error_is_unavailable_and_nvml_is_shut_down():
    nvml = fk.FakeNVML(fk.gpus(2), count_error=fk.NVML_ERROR_UNKNOWN)
    with pytest.raises(PluginUnavailable, match="could not count the GPUs: Unknown Error"):
        run(CUDAPlugin({}, nvml=nvml).init())
    assert nvml.shutdown_calls == 1


@pytest.fixture
def no_driver() -> None:
    """Skip where the real pynvml is missing or finds a working NVIDIA driver."""
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return
    pynvml.nvmlShutdown()
    pytest.skip("this machine has a working NVIDIA driver")


@pytest.mark.usefixtures("no_driver")
def test_real_pynvml_without_a_driver_is_unavailable():
    with pytest.raises(PluginUnavailable, match="NVML could not start"):
        run(CUDAPlugin({}).init())


def test_cleanup_shuts_nvml_down_once_and_is_repeatable():
    nvml = fk.FakeNVML(fk.gpus(1))
    plugin = CUDAPlugin({}, nvml=nvml)
    run(plugin.init())
    assert nvml.initialized
    run(plugin.cleanup())
    run(plugin.cleanup())
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)
    with pytest.raises(PluginError, match="not initialised"):
        run(plugin.list_devices())


def test_shutdown_error_is_logged_not_raised(caplog):
    nvml = fk.FakeNVML(fk.gpus(1), shutdown_error=fk.NVML_ERROR_UNKNOWN)
    plugin = CUDAPlugin({}, nvml=nvml)
    run(plugin.init())
    with caplog.at_level(logging.WARNING, logger="accelkit_cuda"):
        run(plugin.cleanup())
    assert "nvmlShutdown failed: Unknown Error" in caplog.text


def test_using_the_plugin_before_init_raises():
    plugin = CUDAPlugin({}, nvml=fk.FakeNVML(fk.gpus(1)))
    with pytest.raises(PluginError, match=r"call init\(\) first"):
        run(plugin.get_node_info())


@pytest.mark.usefixtures("no_driver")
def test_accelkit_plugins_reports_cuda_unavailable_on_a_machine_without_nvml():
    command = Path(sys.executable).with_name("accelkit")
    if not command.exists():
        pytest.skip("the accelkit command is not installed")
    result = subprocess.run(
        [str(command), "plugins", "--json"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["cuda"]["status"] == "unavailable"
    assert "NVML could not start" in rows["cuda"]["error"]


@pytest.mark.parametrize(("required", "outcome"), [("1", "error"), ("", "skipped")])
def test_without_a_gpu_the_real_checks_skip_or_fail_when_one_is_required(required, outcome):
    """``nox -s gpu`` sets ``ACCELKIT_REQUIRE_GPU=1``: there a machine without a usable GPU is a
    failure, not a run of skips that looks like a pass."""
    probe = CUDAPlugin({})
    try:
        run(probe.init())
    except PluginUnavailable:
        pass
    else:
        run(probe.cleanup())
        pytest.skip("this machine has a working NVIDIA driver")
    real = Path(__file__).with_name("test_real_gpu.py")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", str(real)],
        capture_output=True,
        text=True,
        env={**os.environ, "ACCELKIT_REQUIRE_GPU": required},
        timeout=120,
        check=False,
    )
    summary = result.stdout.strip().splitlines()[-1]
    assert outcome in summary, result.stdout  # a fixture that fails: an error of each test
    assert "passed" not in summary
    assert (result.returncode == 0) is (not required)
    if required:
        assert "ACCELKIT_REQUIRE_GPU=1: these checks must run" in result.stdout
