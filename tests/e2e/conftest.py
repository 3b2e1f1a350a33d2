"""Fixtures of the end-to-end tests: fixture plugin distributions, really installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def install_fixture(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """``tests/fixtures/NAME`` installed into a directory of its own (for PYTHONPATH)."""
    target = tmp_path_factory.mktemp(f"{name}-site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(FIXTURES / name),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


@pytest.fixture(scope="session")
def refusing_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tests/fixtures/refusing-plugin`` installed into a directory of its own (for PYTHONPATH)."""
    return install_fixture(tmp_path_factory, "refusing-plugin")


@pytest.fixture(scope="session")
def runtime_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tests/fixtures/runtime-plugin``, which registers the runtime ``extra`` and nothing else."""
    return install_fixture(tmp_path_factory, "runtime-plugin")


@pytest.fixture(scope="session")
def bridge_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tests/fixtures/bridge-plugin``, which registers the bridge ``hello-scheduler`` alone."""
    return install_fixture(tmp_path_factory, "bridge-plugin")


@pytest.fixture(scope="session")
def hanging_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tests/fixtures/hanging-plugin``, which hangs or blocks where ``HANGING_PLUGIN_*`` say."""
    return install_fixture(tmp_path_factory, "hanging-plugin")


@pytest.fixture(scope="session")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tests/fixtures/broken-plugin``, a plugin distribution that fails on import."""
    return install_fixture(tmp_path_factory, "broken-plugin")


@pytest.fixture(scope="session")
def observer_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tests/fixtures/observer-plugin``, which logs the workload events to ``OBSERVER_LOG``."""
    return install_fixture(tmp_path_factory, "observer-plugin")
