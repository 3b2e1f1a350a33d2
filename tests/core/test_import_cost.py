"""What importing accelkit costs: ``import accelkit`` imports none of its dependencies (each
exported name comes on first use), and importing the command's package runs no collection of
the cyclic garbage collector, whose state it leaves as it found it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _python(code: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_import_accelkit_imports_no_dependency():
    found = _python(
        "import json, sys\n"
        "import accelkit\n"
        "loaded = sorted(m for m in ('attr', 'attrs', 'pluggy', 'accelkit.hookspecs',"
        " 'accelkit.apiversion') if m in sys.modules)\n"
        "from accelkit import PLUGIN_API_VERSION, hookimpl\n"
        "from accelkit.hookspecs import hookimpl as marker\n"
        "print(json.dumps({'loaded': loaded, 'same': hookimpl is marker,"
        " 'version': PLUGIN_API_VERSION}))\n"
    )
    assert found == {"loaded": [], "same": True, "version": "2.0"}


@pytest.mark.parametrize("enabled", [True, False])
def test_importing_the_command_collects_nothing_and_keeps_the_collector_state(enabled):
    found = _python(
        "import gc, json\n"
        f"{'' if enabled else 'gc.disable()'}\n"
        "import accelkit\n"
        "gc.collect()  # what the interpreter's start made is not the import's\n"
        "collections = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'stop' and collections.append(1))\n"
        "import accelkit.cli.app\n"
        "print(json.dumps({'collections': len(collections), 'enabled': gc.isenabled()}))\n"
    )
    assert found == {"collections": 0, "enabled": enabled}
