"""A real single-node Kubernetes cluster for the tests (``../shared/k8s`` beside the repository).

The folder beside the clone holds Kubernetes built from source (xz-compressed binaries, their
``SHA256SUMS``), offline images and ``start-cluster.sh`` / ``stop-cluster.sh``. :func:`binaries`
unpacks them once into a cache folder (checked against ``SHA256SUMS``; several test runs may
share it), :func:`start` starts one cluster whose every file lives in a short temp folder, and
:class:`Cluster` gives its environment, a ``kubectl`` helper, a kubelet restart and the stop.

:func:`missing` says why a cluster cannot run here (``None`` where it can).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[3]
#: where the cluster's scripts and binaries are (``ACCELKIT_K8S_SHARED`` overrides)
SHARED = Path(os.environ.get("ACCELKIT_K8S_SHARED", REPOSITORY.parent / "shared" / "k8s"))
#: ``xz`` and ``sha256sum`` unpack; the rest is what ``start-cluster.sh`` calls
COMMANDS = (
    "xz", "sha256sum", "containerd", "ctr", "runc", "openssl", "curl", "python3", "unshare",
    "nsenter", "mountpoint", "ip", "ss", "flock", "awk",
)  # fmt: skip
START_TIMEOUT = 240.0
STOP_TIMEOUT = 120.0


def missing() -> str | None:
    """Why a cluster cannot start on this machine, or ``None``."""
    if not (SHARED / "start-cluster.sh").is_file():
        return f"no Kubernetes test cluster at {SHARED} (start-cluster.sh)"
    if os.geteuid() != 0:
        return "a Kubernetes test cluster needs root (mounts, cgroups, containerd)"
    absent = [name for name in COMMANDS if shutil.which(name) is None]
    if absent:
        return f"a Kubernetes test cluster needs these commands: {', '.join(absent)}"
    return None


def cache_root() -> Path:
    """The folder the binaries are unpacked into: ``ACCELKIT_K8S_CACHE`` or the user's cache."""
    configured = os.environ.get("ACCELKIT_K8S_CACHE")
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "accelkit" / "k8s"


