"""CDI specs loaded by a real runtime: podman resolves the devices and the container sees the edits.

podman 4.3 (Debian 12) vendors a CDI library older than 1.1.0 and reads specs from ``/etc/cdi``
only, so each test writes its spec there under a kind of its own and removes it afterwards.
Containers run from a busybox image imported into a throw-away podman store. Skipped, with the
reason, where podman, busybox or root is missing or podman cannot start a container here; with
``ACCELKIT_REQUIRE_PODMAN=1`` (set by ``.ci/run``) those are failures: CI must load every spec.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelkit.runtime.render.cdi import CDI_VERSIONS, render_cdi_spec
from accelkit.testing.cli_runner import cli_env
from accelkit.types import Mount, MountType, WorkloadConfig
from accelkit.workload.cdi_spec import ALL, without_colliding_env

pytestmark = pytest.mark.slow

CDI_DIR = Path("/etc/cdi")
IMAGE = "localhost/accelkit-busybox:test"


class Podman:
    def __init__(self, base: Path) -> None:
        conf = base / "containers.conf"
        # the default nofile/nproc limits exceed what an unprivileged container host allows
        conf.write_text("[containers]\ndefault_ulimits = []\n")
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.argv = [
            "podman",
            "--root",
            str(base / "root"),
            "--runroot",
            str(base / "run"),
            "--storage-driver",
            "vfs",
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "file",
            # crun refuses a cgroup v1 hybrid host ("cgroups in hybrid mode not supported")
            *(["--runtime", "runc"] if shutil.which("runc") else []),
        ]

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.argv, *args], capture_output=True, text=True, env=self.env, timeout=120,
            check=False,
        )  # fmt: skip

    def run(self, devices: list[str], script: str) -> subprocess.CompletedProcess[str]:
        device_args = [arg for d in devices for arg in ("--device", d)]
        return self(
            "run", "--rm", "--network", "none", "--ulimit", "host", *device_args, IMAGE,
            "/bin/sh", "-c", script,
        )  # fmt: skip


def _unavailable(reason: str) -> None:
    if os.environ.get("ACCELKIT_REQUIRE_PODMAN") == "1":
        pytest.fail(f"{reason} (ACCELKIT_REQUIRE_PODMAN=1: CI must run these tests)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    if shutil.which("podman") is None:
        _unavailable("podman is not installed (apt-get install podman)")
    busybox = shutil.which("busybox")
    if busybox is None:
        _unavailable("busybox is not installed (apt-get install busybox-static)")
    assert busybox is not None
    if os.geteuid() != 0:
        _unavailable("podman with /etc/cdi needs root")
    base = tmp_path_factory.mktemp("podman")
    rootfs = base / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy(busybox, rootfs / "bin" / "busybox")
    for applet in ("sh", "env", "ls", "cat", "id", "stat"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    tarball = base / "busybox.tar"
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
    podman = Podman(base)
    if (result := podman("import", str(tarball), IMAGE)).returncode != 0:
        _unavailable(f"podman cannot import an image here: {result.stderr.strip()}")
    if (result := podman.run([], "true")).returncode != 0:
        _unavailable(f"podman cannot start a container here: {result.stderr.strip()}")
    return podman


@pytest.fixture
def installed() -> Iterator[list[Path]]:
    """Spec files written into /etc/cdi by the test; removed afterwards."""
    paths: list[Path] = []
    yield paths
    for path in paths:
        path.unlink(missing_ok=True)


def install(spec: dict[str, object], paths: list[Path]) -> None:
    CDI_DIR.mkdir(parents=True, exist_ok=True)
    path = CDI_DIR / f"accelkit-test-{uuid.uuid4().hex}.json"
    path.write_text(json.dumps(spec))
    paths.append(path)


def test_a_spec_with_nodes_mounts_and_env_is_loaded_and_applied(podman, installed, tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "marker").write_text("vendor library\n")
    kind = f"accelkit-test.invalid/k{uuid.uuid4().hex[:8]}"
    config = WorkloadConfig(
        env_vars={"CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "4"},
        mounts=[
            Mount(str(tmp_path / "lib"), "/usr/local/vendor", MountType.BIND, read_only=True),
            Mount("/dev/zero", "/dev/accel0", MountType.DEVICE),
            Mount.device("/dev/null"),
        ],
    )
    spec = render_cdi_spec(kind, [("gpu0", config)], common=WorkloadConfig(env_vars={"K": "v"}))
    assert spec["cdiVersion"] == "0.5.0"  # a device node whose host path differs
    install(spec, installed)
    script = "env; cat /usr/local/vendor/marker; ls -l /dev/accel0"
    result = podman.run([f"{kind}=gpu0"], script)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "CUDA_VISIBLE_DEVICES=0" in out
    assert "OMP_NUM_THREADS=4" in out
    assert "K=v" in out
    assert "vendor library" in out
    assert "1,   5" in out  # /dev/zero's major, minor behind the container path


def test_the_version_label_decides_whether_an_older_library_loads_the_spec(podman, installed):
    kind = f"accelkit-test.invalid/k{uuid.uuid4().hex[:8]}"
    lowest = render_cdi_spec(kind, [("a", WorkloadConfig(env_vars={"A": "1"}))])
    assert lowest["cdiVersion"] == "0.3.0"
    install(lowest, installed)
    assert podman.run([f"{kind}=a"], "true").returncode == 0
    newest = {**lowest, "kind": f"{kind}x", "cdiVersion": "1.1.0"}
    install(newest, installed)
    result = podman.run([f"{kind}x=a"], "true")
    if result.returncode == 0:
        pytest.skip("this podman's CDI library reads 1.1.0 specs: nothing to compare")
    assert "unresolvable CDI devices" in result.stderr


def test_two_devices_of_one_spec_keep_their_nodes_and_the_combined_list(podman, installed):
    kind = f"accelkit-test.invalid/k{uuid.uuid4().hex[:8]}"
    zero, full = Mount.device("/dev/zero"), Mount.device("/dev/full")
    singles = [
        ("a", WorkloadConfig(env_vars={"LIST": "a", "SAME": "x"}, mounts=[zero])),
        ("b", WorkloadConfig(env_vars={"LIST": "b", "SAME": "x"}, mounts=[full])),
    ]
    combined = WorkloadConfig(
        env_vars={"LIST": "a,b", "SAME": "x"},
        mounts=[zero, full],
    )
    spec = render_cdi_spec(kind, [*without_colliding_env(singles, combined), (ALL, combined)])
    assert spec["cdiVersion"] == "0.3.0"
    install(spec, installed)
    result = podman.run([f"{kind}=a", f"{kind}=b"], "env; ls /dev")
    assert result.returncode == 0, result.stderr
    assert "LIST=" not in result.stdout  # no device claims a list it does not hold alone
    assert "SAME=x" in result.stdout
    assert {"zero", "full"} <= set(result.stdout.split())
    result = podman.run([f"{kind}=all", f"{kind}=a"], "env")
    assert result.returncode == 0, result.stderr
    assert "LIST=a,b" in result.stdout


def accelkit_cdi(tmp_path: Path, devices: str) -> dict[str, Any]:
    """The spec ``accelkit cdi`` writes for one agent holding the mock ``devices``."""
    (tmp_path / "devices.toml").write_text(devices)
    config = tmp_path / "host.toml"
    config.write_text(
        f'[resource]\nreserved-cpu = 0\nstate-dir = "{tmp_path / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
        '[[agents]]\n[agents.agent]\nid = "0"\n'
    )
    out = tmp_path / "cdi"
    env = cli_env()
    result = subprocess.run(
        [sys.executable, "-c", "from accelkit.cli.app import run; run()", "cdi",
         "--config", str(config), "--agent", "0", "--output", str(out)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    spec: dict[str, Any] = json.loads(Path(result.stdout.strip()).read_text())
    return spec


def gpus(count: int, node: str = "") -> str:
    extra = f'device-node = "{node}"\n' if node else ""
    listing = "".join(f'[[kinds.devices]]\nid = "cuda{i}"\n{extra}' for i in range(count))
    return f'[[kinds]]\nkey = "cuda"\n{listing}'


def variables(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def test_the_spec_accelkit_cdi_writes_is_loaded(podman, installed, tmp_path):
    spec = accelkit_cdi(tmp_path, gpus(2))
    install(spec, installed)
    result = podman.run([f"{spec['kind']}=all"], "env")
    assert result.returncode == 0, result.stderr
    assert "MOCK_CUDA_DEVICES=cuda0,cuda1" in result.stdout


@pytest.mark.parametrize("count", [1, 2, 3])
def test_each_device_of_an_env_only_plugin_resolves_alone_and_together(
    podman, installed, tmp_path, count
):
    spec = accelkit_cdi(tmp_path, gpus(count))
    install(spec, installed)
    kind = spec["kind"]
    own = {f"ACCELKIT_CDI_CUDA_CUDA{i}": f"cuda-cuda{i}" for i in range(count)}
    for i in range(count):  # one device alone: its own name, the plugin's list only if it is all
        result = podman.run([f"{kind}=cuda-cuda{i}"], "env")
        assert result.returncode == 0, result.stderr
        seen = variables(result.stdout)
        assert {k: v for k, v in seen.items() if k.startswith("ACCELKIT_CDI_")} == {
            f"ACCELKIT_CDI_CUDA_CUDA{i}": f"cuda-cuda{i}"
        }
        assert seen.get("MOCK_CUDA_DEVICES") == ("cuda0" if count == 1 else None)
    # every single device together: each named, no device's list claims to be the whole set
    result = podman.run([f"{kind}=cuda-cuda{i}" for i in range(count)], "env")
    assert result.returncode == 0, result.stderr
    seen = variables(result.stdout)
    assert {k: v for k, v in seen.items() if k.startswith("ACCELKIT_CDI_")} == own
    assert seen.get("MOCK_CUDA_DEVICES") == ("cuda0" if count == 1 else None)
    # all, also beside a single device: the list of every device
    result = podman.run([f"{kind}=all", f"{kind}=cuda-cuda0"], "env")
    assert result.returncode == 0, result.stderr
    seen = variables(result.stdout)
    assert seen["MOCK_CUDA_DEVICES"] == ",".join(f"cuda{i}" for i in range(count))
    assert {k: v for k, v in seen.items() if k.startswith("ACCELKIT_CDI_")} == own


def test_devices_sharing_a_device_node_run_together_and_with_all(podman, installed, tmp_path):
    spec = accelkit_cdi(tmp_path, gpus(2, node="/dev/full"))
    install(spec, installed)
    kind = spec["kind"]
    for devices in ([f"{kind}=all"], [f"{kind}=cuda-cuda0", f"{kind}=cuda-cuda1"],
                    [f"{kind}=all", f"{kind}=cuda-cuda1"]):  # fmt: skip
        result = podman.run(devices, "ls -l /dev/full; env")
        assert result.returncode == 0, (devices, result.stderr)
        assert "1,   7" in result.stdout  # /dev/full's major, minor: the node is there


def test_an_unknown_device_is_refused_by_podman(podman, installed):
    kind = f"accelkit-test.invalid/k{uuid.uuid4().hex[:8]}"
    install(render_cdi_spec(kind, [("a", WorkloadConfig(env_vars={"A": "1"}))]), installed)
    result = podman.run([f"{kind}=missing"], "true")
    assert result.returncode != 0
    assert "unresolvable CDI devices" in result.stderr


def _version_cases(tmp: Path) -> list[tuple[str, str, WorkloadConfig]]:
    (tmp / "lib").mkdir(exist_ok=True)
    return [
        ("vendor", "gpu0", WorkloadConfig(env_vars={"A": "1"})),
        ("vendor", "gpu0", WorkloadConfig(mounts=[Mount.device("/dev/null")])),
        ("vendor", "gpu0", WorkloadConfig(mounts=[Mount(str(tmp / "lib"), "/b")])),
        ("vendor", "gpu0", WorkloadConfig(mounts=[Mount("/dev/zero", "/dev/y", MountType.DEVICE)])),
        ("vendor", "0", WorkloadConfig(env_vars={"A": "1"})),
        ("vendor.x", "gpu0", WorkloadConfig(env_vars={"A": "1"})),
        ("vendor", "gpu0", WorkloadConfig(extra_gids=[5])),
    ]


@pytest.mark.parametrize("case", range(7))
def test_every_spec_version_accelkit_writes_loads_where_the_runtime_knows_it(
    podman, installed, tmp_path, case
):
    klass, name, config = _version_cases(tmp_path)[case]
    kind = f"accelkit-test.invalid/{klass.replace('vendor', 'k' + uuid.uuid4().hex[:8])}"
    spec = render_cdi_spec(kind, [(name, config)])
    install(spec, installed)
    result = podman.run([f"{kind}={name}"], "true")
    if CDI_VERSIONS.index(spec["cdiVersion"]) <= CDI_VERSIONS.index("0.5.0"):
        # every spec up to 0.5.0 loads, also in podman 4.3 (whose CDI library reads up to 0.5.0)
        assert result.returncode == 0, (spec, result.stderr)
    elif result.returncode != 0:
        # an older library refuses what it does not know (a newer podman loads it): podman 4.3
        # reads a dotted class as a path and cannot resolve a 0.7.0 spec
        assert "CDI" in result.stderr or "no such file" in result.stderr, result.stderr
