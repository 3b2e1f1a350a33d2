"""A plugin distribution as the loader meets it: what importing it loads, what its hook returns."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import pluggy

from accelkit import hookspecs
from accelkit.plugin import AbstractComputePlugin


def loaded_by_importing(imports: str, watched: Sequence[str]) -> list[str]:
    """Which of ``watched`` a fresh interpreter has loaded once it ran ``import IMPORTS``."""
    loaded = f"[m for m in {list(watched)!r} if m in sys.modules]"
    code = f"import json, sys, {imports}\nprint(json.dumps({loaded}))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found: list[str] = json.loads(out.stdout)
    return found


def plugin_of(distribution: ModuleType, config: Mapping[str, Any]) -> AbstractComputePlugin:
    """The one plugin ``distribution``'s ``accelkit_compute_plugins`` hook returns for
    ``config``, called through a fresh plugin manager."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(distribution)
    [[plugin]] = pm.hook.accelkit_compute_plugins(config=config)
    assert isinstance(plugin, AbstractComputePlugin)
    return plugin
