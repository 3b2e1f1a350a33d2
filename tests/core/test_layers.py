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
