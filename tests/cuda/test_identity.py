"""Device identity: serial, PCI bus id, part number, VBIOS and driver versions through NVML,
in the devices, in ``accelkit devices`` and in the DCGM labels of the metrics."""

from __future__ import annotations

import json

import pytest

from accelkit.cli.app import main
from accelkit.discovery import PluginLoader
from accelkit.metrics_export.prometheus import device_labels

from . import fake_nvml as fk
from .support import FakeCUDADistribution as _FakeCUDA  # test_topology imports it here

IDENTITY = {
    "serial": "1650921000000",
    "board_part_number": "692-2G506-0210-002",
    "vbios_version": "92.00.9E.00.03",
    "driver_version": "550.54.15",
}


def test_a_gpu_carries_its_identity(start):
    (device,) = start([fk.FakeGpu(0, bus_id="00000000:3B:00.0")]).devices
    assert device.uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert {k: device.extra[k] for k in IDENTITY} == IDENTITY
    assert device.extra["pci_bus_id"] == "00000000:3B:00.0"


def test_a_board_without_serial_or_part_number_still_counts(start):
    # GeForce boards: nvmlDeviceGetSerial and ...BoardPartNumber answer NOT_SUPPORTED
    gpu = fk.FakeGpu(0, name="NVIDIA GeForce RTX 4090", serial=None, board_part_number=None)
    (device,) = start([gpu]).devices
    assert "serial" not in device.extra
    assert "board_part_number" not in device.extra
    assert device.extra["vbios_version"] == IDENTITY["vbios_version"]


@pytest.mark.parametrize(
    "code",
    [fk.NVML_ERROR_NO_PERMISSION, fk.NVML_ERROR_FUNCTION_NOT_FOUND, fk.NVML_ERROR_NOT_SUPPORTED],
)
def test_an_identity_field_nvml_refuses_is_left_out(start, code):
    gpu = fk.FakeGpu(0, errors={"nvmlDeviceGetSerial": code})
    (device,) = start([gpu]).devices
    assert "serial" not in device.extra
    assert device.extra["board_part_number"] == IDENTITY["board_part_number"]


def test_a_driver_without_the_identity_functions_hides_nothing(start):
    missing = {"nvmlDeviceGetSerial", "nvmlDeviceGetBoardPartNumber", "nvmlDeviceGetVbiosVersion"}
    nvml = fk.FakeNVML(fk.gpus(2), missing=missing)
    devices = start(nvml).devices
    assert [d.device_id for d in devices] == ["cuda0", "cuda1"]
    assert all(set(d.extra) & set(IDENTITY) == {"driver_version"} for d in devices)


def test_an_empty_serial_is_no_serial(start):
    (device,) = start([fk.FakeGpu(0, serial="  ")]).devices
    assert "serial" not in device.extra


def test_a_lost_gpu_is_skipped_not_half_identified(start, caplog):
    gpu = fk.FakeGpu(1, errors={"nvmlDeviceGetSerial": fk.NVML_ERROR_GPU_IS_LOST})
    devices = start([fk.FakeGpu(0), gpu]).devices
    assert [d.device_id for d in devices] == ["cuda0"]
    assert "skipping GPU 1" in caplog.text


def test_mig_instances_carry_their_boards_identity(start):
    devices = start([fk.mig_gpu(0, ["3g.40gb", "1g.10gb"])]).devices
    assert len(devices) == 2
    for device in devices:
        assert {k: device.extra[k] for k in IDENTITY} == IDENTITY


def test_metrics_labels_carry_the_serial(start):
    plain, geforce = start([fk.FakeGpu(0), fk.FakeGpu(1, serial=None)]).devices
    assert device_labels(plain)["serial"] == IDENTITY["serial"]
    assert device_labels(plain)["UUID"] == plain.uuid
    assert device_labels(plain)["pci_bus_id"] == "00000000:10:00.0"
    assert "serial" not in device_labels(geforce)


@pytest.fixture
def devices_cli(tmp_path, sysfs, monkeypatch, capsys):
    """``accelkit devices`` over a fake NVML; returns (status, stdout)."""
    config = tmp_path / "host.toml"
    config.write_text(
        f'[resource]\nstate-dir = "{tmp_path / "state"}"\n[plugins]\nallowed = ["cuda"]\n'
    )

    def run_cli(gpus: list[fk.FakeGpu], *args: str) -> tuple[int, str]:
        def loader(selection=None):
            made = PluginLoader(selection)
            made.register(_FakeCUDA(fk.FakeNVML(gpus), sysfs), "cuda")
            made.build()
            return made

        monkeypatch.setattr(PluginLoader, "from_entry_points", loader)
        status = main(["devices", "--config", str(config), *args])
        return status, capsys.readouterr().out

    return run_cli


def test_devices_json_shows_every_identity_field(devices_cli):
    status, out = devices_cli([fk.FakeGpu(0), fk.FakeGpu(1, serial=None)], "--json")
    assert status == 0
    first, second = json.loads(out)["cuda"]
    assert first["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert {k: first["extra"][k] for k in IDENTITY} == IDENTITY
    assert first["extra"]["pci_bus_id"] == "00000000:10:00.0"
    assert "serial" not in second["extra"]


def test_devices_table_has_a_uuid_column_for_gpus(devices_cli):
    status, out = devices_cli([fk.FakeGpu(0)])
    assert status == 0
    header = out.splitlines()[1].split()
    assert header[:3] == ["PLUGIN", "DEVICE", "UUID"]
    assert "GPU-00000000-0000-0000-0000-000000000000" in out


def test_devices_table_of_cores_and_memory_has_no_uuid_column(tmp_path, capsys):
    config = tmp_path / "host.toml"
    config.write_text(
        f'[resource]\nstate-dir = "{tmp_path / "state"}"\n[plugins]\nallowed = ["cpu", "mem"]\n'
    )
    assert main(["devices", "--config", str(config)]) == 0
    header = capsys.readouterr().out.splitlines()[1].split()
    assert header[:3] == ["PLUGIN", "DEVICE", "NUMA"]
