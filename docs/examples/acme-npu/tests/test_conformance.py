"""The Acme NPU plugin against the accelkit conformance kit, over a fake sysfs tree."""

from __future__ import annotations

from pathlib import Path

import pytest
from acme_npu.plugin import AcmeNPUPlugin

from accelkit.testing import PluginConformance


def fake_card(root: Path, card: str, numa_node: int, busy: int) -> None:
    """A card's directory as the Acme driver writes it."""
    files = {
        "pci_address": f"0000:{card[3:]:0>2}:00.0",
        "numa_node": numa_node,
        "memory": 16 * 1024**3,
        "cores": 64,
        "model": "Acme NPU 16G",
        "busy": busy,
    }
    (root / card).mkdir(parents=True)
    for name, value in files.items():
        (root / card / name).write_text(f"{value}\n")


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    for i, card in enumerate(["npu0", "npu1", "npu2"]):
        fake_card(tmp_path / "acme_npu", card, numa_node=i % 2, busy=10 * i)
    return tmp_path / "acme_npu"


class TestAcmeNPU(PluginConformance):
    @pytest.fixture
    def plugin(self, sysfs: Path) -> AcmeNPUPlugin:
        return AcmeNPUPlugin({"sysfs-dir": str(sysfs)})
