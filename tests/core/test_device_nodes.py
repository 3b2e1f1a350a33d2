"""The accelerator device nodes a workload is denied: what plugins' ``device_nodes`` name.

No lifecycle hook is asked about a stand-in workload: a plugin whose ``pre_create`` blocks
holds up no run that does not use it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, ClassVar

import pytest

from accelkit.errors import WorkloadCreationDenied
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook
from accelkit.types import (
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotName,
    SlotSpec,
    SlotType,
    WorkloadConfig,
)
from accelkit.workload.device_nodes import denied_device_nodes, names_device_nodes

LIMIT = Decimal("0.3")
#: a blocked call that nobody cut off would take this long; the tests never wait for it
HANG = 3600.0
released = threading.Event()  # set at the end of the module: a blocked worker then ends


@pytest.fixture(autouse=True, scope="module")
def _release_blocked_workers():
    yield
    released.set()


class BlockingHook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        released.wait(HANG)  # blocks instead of awaiting
        return WorkloadConfig()


class NodePlugin(AbstractComputePlugin):
    """Like the cuda plugin: one node per device plus a control node with any device."""

    key: ClassVar[DeviceName] = DeviceName("npu")
    api_version: ClassVar[str] = "2.0"
    lifecycle_hook_class = BlockingHook
    answer: ClassVar[Any] = None  # what device_nodes returns instead, when set

    def __init__(self, count: int) -> None:
        super().__init__()
        self.remember_devices(
            ComputeDevice(self.key, DeviceId(f"{self.key}{i}"), f"pci:{i}", 0, 0, 0)
            for i in range(count)
        )

    async def list_devices(self) -> Sequence[ComputeDevice]:
        return self.devices

    def configurable_slots(self) -> Sequence[SlotSpec]:
        return [SlotSpec(SlotName(f"{self.key}.device"), SlotType.COUNT)]

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        slot = SlotName(f"{self.key}.device")
        return {d.device_id: DeviceSlotInfo(SlotType.COUNT, slot, Decimal(1)) for d in devices}

    def device_nodes(self, devices: Sequence[ComputeDevice]) -> Sequence[str]:
        if self.answer is not None:
            return self.answer  # type: ignore[no-any-return]
        nodes = [f"/dev/{self.key}{d.device_id.removeprefix(self.key)}" for d in devices]
        return [*nodes, f"/dev/{self.key}ctl"]


class Broken(NodePlugin):
    key = DeviceName("bad")

    def device_nodes(self, devices: Sequence[ComputeDevice]) -> Sequence[str]:
        raise WorkloadCreationDenied("bad: driver gone")


class Blocking(NodePlugin):
    key = DeviceName("stuck")

    def device_nodes(self, devices: Sequence[ComputeDevice]) -> Sequence[str]:
        released.wait(HANG)
        return []


class NoNodes(NodePlugin):
    """A cpu-like plugin: no device nodes (the default), a pre_create that blocks."""

    key = DeviceName("cores")
    device_nodes = AbstractComputePlugin.device_nodes


def one(key: str, device: str) -> dict[DeviceName, Any]:
    return {DeviceName(key): {SlotName(f"{key}.device"): {DeviceId(device): Decimal(1)}}}


def test_the_nodes_of_devices_not_granted_are_denied():
    plugins = {DeviceName("npu"): NodePlugin(3)}
    denied, problems = asyncio.run(denied_device_nodes(plugins, one("npu", "npu1"), LIMIT))
    assert denied == {"/dev/npu0", "/dev/npu2"}  # the control node is granted with any device
    assert problems == []


def test_a_workload_without_the_plugins_devices_is_denied_all_of_them():
    plugins = {DeviceName("npu"): NodePlugin(2)}
    denied, _ = asyncio.run(denied_device_nodes(plugins, {}, LIMIT))
    assert denied == {"/dev/npu0", "/dev/npu1", "/dev/npuctl"}


def test_a_grant_of_nothing_on_a_device_grants_none_of_its_nodes():
    plugins = {DeviceName("npu"): NodePlugin(2)}
    allocation = {DeviceName("npu"): {SlotName("npu.device"): {DeviceId("npu0"): Decimal(0)}}}
    denied, _ = asyncio.run(denied_device_nodes(plugins, allocation, LIMIT))
    assert denied == {"/dev/npu0", "/dev/npu1", "/dev/npuctl"}


def test_a_plugin_whose_device_nodes_fails_is_named_and_its_nodes_not_denied():
    plugins = {DeviceName("bad"): Broken(2), DeviceName("npu"): NodePlugin(1)}
    denied, problems = asyncio.run(denied_device_nodes(plugins, {}, LIMIT))
    assert denied == {"/dev/npu0", "/dev/npuctl"}  # the working plugin's
    assert problems == ["cannot tell the device nodes of plugin 'bad': bad: driver gone"]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ("/dev/npu0", "device_nodes returned str, not a sequence of paths"),
        (7, "device_nodes returned int, not a sequence of paths"),
        (["dev/npu0"], "device_nodes returned 'dev/npu0', not an absolute path"),
        ([None], "device_nodes returned None, not an absolute path"),
    ],
)
def test_device_nodes_that_are_not_paths_are_named(monkeypatch, answer, said):
    monkeypatch.setattr(NodePlugin, "answer", answer)
    denied, problems = asyncio.run(denied_device_nodes({"npu": NodePlugin(1)}, {}, LIMIT))
    assert denied == frozenset()
    assert problems == [f"cannot tell the device nodes of plugin 'npu': {said}"]


def test_device_nodes_that_block_are_cut_off_at_the_limit_and_the_others_still_answer():
    plugins = {DeviceName("stuck"): Blocking(1), DeviceName("npu"): NodePlugin(1)}
    began = time.monotonic()
    denied, problems = asyncio.run(denied_device_nodes(plugins, {}, LIMIT))
    assert time.monotonic() - began < HANG / 10
    assert denied == {"/dev/npu0", "/dev/npuctl"}
    assert problems == [
        "cannot tell the device nodes of plugin 'stuck': "
        "plugin 'stuck' timed out after 0.3 s in device_nodes"
    ]


def test_no_hook_is_asked_and_a_plugin_without_device_nodes_is_left_out():
    cores = NoNodes(2)  # its pre_create would block for an hour
    assert not names_device_nodes(cores)
    assert names_device_nodes(NodePlugin(1))
    plugins = {DeviceName("cores"): cores, DeviceName("npu"): NodePlugin(1)}
    denied, problems = asyncio.run(denied_device_nodes(plugins, one("cores", "cores0"), LIMIT))
    assert denied == {"/dev/npu0", "/dev/npuctl"}
    assert problems == []


MEET = 30.0  # far longer than two calls on any machine; only a failure waits for it


class Meeting(NodePlugin):
    """Answers only once every plugin of the test has been asked (a barrier across workers)."""

    key = DeviceName("meet")
    barrier: ClassVar[threading.Barrier]

    def device_nodes(self, devices: Sequence[ComputeDevice]) -> Sequence[str]:
        if len(devices) == len(self.devices):  # the question over every device
            self.barrier.wait(MEET)  # broken (an error) if the other is not asked meanwhile
        return super().device_nodes(devices)


class OtherMeeting(Meeting):
    key = DeviceName("meet2")


def test_every_plugin_is_asked_at_once(monkeypatch):
    # each waits for the other inside device_nodes: asked one after the other, the first would
    # give up waiting (and the second find the barrier broken)
    monkeypatch.setattr(Meeting, "barrier", threading.Barrier(2), raising=False)
    plugins = {DeviceName("meet"): Meeting(1), DeviceName("meet2"): OtherMeeting(1)}
    denied, problems = asyncio.run(denied_device_nodes(plugins, {}, Decimal(2 * MEET)))
    assert problems == []
    assert denied == {"/dev/meet0", "/dev/meetctl", "/dev/meet20", "/dev/meet2ctl"}


class Counting(NodePlugin):
    """Answers ``answer`` and counts the questions."""

    key = DeviceName("counted")

    def device_nodes(self, devices: Sequence[ComputeDevice]) -> Sequence[str]:
        self.asked = [*getattr(self, "asked", []), [d.device_id for d in devices]]
        return super().device_nodes(devices)


def test_a_plugin_whose_devices_have_no_nodes_is_not_asked_about_the_grant():
    empty = Counting(2)
    empty.answer = []
    plugins = {DeviceName("counted"): empty}
    denied, problems = asyncio.run(denied_device_nodes(plugins, one("counted", "counted0"), LIMIT))
    assert (denied, problems) == (frozenset(), [])
    assert empty.asked == [["counted0", "counted1"]]  # every device, once; no grant asked
    named = Counting(2)
    plugins = {DeviceName("counted"): named}
    denied, _ = asyncio.run(denied_device_nodes(plugins, one("counted", "counted0"), LIMIT))
    assert denied == {"/dev/counted1"}
    assert named.asked == [["counted0", "counted1"], ["counted0"]]