def binaries() -> Path:
    """Unpack the binaries and images once; the folder holding ``bin/`` and ``images/``.

    The cache is keyed by the digest of ``SHA256SUMS``; ``unpack.sh`` checks every compressed
    file against it before writing. A lock serializes concurrent test runs; a ``complete`` marker
    is written last, so an interrupted unpack is redone.
    """
    sums = (SHARED / "SHA256SUMS").read_bytes()
    dest = cache_root() / hashlib.sha256(sums).hexdigest()[:16]
    dest.mkdir(parents=True, exist_ok=True)
    marker = dest / "complete"
    with (dest / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            subprocess.run(
                ["bash", str(SHARED / "unpack.sh"), str(dest)],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=START_TIMEOUT,
            )
            marker.write_text(sums.decode())
    return dest


def read_env(path: Path) -> dict[str, str]:
    """The ``NAME=value`` words of ``DIR/env`` (``export`` and comments dropped)."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        for word in line.removeprefix("export ").split():
            name, sep, value = word.partition("=")
            if sep:
                values[name] = value
    return values


@dataclass
class Cluster:
    """One running cluster: its folder, environment and binaries."""

    root: Path
    env: dict[str, str]
    bin: Path
    startup_s: float
    _stopped: bool = field(default=False, repr=False)

    @property
    def node(self) -> str:
        return self.env["K8S_NODE"]

    @property
    def device_plugin_dir(self) -> Path:
        return Path(self.env["K8S_DEVICE_PLUGIN_DIR"])

    @property
    def pod_resources_socket(self) -> Path:
        return Path(self.env["K8S_POD_RESOURCES_SOCKET"])

    def process_env(self) -> dict[str, str]:
        """``os.environ`` with the cluster's variables (``KUBECONFIG``, ``K8S_*``)."""
        return {**os.environ, **self.env}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl`` against this cluster; raises with its stderr when it fails."""
        result = subprocess.run(
            [str(self.bin / "kubectl"), *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.process_env(),
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result

    def get(self, *args: str) -> Any:
        """``kubectl get ARGS -o json``, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: str) -> None:
        self.kubectl("apply", "-f", "-", input=manifest)

    def wait_for(
        self, predicate: Callable[[], Any], what: str, timeout: float = 60.0, every: float = 0.2
    ) -> Any:
        """Poll ``predicate`` until it returns something true; fail naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(every)

    def pod_phase(self, name: str, namespace: str = "default") -> str:
        out = self.kubectl(
            "get", "pod", name, "-n", namespace, "-o", "jsonpath={.status.phase}", check=False
        )
        return out.stdout.strip() if out.returncode == 0 else ""

    def allocatable(self, resource: str) -> int:
        node = self.get("node", self.node)
        return int(node["status"].get("allocatable", {}).get(resource, "0"))

    def delete_all_pods(self, namespace: str = "default") -> None:
        """Delete every pod, deployment and job of ``namespace`` and wait until they are gone."""
        self.kubectl("delete", "deployments,jobs", "--all", "-n", namespace, "--wait=false")
        self.kubectl(
            "delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force",
            "--wait=true", check=False, timeout=120.0,
        )  # fmt: skip
        self.wait_for(
            lambda: not self.get("pods", "-n", namespace)["items"], "the pods to go", 120.0
        )

    # --- the kubelet -----------------------------------------------------------------------

    def kubelet_pid(self) -> int:
        return [pid for name, pid in _recorded(self.root) if name == "kubelet"][-1]

    def restart_kubelet(self) -> float:
        """Stop the kubelet (SIGTERM), start it again as ``start-cluster.sh`` did; wait for its
        pod-resources socket to answer. Returns the monotonic time the new kubelet started."""
        pid = self.kubelet_pid()
        os.kill(pid, signal.SIGTERM)
        self.wait_for(lambda: not _alive(pid), "the kubelet to stop", 60.0, 0.05)
        self.pod_resources_socket.unlink(missing_ok=True)
        started = time.monotonic()
        self._run_kubelet()
        self.wait_for(self.pod_resources_socket.exists, "the kubelet's pod-resources socket")
        return started

    def _run_kubelet(self) -> None:
        d = self.root
        script = (
            "mount --make-private / && mount -t overlay overlay "
            f"-o lowerdir=/var/lib,upperdir={d}/varlib-ovl/upper,workdir={d}/varlib-ovl/work "
            f"/var/lib && mkdir -p /var/lib/kubelet && mount --bind {d}/varlibkubelet "
            f"/var/lib/kubelet && exec {self.bin}/kubelet --config {d}/kubelet-config.yaml "
            f"--kubeconfig {d}/kubelet.kubeconfig --root-dir {d}/kubelet "
            f"--cert-dir {d}/pki/kubelet --hostname-override {self.node} --node-ip 127.0.0.1 --v=2"
        )
        with (d / "logs" / "kubelet.log").open("a") as log:
            process = subprocess.Popen(
                ["unshare", "-m", "--propagation", "unchanged", "bash", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        with (d / "pids").open("a") as pids:
            pids.write(f"kubelet {process.pid}\n")

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        subprocess.run(
            ["bash", str(SHARED / "stop-cluster.sh"), str(self.root)],
            env={**os.environ, "KEEP_DATA": "0"},
            capture_output=True,
            timeout=STOP_TIMEOUT,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


#: tries of start-cluster.sh (each in a new folder): a port it picked can be taken meanwhile
START_TRIES = 3


def _start_once(root: Path, env: dict[str, str]) -> str | None:
    """Run start-cluster.sh in ``root``; ``None`` when the cluster is up, else why not. A
    component that exits while the script waits (a port taken meanwhile: "address already in
    use") fails it at once instead of after the script's own wait."""
    with tempfile.TemporaryFile("w+") as output:
        script = subprocess.Popen(
            ["bash", str(SHARED / "start-cluster.sh"), str(root)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT
        why: str | None = None
        try:
            while script.poll() is None:
                dead = [name for name, pid in _recorded(root) if not _alive(pid)]
                if dead:
                    log = root / "logs" / f"{dead[0]}.log"
                    tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
                    why = f"{', '.join(dead)} exited while the cluster started: {tail}"
                elif time.monotonic() > deadline:
                    why = f"not up after {START_TIMEOUT:.0f} s"
                if why is not None:
                    os.killpg(script.pid, signal.SIGKILL)
                    script.wait()
                    return why
                time.sleep(0.2)
        finally:
            if script.poll() is None:  # interrupted (a test's time limit): stop the script
                os.killpg(script.pid, signal.SIGKILL)
                script.wait()
        output.seek(0)
        text = output.read()
    if script.returncode != 0 or not (root / "env").exists():
        return f"start-cluster.sh failed: {text[-2000:]}"
    return None


def _recorded(root: Path) -> list[tuple[str, int]]:
    try:
        rows = (root / "pids").read_text().split("\n")
    except OSError:
        return []
    return [(n, int(p)) for n, _, p in (r.partition(" ") for r in rows if r) if p.isdigit()]


def start(root: Path | None = None) -> Cluster:
    """Unpack (once) and start a cluster in ``root`` (a new short temp folder by default),
    trying again in a new folder when it does not come up; whatever fails is stopped.

    Raises ``RuntimeError`` with the reasons when no try came up.
    """
    dest = binaries()
    env = {
        **os.environ,
        "BIN": str(dest / "bin"),
        "ETCD": str(dest / "bin" / "etcd"),
        "IMAGES": str(dest / "images"),
    }
    reasons: list[str] = []
    for _ in range(START_TRIES if root is None else 1):
        folder = root or Path(tempfile.mkdtemp(prefix="ak8s-", dir="/tmp"))
        began = time.monotonic()
        cluster = Cluster(folder, {}, dest / "bin", 0.0)
        try:
            why = _start_once(folder, env)
        except BaseException:
            cluster.stop()
            raise
        if why is None:
            cluster.startup_s = time.monotonic() - began
            cluster.env = read_env(folder / "env")
            return cluster
        cluster.stop()
        reasons.append(why)
    raise RuntimeError("; ".join(reasons))
