"""A vendor breaks its plugin on purpose; the kit names each break as a rule with its fix.

Each case copies the tutorial's Acme NPU plugin (``docs/examples/acme-npu``), changes one
thing a vendor could get wrong, and runs the plugin's own conformance tests against the copy
in a fresh pytest. Every failed check must read ``breaks the rule ...`` and ``Fix: ...``,
whether the check found the break itself or the broken plugin raised inside it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a pytest run per break

ACME = Path(__file__).resolve().parents[2] / "docs" / "examples" / "acme-npu"
SLOTS = "DeviceSlotInfo(SlotType.COUNT, SLOT, 1, d.numa_node)"
BUSY = 'Measurement(read_card(self.config, d.device_id, "busy"), 100)'
HOOK = "        ids = self.allocated_device_ids\n"

#: break -> (text of acme_npu/plugin.py, what replaces it)
BREAKS = {
    "slot type differs from configurable_slots": (SLOTS, SLOTS.replace("COUNT", "BYTES")),
    "NUMA node differs from the device's": (SLOTS, SLOTS.replace("d.numa_node", "7")),
    "float slot amount": (SLOTS, SLOTS.replace(" 1,", " 1.0,")),
    "device slot of a device not asked for": (
        "for d in devices}",
        "for d in devices} | {DeviceId('npu9'): DeviceSlotInfo(SlotType.COUNT, SLOT, 1)}",
    ),
    "slot listed twice": (
        "        return [\n            SlotSpec(",
        "        return 2 * [\n            SlotSpec(",
    ),
    "duplicate device ids": (
        "            for card in cards\n",
        "            for card in cards * 2\n",
    ),
    "device named for another plugin": ("device_name=self.key,", 'device_name=DeviceName("gpu"),'),
    "devices in a new order each time": (
        "key=natural_sort_key)\n",
        "key=natural_sort_key)\n        self.calls = getattr(self, 'calls', 0) + 1\n"
        "        cards = cards if self.calls % 2 else cards[::-1]\n",
    ),
    "metric unit outside the table": ('"percent", Measurement(mean', '"kW", Measurement(mean'),
    "metrics not a coroutine": ("    async def gather_node_metrics", "    def gather_node_metrics"),
    "metrics raise": ("        busy = {\n", "        raise KeyError('busy')\n        busy = {\n"),
    "metric reading of a device not its own": (
        "            for d in self.devices\n        }",
        "            for d in self.devices\n        } | {DeviceId('npu42'): Measurement(1, 100)}",
    ),
    "hook returns no config": (
        HOOK + "        return WorkloadConfig(",
        HOOK + "        return None\n        return WorkloadConfig(",
    ),
    "hook mutates its allocation": (HOOK, HOOK + "        self.allocation.clear()\n"),
}


@pytest.mark.parametrize("what", list(BREAKS))
def test_the_kit_names_the_break_as_a_rule_with_its_fix(what, tmp_path):
    shutil.copytree(ACME / "src", tmp_path / "src")
    shutil.copytree(ACME / "tests", tmp_path / "tests")
    plugin = tmp_path / "src" / "acme_npu" / "plugin.py"
    old, new = BREAKS[what]
    assert old in plugin.read_text()
    plugin.write_text(plugin.read_text().replace(old, new))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "src")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1, result.stdout[-3000:]
    failed = len(re.findall(r"^FAILED ", result.stdout, re.MULTILINE))
    assert failed >= 1
    assert result.stdout.count("breaks the rule") >= failed, result.stdout[-6000:]
    assert result.stdout.count("\nFix: ") >= failed, result.stdout[-6000:]
