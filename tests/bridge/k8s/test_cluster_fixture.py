"""Where the real cluster cannot run, its tests skip with the reason, and fail instead under
``ACCELKIT_REQUIRE_K8S=1`` (as CI runs them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
TARGET = str(HERE / "test_real_cluster.py")


def _pytest(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", TARGET],
        capture_output=True,
        text=True,
        env={**os.environ, "ACCELKIT_K8S_CACHE": str(tmp_path / "cache"), **env},
        cwd=HERE.parents[2],
        timeout=120,
        check=False,
    )


def _broken_cluster(folder: Path) -> Path:
    """A cluster folder whose start-cluster.sh fails."""
    folder.mkdir()
    (folder / "SHA256SUMS").write_text("")
    scripts = {
        "unpack.sh": 'mkdir -p "$1/bin" "$1/images"\n',
        "start-cluster.sh": "echo 'kube-apiserver not ready' >&2; exit 1\n",
        "stop-cluster.sh": "exit 0\n",
    }
    for name, body in scripts.items():
        (folder / name).write_text("#!/bin/bash\n" + body)
    return folder


@pytest.mark.parametrize("require", ["", "1"])
def test_no_cluster_folder_skips_or_fails_with_the_reason(tmp_path: Path, require: str) -> None:
    env = {"ACCELKIT_K8S_SHARED": str(tmp_path / "nowhere"), "ACCELKIT_REQUIRE_K8S": require}
    result = _pytest(env, tmp_path)
    reason = f"no Kubernetes test cluster at {tmp_path / 'nowhere'} (start-cluster.sh)"
    assert reason in result.stdout, result.stdout
    if require:
        assert result.returncode == 1
        assert "ACCELKIT_REQUIRE_K8S=1: CI must run these tests" in result.stdout
    else:
        assert result.returncode == 0
        assert "1 skipped" in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the cluster is started only as root")
@pytest.mark.parametrize("require", ["", "1"])
def test_a_cluster_that_does_not_start_skips_or_fails_with_its_output(
    tmp_path: Path, require: str
) -> None:
    shared = _broken_cluster(tmp_path / "k8s")
    env = {"ACCELKIT_K8S_SHARED": str(shared), "ACCELKIT_REQUIRE_K8S": require}
    result = _pytest(env, tmp_path)
    assert "start-cluster.sh failed: kube-apiserver not ready" in result.stdout, result.stdout
    assert result.returncode == (1 if require else 0)
