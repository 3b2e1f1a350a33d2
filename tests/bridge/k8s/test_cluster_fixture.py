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


#: start-cluster.sh bodies: one that fails, one whose component dies while it waits
FAILS = "echo 'kube-apiserver not ready' >&2; exit 1\n"
COMPONENT_DIES = """mkdir -p "$1/logs"
log="$1/logs/kube-controller-manager.log"
echo 'listen tcp 127.0.0.1:47838: bind: address already in use' > "$log"
sleep 0 & gone=$!; wait $gone
echo "kube-controller-manager $gone" > "$1/pids"
sleep 600
"""


def _broken_cluster(folder: Path, start: str = FAILS) -> Path:
    """A cluster folder whose start-cluster.sh fails."""
    folder.mkdir()
    (folder / "SHA256SUMS").write_text("")
    scripts = {
        "unpack.sh": 'mkdir -p "$1/bin" "$1/images"\n',
        "start-cluster.sh": start,
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


@pytest.mark.skipif(os.geteuid() != 0, reason="the cluster is started only as root")
def test_a_component_that_exits_while_the_cluster_starts_fails_it_at_once(tmp_path: Path) -> None:
    """A port start-cluster.sh picked can be taken before a component binds it: the start is
    given up as soon as a component it recorded exits, and tried again in a new folder."""
    shared = _broken_cluster(tmp_path / "k8s", COMPONENT_DIES)
    env = {"ACCELKIT_K8S_SHARED": str(shared), "ACCELKIT_REQUIRE_K8S": "1"}
    result = _pytest(env, tmp_path)
    assert result.returncode == 1
    words = "kube-controller-manager exited while the cluster started: listen tcp"
    assert result.stdout.count(words) >= 3, result.stdout  # each of the tries
    assert "address already in use" in result.stdout
