"""The committed DRA API stubs are what grpcio-tools generates from the committed protos."""

from __future__ import annotations

from pathlib import Path

import pytest

grpc_tools = pytest.importorskip("grpc_tools.protoc")

SRC = Path(__file__).resolve().parents[3] / "core" / "src"
API = Path("accelkit") / "bridge" / "dra" / "api"
PROTOS = ["dra_v1.proto", "dra_health_v1alpha1.proto", "pluginregistration_v1.proto"]


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
    from accelkit.bridge.dra.api import dra_health_v1alpha1_pb2 as health
    from accelkit.bridge.dra.api import dra_v1_pb2 as dra
    from accelkit.bridge.dra.api import pluginregistration_v1_pb2 as reg

    def services(module: object) -> dict[str, list[str]]:
        found = module.DESCRIPTOR.services_by_name.values()  # type: ignore[attr-defined]
        return {s.full_name: [m.name for m in s.methods] for s in found}

    assert services(dra) == {
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin": [
            "NodePrepareResources",
            "NodeUnprepareResources",
        ]
    }
    assert services(health) == {"v1alpha1.DRAResourceHealth": ["NodeWatchResources"]}
    assert services(reg) == {
        "pluginregistration.Registration": ["GetInfo", "NotifyRegistrationStatus"]
    }
    fields = {f.name: f.number for f in dra.Device.DESCRIPTOR.fields}
    assert fields == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    fields = {f.name: f.number for f in reg.PluginInfo.DESCRIPTOR.fields}
    assert fields == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
