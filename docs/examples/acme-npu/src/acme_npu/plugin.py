"""The Acme NPU: its driver shows each card as a directory of small files in sysfs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from accelkit import (
    Measurement,
    MetricContext,
    MetricType,
    NodeMetric,
    PluginUnavailable,
    natural_sort_key,
)
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook
from accelkit.types import (
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    Mount,
    SlotName,
    SlotSpec,
    SlotType,
    WorkloadConfig,
)

SLOT = SlotName("npu.device")


def read_card(config: Mapping[str, Any], card: str, name: str) -> str:
    """One file of a card's sysfs directory (``sysfs-dir`` in the host config moves it)."""
    root = Path(config.get("sysfs-dir", "/sys/class/acme_npu"))
    return (root / card / name).read_text().strip()


class AcmeNPUHook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        ids = self.allocated_device_ids
        return WorkloadConfig(
            env_vars={"ACME_VISIBLE_NPUS": ",".join(ids)},
            mounts=[Mount.device(f"/dev/acme_{i}") for i in ids],
            cdi_devices=[f"acme.example/npu={i}" for i in ids],
        )


class AcmeNPUPlugin(AbstractComputePlugin):
    key = DeviceName("npu")
    api_version = "2.0"  # the accelkit plugin API this plugin was written against
    lifecycle_hook_class = AcmeNPUHook

    async def list_devices(self) -> Sequence[ComputeDevice]:
        root = Path(self.config.get("sysfs-dir", "/sys/class/acme_npu"))
        if not root.is_dir():
            msg = f"no Acme NPU driver ({root} does not exist)"
            raise PluginUnavailable(msg)
        cards = sorted((card.name for card in root.iterdir()), key=natural_sort_key)
        return [
            ComputeDevice(
                device_name=self.key,
                device_id=DeviceId(card),
                hw_location=read_card(self.config, card, "pci_address"),
                numa_node=int(read_card(self.config, card, "numa_node")),
                memory_size=int(read_card(self.config, card, "memory")),
                processing_units=int(read_card(self.config, card, "cores")),
                model_name=read_card(self.config, card, "model"),
            )
            for card in cards
        ]

    def configurable_slots(self) -> Sequence[SlotSpec]:
        # whole cards: each goes to one workload, never a fraction of one
        return [
            SlotSpec(
                SLOT, SlotType.COUNT, display_name="Acme NPU", display_unit="NPU", divisible=False
            )
        ]

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        return {d.device_id: DeviceSlotInfo(SlotType.COUNT, SLOT, 1, d.numa_node) for d in devices}

    async def gather_node_metrics(self, ctx: MetricContext) -> Sequence[NodeMetric]:
        busy = {
            d.device_id: Measurement(read_card(self.config, d.device_id, "busy"), 100)
            for d in self.devices
        }
        mean = sum((m.value for m in busy.values()), Decimal(0)) / max(len(busy), 1)
        return [NodeMetric("busy", MetricType.UTILIZATION, "percent", Measurement(mean, 100), busy)]
