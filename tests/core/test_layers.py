"""The import-linter contracts of the root pyproject.toml hold, and they do catch a leak."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent))

pytestmark = pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is not installed")


def lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    assert LINT_IMPORTS is not None
    return subprocess.run(
        [LINT_IMPORTS, "--no-logo", "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_contract_is_kept():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_every_ignored_import_is_explained_by_a_comment():
    text = (ROOT / "pyproject.toml").read_text()
    config = tomllib.loads(text)["tool"]["importlinter"]
    for contract in config["contracts"]:
        for ignored in contract.get("ignore_imports", []):
            line = next(i for i, ln in enumerate(text.splitlines()) if f'"{ignored}"' in ln)
            above = text.splitlines()[line - 1].strip()
            assert above.startswith(("#", '"')), f"{ignored} has no comment saying what removes it"


def test_a_layer_leak_breaks_the_contract(tmp_path: Path):
    package = tmp_path / "leaky"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text("from leaky import host\n")  # a contract importing up
    (package / "host.py").write_text("")
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_package = leaky\n\n"
        "[importlinter:contract:layers]\nname = layers\ntype = layers\n"
        "layers =\n    leaky.host\n    leaky.plugin\n"
    )
    result = lint(tmp_path)
    assert result.returncode == 1
    assert "leaky.plugin is not allowed to import leaky.host" in result.stdout


#: what a plugin distribution may import (DESIGN §18), the conformance kit in its tests only
PLUGIN_SURFACE = {"accelkit", "accelkit.plugin", "accelkit.types", "accelkit.health"}


def test_the_plugin_contract_forbids_every_module_outside_the_public_api():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in config["contracts"] if c["id"] == "plugins-import-the-public-api"]
    source = ROOT / "core" / "src" / "accelkit"
    modules = {
        f"accelkit.{p.stem if p.is_file() else p.name}"
        for p in source.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    allowed = PLUGIN_SURFACE | {"accelkit.config"}  # the package's names, not its modules
    assert set(contract["forbidden_modules"]) == (modules - allowed) | {"accelkit.config.*"}
    assert set(contract["source_modules"]) >= {"accelkit_cpu", "accelkit_mem", "accelkit_mock"}
