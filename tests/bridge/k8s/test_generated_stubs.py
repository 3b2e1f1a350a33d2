"""The committed kubelet API stubs are what grpcio-tools generates from the committed protos."""

from __future__ import annotations

from pathlib import Path

import pytest

grpc_tools = pytest.importorskip("grpc_tools.protoc")

SRC = Path(__file__).resolve().parents[3] / "core" / "src"
API = Path("accelkit") / "runtime" / "kubelet_api"
PROTOS = ["deviceplugin_v1beta1.proto", "podresources_v1.proto"]


def test_regenerating_the_stubs_gives_the_committed_files(tmp_path: Path) -> None:
    args = [
        "protoc",
        f"-I{SRC}",
        f"--python_out={tmp_path}",
        f"--pyi_out={tmp_path}",
        f"--grpc_python_out={tmp_path}",
        *(str(API / p) for p in PROTOS),
    ]
    assert grpc_tools.main(args) == 0
    generated = sorted(p.name for p in (tmp_path / API).iterdir())
    assert generated == sorted(
        f"{Path(p).stem}{suffix}"
        for p in PROTOS
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
    )
    for name in generated:
        assert (tmp_path / API / name).read_text() == (SRC / API / name).read_text(), name


def test_the_wire_names_are_the_kubelets() -> None:
    from accelkit.runtime.kubelet_api import deviceplugin_v1beta1_pb2 as dp
    from accelkit.runtime.kubelet_api import podresources_v1_pb2 as pr

    assert dp.DESCRIPTOR.package == "v1beta1"
    assert pr.DESCRIPTOR.package == "v1"
    services = {
        s.full_name: [m.name for m in s.methods] for s in dp.DESCRIPTOR.services_by_name.values()
    }
    assert services == {
        "v1beta1.Registration": ["Register"],
        "v1beta1.DevicePlugin": [
            "GetDevicePluginOptions",
            "ListAndWatch",
            "GetPreferredAllocation",
            "Allocate",
            "PreStartContainer",
        ],
    }
    fields = {f.name: f.number for f in dp.ContainerAllocateResponse.DESCRIPTOR.fields}
    assert fields == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
    fields = {f.name: f.number for f in dp.ContainerPreferredAllocationRequest.DESCRIPTOR.fields}
    assert fields == {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    }
    fields = {f.name: f.number for f in pr.ContainerResources.DESCRIPTOR.fields}
    assert fields == {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    }
