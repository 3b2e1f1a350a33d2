"""Mock devices declare their slot's kind: ``slot`` and ``divisible`` in the device file.

The regression of a fractional kind: every slot of its fraction map was divided, so
``accelkit run --slots zeta.device=0.5`` twice gave both workloads ``zeta0``.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.errors import ConfigError, ConfigErrors, InvalidResourceArgument
from accelkit.partition import DevicePartition
from accelkit.testing.cli_runner import ACCELKIT, cli_env
from accelkit.types import AgentId, SlotName, SlotSpec, SlotType
from accelkit.workload import Ledger
from accelkit_mock.plugin import MockPlugin
from accelkit_mock.spec import load_kinds

ZETA = """\
[[kinds]]
key = "zeta"
allocation = "fractional"
quantum = "0.5"
[[kinds.devices]]
id = "zeta0"
slot = "device"
divisible = false
[[kinds.devices]]
id = "zeta1"
slot = "device"
divisible = false
[[kinds.devices]]
id = "zeta2"
amount = "2"
"""


def zeta_kinds(text: str = ZETA) -> list[dict[str, object]]:
    import tomllib

    kinds: list[dict[str, object]] = tomllib.loads(text)["kinds"]
    return kinds


def test_devices_declare_their_slot_and_its_kind() -> None:
    (kind,) = load_kinds({"kinds": zeta_kinds()})
    assert [(d.id, d.slot, d.divisible) for d in kind.devices] == [
        ("zeta0", "device", False),
        ("zeta1", "device", False),
        ("zeta2", "shares", True),
    ]
    plugin = MockPlugin.for_kind(kind, {})
    device, shares = SlotName("zeta.device"), SlotName("zeta.shares")
    assert plugin.configurable_slots() == [
        SlotSpec(device, SlotType.COUNT, f"Mock {device}", "", "mock device slot", divisible=False),
        SlotSpec(
            shares,
            SlotType.COUNT,
            f"Mock {shares}",
            "",
            "mock device slot",
            divisible=True,
            quantum=Decimal("0.5"),
        ),
    ]


def test_kinds_default_as_before() -> None:
    kinds = load_kinds(
        {
            "kinds": [
                {"key": "cpu", "allocation": "fractional", "devices": [{"id": "0"}]},
                {"key": "mem", "devices": [{"memory": "1G"}]},
                {"key": "gpu", "devices": [{"id": "g0"}]},
                {
                    "key": "npu",
                    "allocation": "fractional",
                    "devices": [{"id": "n0"}, {"id": "n1", "mig-profile": "1g"}],
                },
            ]
        }
    )
    kinds_by_key = {k.key: [d.divisible for d in k.devices] for k in kinds}
    assert kinds_by_key == {
        "cpu": [False],
        "mem": [True],
        "gpu": [False],
        "npu": [True, False],
    }
    specs = {
        s.name: (s.divisible, s.quantum)
        for k in kinds
        for s in MockPlugin.for_kind(k, {}).configurable_slots()
    }
    assert specs == {
        "cpu": (False, None),
        "mem": (True, Decimal(1)),
        "gpu.device": (False, None),
        "npu.shares": (True, Decimal("0.01")),
        "npu.mig-1g": (False, None),
    }


@pytest.mark.parametrize(
    ("kind", "device", "key", "message"),
    [
        ({"key": "cuda"}, {"divisible": "no"}, "divisible", "expected true or false"),
        ({"key": "cuda"}, {"slot": "Big GPU"}, "slot", "lower-case letters"),
        ({"key": "cuda"}, {"slot": "mig-1g"}, "slot", "'mig-' names MIG profiles"),
        ({"key": "cuda"}, {"slot": "x", "mig-profile": "1g"}, "slot", "named by its mig-profile"),
        ({"key": "cuda"}, {"divisible": True, "mig-profile": "1g"}, "divisible", "MIG-like"),
        ({"key": "cpu"}, {"divisible": True}, "divisible", "a core is handed out whole"),
        ({"key": "cpu"}, {"slot": "x"}, "slot", "the one slot 'cpu'"),
        ({"key": "mem"}, {"divisible": False}, "divisible", "divisible to the byte"),
        (
            {"key": "cuda", "allocation": "fractional", "quantum": "0.5"},
            {"divisible": False, "amount": "1.5"},
            "amount",
            "whole slot (divisible = false) has a whole amount",
        ),
    ],
)
def test_a_kind_that_cannot_be_is_refused_naming_the_key(
    kind: dict[str, object], device: dict[str, object], key: str, message: str
) -> None:
    entry = {"id": "root" if kind["key"] == "mem" else "d0", **device}
    with pytest.raises(ConfigError) as caught:
        load_kinds({"kinds": [{**kind, "devices": [entry]}]})
    errors = caught.value.errors if isinstance(caught.value, ConfigErrors) else [caught.value]
    found = {e.key: str(e) for e in errors}
    assert f"kinds[0].devices[0].{key}" in found, found
    assert message in found[f"kinds[0].devices[0].{key}"]


def test_one_slot_has_one_kind() -> None:
    text = ZETA.replace(
        'id = "zeta1"\nslot = "device"\ndivisible = false',
        'id = "zeta1"\nslot = "device"\ndivisible = true',
    )
    with pytest.raises(ConfigError) as caught:
        load_kinds({"kinds": zeta_kinds(text)})
    error = caught.value
    assert error.key == "kinds[0].devices[1].divisible"
    assert "device 'zeta0' makes slot 'zeta.device' whole" in str(error)


def test_the_fraction_map_of_a_kind_keeps_its_whole_slot_whole() -> None:
    (kind,) = load_kinds({"kinds": zeta_kinds()})
    plugin = MockPlugin.for_kind(kind, {})
    asyncio.run(plugin.discover())
    ids = tuple(d.device_id for d in plugin.devices)
    alloc_map = plugin.create_agent_context(AgentId("a"), DevicePartition(ids)).alloc_map
    with pytest.raises(InvalidResourceArgument, match="granted in whole units only"):
        alloc_map.allocate({SlotName("zeta.device"): Decimal("0.5")})
    assert alloc_map.allocate({SlotName("zeta.shares"): Decimal("0.5")}) == {
        "zeta.shares": {"zeta2": Decimal("0.5")}
    }


# -- through `accelkit run`, as the reproduction did ---------------------------------------


@pytest.fixture
def zeta_node(mock_node: Callable[..., Path]) -> Path:
    return mock_node(devices=ZETA)


def _run(config: Path, slots: str, *command: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*ACCELKIT, "run", "--config", str(config), "--slots", slots, "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )


def _wait_for(path: Path, process: subprocess.Popen[str]) -> str:
    """The file ``process`` writes once it runs (an event, not a time: the limit is generous)."""
    deadline = time.monotonic() + 120
    while not path.exists():
        if process.poll() is not None:
            _out, err = process.communicate()
            pytest.fail(f"the workload ended first ({process.returncode}): {err}")
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.05)
    return path.read_text().strip()


def test_half_a_whole_device_twice_is_refused_and_whole_ones_go_to_one_workload_each(
    zeta_node: Path, tmp_path: Path
) -> None:
    for _ in range(2):
        refused = _run(zeta_node, "zeta.device=0.5", "true")
        _out, err = refused.communicate(timeout=120)
        assert refused.returncode != 0
        assert "'zeta.device' is whole: it is granted in whole units only, not 0.5" in err
        assert "Traceback" not in err
    assert Ledger(tmp_path / "state").read_all() == {}

    seen, release = tmp_path / "seen", tmp_path / "release"
    script = f'echo "$MOCK_ZETA_DEVICES" > {seen}; while [ ! -e {release} ]; do sleep 0.05; done'
    first = _run(zeta_node, "zeta.device=1", "sh", "-c", script)
    try:
        held = _wait_for(seen, first)
        second = _run(zeta_node, "zeta.device=1", "sh", "-c", 'echo "$MOCK_ZETA_DEVICES"')
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
        assert {held, out.strip()} == {"zeta0", "zeta1"}
    finally:
        release.touch()
        first.communicate(timeout=120)
    assert first.returncode == 0
