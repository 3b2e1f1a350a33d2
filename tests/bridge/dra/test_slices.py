"""The node's pool as ResourceSlices: limits, attributes, consumable capacity, counters, taints."""

from __future__ import annotations

from decimal import Decimal

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.bridge.dra.devices import DraDevice, dns_label
from accelkit.bridge.dra.slices import (
    MAX_DEVICES,
    MAX_DEVICES_TAINTED,
    capacity_name,
    pool_slices,
    quantity,
)
from accelkit.health import DeviceHealth, HealthState
from accelkit.types import DeviceId, DeviceName, SlotName


def gpu(
    name: str,
    *,
    quantum: Decimal | None = None,
    counter_set: str | None = None,
    unhealthy: DeviceHealth | None = None,
    memory: int = 40 << 30,
) -> DraDevice:
    return DraDevice(
        name=name,
        plugin=DeviceName("cuda"),
        device_id=DeviceId(name),
        slot=SlotName("cuda.shares" if quantum else "cuda.device"),
        amount=Decimal(1),
        quantum=quantum,
        model="Mock GPU 40G",
        uuid=f"MOCK-{name}",
        numa_node=0,
        memory=memory,
        counter_set=counter_set,
        unhealthy=unhealthy,
    )


def slices_of(devices: list[DraDevice], generation: int = 1) -> list[dict]:  # type: ignore[type-arg]
    return pool_slices(
        devices, driver="accelkit.io", node="node-a", agent="a1", generation=generation
    )


def test_a_whole_device_has_its_attributes_and_memory() -> None:
    [one] = slices_of([gpu("cuda0")])
    spec = one["spec"]
    assert spec["driver"] == "accelkit.io"
    assert spec["nodeName"] == "node-a"
    assert spec["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    [device] = spec["devices"]
    assert device["name"] == "cuda0"
    assert device["attributes"] == {
        "plugin": {"string": "cuda"},
        "agent": {"string": "a1"},
        "deviceId": {"string": "cuda0"},
        "slot": {"string": "cuda.device"},
        "model": {"string": "Mock GPU 40G"},
        "uuid": {"string": "MOCK-cuda0"},
        "numaNode": {"int": 0},
    }
    assert device["capacity"] == {"memory": {"value": str(40 << 30)}}
    assert "allowMultipleAllocations" not in device
    assert "taints" not in device


def test_a_gpus_identity_is_among_its_attributes() -> None:
    identity = (("serial", "1650921000000"), ("pciBusID", "00000000:3B:00.0"))
    [one] = slices_of([attrs.evolve(gpu("cuda0"), identity=identity)])
    [device] = one["spec"]["devices"]
    assert device["attributes"]["serial"] == {"string": "1650921000000"}
    assert device["attributes"]["pciBusID"] == {"string": "00000000:3B:00.0"}


def test_identity_comes_from_what_the_plugin_found() -> None:
    from accelkit.bridge.dra.devices import _identity
    from accelkit.types import ComputeDevice

    found = ComputeDevice(
        DeviceName("cuda"),
        DeviceId("cuda0"),
        "0000:3b:00.0",
        0,
        1,
        1,
        "GPU",
        "GPU-a",
        extra={
            "serial": "165",
            "pci_bus_id": "00000000:3B:00.0",
            "minor": "0",
            "vbios_version": "",
        },
    )
    assert _identity(found) == (("serial", "165"), ("pciBusID", "00000000:3B:00.0"))
    assert _identity(None) == ()


def test_a_divisible_device_is_consumable_capacity_in_its_quantum() -> None:
    [one] = slices_of([gpu("cuda0", quantum=Decimal("0.05"))])
    [device] = one["spec"]["devices"]
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"] == {
        "shares": {
            "value": "1",
            "requestPolicy": {"default": "1", "validRange": {"min": "0.05"}},
        }
    }


def test_a_whole_number_quantum_is_the_step() -> None:
    device = attrs.evolve(gpu("m0", quantum=Decimal(4096)), amount=Decimal(1 << 30))
    [one] = slices_of([device])
    [entry] = one["spec"]["devices"]
    policy = entry["capacity"]["shares"]["requestPolicy"]
    assert policy["validRange"] == {"min": "4096", "step": "4096"}


def test_an_unhealthy_or_cordoned_device_is_tainted_no_schedule() -> None:
    sick = DeviceHealth(HealthState.UNHEALTHY, "XID 79", Decimal(1_700_000_000))
    cordoned = DeviceHealth(HealthState.UNHEALTHY, "cordoned: maintenance", Decimal(1_700_000_000))
    [one] = slices_of([gpu("cuda0", unhealthy=sick), gpu("cuda1", unhealthy=cordoned)])
    taints = [d["taints"] for d in one["spec"]["devices"]]
    assert taints == [
        [
            {
                "key": "accelkit.io/unhealthy",
                "value": "cuda0",
                "effect": "NoSchedule",
            }
        ],
        [
            {
                "key": "accelkit.io/cordoned",
                "value": "cuda1",
                "effect": "NoSchedule",
            }
        ],
    ]


