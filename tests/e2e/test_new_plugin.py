"""``accelkit new-plugin``: names, refusals that leave nothing behind, and a generated
distribution that installs into a fresh environment and passes its own tests and the kit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit import PLUGIN_API_VERSION, __version__
from accelkit.cli import scaffold
from accelkit.cli.app import main
from accelkit.cli.scaffold import PluginScaffold, compatible_range, write_scaffold
from accelkit.errors import ConfigError

BIN = Path(sys.executable).parent


def test_names_derive_from_the_key():
    names = PluginScaffold.named("acme-npu").substitutions()
    assert names["package"] == "accelkit_acme_npu"
    assert names["dist"] == "accelkit-acme-npu"
    assert names["Class"] == "AcmeNpu"
    assert names["ENV"] == "ACME_NPU"
    assert names["api_version"] == PLUGIN_API_VERSION
    assert names["requires"] == compatible_range(__version__)


@pytest.mark.parametrize(
    ("version", "bound"),
    [
        ("0.2.0", "accelkit>=0.2,<0.3"),
        ("0.10.3", "accelkit>=0.10,<0.11"),
        ("1.4.2", "accelkit>=1.4,<2"),
    ],
)
def test_the_accelkit_bound_keeps_the_plugin_api(version: str, bound: str):
    assert compatible_range(version) == bound


@given(st.from_regex(r"[a-z][a-z0-9]{0,8}(-[a-z0-9]{1,8}){0,2}", fullmatch=True))
def test_every_valid_name_renders_a_complete_distribution(name: str):
    if name in ("cpu", "mem", "cuda", "mock"):
        return
    files = PluginScaffold.named(name).render()
    package = "accelkit_" + name.replace("-", "_")
    assert set(files) == {
        "pyproject.toml",
        "README.md",
        f"src/{package}/__init__.py",
        f"src/{package}/plugin.py",
        f"src/{package}/py.typed",
        "tests/conftest.py",
        "tests/test_conformance.py",
        "tests/test_fake_hardware.py",
    }
    assert all("$" not in text.replace("$key", "") for text in files.values())
    assert f'{name} = "{package}"' in files["pyproject.toml"]
    for source in (t for path, t in files.items() if path.endswith(".py")):
        compile(source, name, "exec")


@pytest.mark.parametrize("name", ["Npu", "1npu", "npu_x", "npu.x", "npu-", "-npu", "", "a" * 41])
def test_bad_names_are_refused(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["new-plugin", "--output", str(tmp_path), "--", name]) == 2
    assert "error: plugin name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["cpu", "mem", "cuda", "mock"])
def test_shipped_plugin_names_are_refused(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    assert main(["new-plugin", name, "--output", str(tmp_path)]) == 2
    assert "taken by a shipped plugin" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_existing_target_is_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    (tmp_path / "accelkit-npu").mkdir()
    (tmp_path / "accelkit-npu" / "mine.txt").write_text("keep")
    assert main(["new-plugin", "npu", "--output", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["accelkit-npu"]
    assert [p.name for p in (tmp_path / "accelkit-npu").iterdir()] == ["mine.txt"]


def test_a_missing_output_directory_is_an_error(tmp_path: Path, capsys):
    assert main(["new-plugin", "npu", "--output", str(tmp_path / "nowhere")]) == 2
    assert "output directory" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()


def test_a_failure_while_writing_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    written = []

    def write_then_fail(path: Path, text: str) -> None:
        if len(written) == 3:
            raise OSError(28, "No space left on device")
        written.append(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    monkeypatch.setattr(scaffold, "_write_synced", write_then_fail)
    with pytest.raises(OSError, match="No space left"):
        write_scaffold(PluginScaffold.named("npu"), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_command_says_where_and_what_next(tmp_path: Path, capsys):
    assert main(["new-plugin", "npu", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"created {tmp_path / 'accelkit-npu'}" in out
    assert "pip install -e" in out
    assert oct((tmp_path / "accelkit-npu").stat().st_mode & 0o777) == oct(0o755)


def test_names_must_be_valid_for_the_scaffold_api():
    with pytest.raises(ConfigError):
        PluginScaffold.named("x y")


def _fresh_env(where: Path) -> Path:
    """A new virtual environment that sees this one's packages (accelkit, pytest) but installs
    into its own site-packages, so the generated plugin never reaches the shared environment."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    parent = sysconfig.get_paths()["purelib"]
    Path(own, "_accelkit_parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    return python


@pytest.mark.slow
def test_a_generated_plugin_installs_loads_and_passes_its_tests_and_the_kit(tmp_path: Path):
    assert main(["new-plugin", "acme-npu", "--output", str(tmp_path)]) == 0
    project = tmp_path / "accelkit-acme-npu"
    python = _fresh_env(tmp_path / "venv")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
         "--no-build-isolation", str(project)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}

    tests = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q"],
        cwd=project, capture_output=True, text=True, check=False, timeout=300, env=env,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " failed" not in tests.stdout
    assert "no installed distribution" not in tests.stdout  # the registration check ran
    assert "test_conformance.py" in tests.stdout or "passed" in tests.stdout

    listed = subprocess.run(
        [str(python), "-c", "from accelkit.cli.app import run; run()", "plugins", "--json"],
        capture_output=True, text=True, check=False, timeout=120, env=env,
    )  # fmt: skip
    assert '"name": "acme-npu"' in listed.stdout, listed.stdout + listed.stderr
    assert '"distribution": "accelkit-acme-npu"' in listed.stdout

    for tool in (
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy", "src", "tests"],
    ):
        if shutil.which(tool[0], path=str(BIN)) is None:
            continue
        checked = subprocess.run(
            [str(BIN / tool[0]), *tool[1:]], cwd=project, capture_output=True, text=True,
            check=False, timeout=300,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stdout + checked.stderr