def test_mig_instances_and_their_gpu_draw_on_one_counter_set_in_its_own_slice() -> None:
    devices = [
        gpu("cuda0", counter_set="cuda0"),
        gpu("cuda0-mig1", counter_set="cuda0", memory=10 << 30),
        gpu("cuda0-mig2", counter_set="cuda0", memory=20 << 30),
    ]
    counters, listed = slices_of(devices)
    assert counters["spec"]["sharedCounters"] == [
        {"name": "cuda0", "counters": {"draw": {"value": str(30 << 30)}}}
    ]
    assert "devices" not in counters["spec"]
    draws = {
        d["name"]: d["consumesCounters"][0]["counters"]["draw"]["value"]
        for d in listed["spec"]["devices"]
    }
    # the whole GPU takes every instance's share; each instance its own
    assert draws == {
        "cuda0": str(30 << 30),
        "cuda0-mig1": str(10 << 30),
        "cuda0-mig2": str(20 << 30),
    }
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in (counters, listed)} == {2}


def test_instances_without_memory_draw_one_each() -> None:
    devices = [gpu("g", counter_set="g", memory=0), gpu("g-1", counter_set="g", memory=0)]
    counters, _listed = slices_of(devices)
    assert counters["spec"]["sharedCounters"][0]["counters"]["draw"]["value"] == "1"


def test_no_device_is_one_empty_slice() -> None:
    [one] = slices_of([])
    assert one["spec"]["devices"] == []


@settings(max_examples=40, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["whole", "shares", "sick", "mig"]), max_size=400),
    generation=st.integers(min_value=1, max_value=10**6),
)
def test_every_device_is_published_once_within_the_slice_limits(
    kinds: list[str], generation: int
) -> None:
    sick = DeviceHealth(HealthState.UNHEALTHY, "gone")
    devices = [
        gpu(
            f"d{i}",
            quantum=Decimal("0.01") if kind == "shares" else None,
            unhealthy=sick if kind == "sick" else None,
            counter_set="d0" if kind == "mig" else None,
        )
        for i, kind in enumerate(kinds)
    ]
    slices = slices_of(devices, generation)
    names = [d["name"] for s in slices for d in s["spec"].get("devices", [])]
    assert names == [d.name for d in devices]
    for s in slices:
        pool = s["spec"]["pool"]
        assert pool == {
            "name": "node-a",
            "generation": generation,
            "resourceSliceCount": len(slices),
        }
        listed = s["spec"].get("devices", [])
        limited = any("taints" in d or "consumesCounters" in d for d in listed)
        assert len(listed) <= (MAX_DEVICES_TAINTED if limited else MAX_DEVICES)
    assert len({s["metadata"]["name"] for s in slices}) == len(slices)


@given(st.text(max_size=80))
def test_names_are_dns_labels(text: str) -> None:
    label = dns_label(text)
    assert 1 <= len(label) <= 63
    assert label == label.strip("-")
    assert all(c.isascii() and (c.isdigit() or c.islower() or c == "-") for c in label)


def test_quantities_and_capacity_names() -> None:
    assert quantity(Decimal("0.250")) == "0.25"
    assert quantity(Decimal("4E+10")) == "40000000000"
    assert capacity_name("cuda.shares") == "shares"
    assert capacity_name("mem") == "mem"
    assert capacity_name("npu.9x") == "c9x"


def test_what_other_workloads_hold_is_not_offered() -> None:
    whole = attrs.evolve(gpu("cuda0"), held=Decimal(1), holders=("pid:42",))
    part = attrs.evolve(gpu("vgpu0", quantum=Decimal("0.05")), held=Decimal("0.5"))
    full = attrs.evolve(gpu("vgpu1", quantum=Decimal("0.05")), held=Decimal("0.98"))
    [one] = slices_of([whole, part, full])
    entries = {d["name"]: d for d in one["spec"]["devices"]}
    assert entries["cuda0"]["taints"] == [
        {"key": "accelkit.io/held", "value": "cuda0", "effect": "NoSchedule"}
    ]
    shares = entries["vgpu0"]["capacity"]["shares"]
    assert (shares["value"], shares["requestPolicy"]["default"]) == ("0.5", "0.5")
    assert "taints" not in entries["vgpu0"]
    assert entries["vgpu1"]["taints"][0]["key"] == "accelkit.io/held"
