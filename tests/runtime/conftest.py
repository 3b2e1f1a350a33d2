"""Real container engines for the runtime tests: a ``dockerd`` and a podman service of their own.

Each engine is started once per test session with its data, state and socket under a fresh
directory, and gets a test image imported from a tarball of Debian's ``busybox-static`` (no
registry is reachable). Where an engine cannot run here (not root, no binary) its tests skip
with the reason; with ``ACCELKIT_REQUIRE_DOCKER=1`` / ``ACCELKIT_REQUIRE_PODMAN=1`` (set by
``.ci/run``) an engine that cannot run fails them instead. podman runs its containers with runc
where runc is installed: crun refuses cgroup v1 hybrid hosts.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

#: set to 1 where the docker tests must run (CI): a dockerd that cannot start fails them
REQUIRE_DOCKER = "ACCELKIT_REQUIRE_DOCKER"
REQUIRE_PODMAN = "ACCELKIT_REQUIRE_PODMAN"
IMAGE = "accelkit-test:busybox"
_START_S = 60.0


@attrs.frozen
class Engine:
    """A running engine: its address, the test image's name and the CLI that talks to it."""

    url: str
    image: str
    cli: tuple[str, ...]
    env: dict[str, str] = attrs.field(factory=lambda: dict(os.environ))

    def run_cli(self, *args: str) -> str:
        """Run the engine's CLI; its stdout."""
        argv = [*self.cli, *args]
        done = subprocess.run(argv, capture_output=True, text=True, check=True, env=self.env)
        return done.stdout


def _unavailable(reason: str, *, required: bool, require_env: str = REQUIRE_DOCKER) -> None:
    if required and os.environ.get(require_env) == "1":
        pytest.fail(f"{reason} ({require_env}=1: CI must run these tests)")
    pytest.skip(reason)


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=2)
        self._path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(2)
        self.sock.connect(self._path)


def _pings(sock: Path) -> bool:
    connection = _UnixHTTP(sock)
    try:
        connection.request("GET", "/_ping")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def _await_engine(proc: subprocess.Popen[bytes], sock: Path, log: Path) -> str | None:
    """``None`` once the engine answers ``/_ping``; else why it did not."""
    deadline = time.monotonic() + _START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            return f"the engine exited with status {proc.returncode}:\n{tail}"
        if sock.exists() and _pings(sock):
            return None
        time.sleep(0.2)
    return f"the engine did not answer /_ping within {_START_S:.0f} s"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    with contextlib.suppress(ProcessLookupError):  # helpers it started in its session
        os.killpg(proc.pid, signal.SIGKILL)


def _static_busybox() -> Path | None:
    found = shutil.which("busybox") or "/bin/busybox"
    path = Path(found)
    if not path.is_file():
        return None
    head = path.read_bytes()[:4096]
    return None if b"ld-linux" in head else path  # a dynamic one needs the host's libc


def busybox_image_tar(dest: Path) -> Path:
    """A root filesystem of static busybox with a symlink per applet, as an import tarball."""
    busybox = _static_busybox()
    assert busybox is not None
    listed = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    with tarfile.open(dest, "w") as tar:
        for name, mode in [("bin", 0o755), ("dev", 0o755), ("etc", 0o755), ("proc", 0o555),
                           ("root", 0o700), ("sys", 0o555), ("tmp", 0o1777)]:  # fmt: skip
            entry = tarfile.TarInfo(name)
            entry.type, entry.mode = tarfile.DIRTYPE, mode
            tar.addfile(entry)
        tar.add(str(busybox), "bin/busybox")
        for applet in sorted(set(listed.stdout.split()) - {"busybox"}):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        passwd = b"root:x:0:0:root:/root:/bin/sh\n"
        entry = tarfile.TarInfo("etc/passwd")
        entry.size, entry.mode = len(passwd), 0o644
        tar.addfile(entry, fileobj=io.BytesIO(passwd))
    return dest


def _engine_root(prefix: str) -> Path:
    # under /tmp, short: unix socket paths (the engine's and containerd's) must fit in 108 bytes
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def _preconditions(binary: str, *, required: bool, require_env: str = REQUIRE_DOCKER) -> str:
    if os.geteuid() != 0:
        _unavailable(
            f"{binary} needs root (this process runs as uid {os.geteuid()})",
            required=required,
            require_env=require_env,
        )
    path = shutil.which(binary)
    if path is None:
        _unavailable(
            f"no {binary} binary (Debian: apt-get install docker.io podman)",
            required=required,
            require_env=require_env,
        )
    if _static_busybox() is None:
        _unavailable(
            "no static busybox for the test image (Debian: busybox-static)",
            required=required,
            require_env=require_env,
        )
    assert path is not None
    return path


@pytest.fixture(scope="session")
def dockerd() -> Iterator[Engine]:
    """A dockerd of this test session (vfs storage, no bridge, no iptables) with the test image."""
    binary = _preconditions("dockerd", required=True)
    cli = shutil.which("docker")
    if cli is None:
        _unavailable("no docker CLI to import the test image (Debian: docker.io)", required=True)
    root = _engine_root("akd-")
    sock, log = root / "docker.sock", root / "dockerd.log"
    argv = [binary, "--iptables=false", "--ip6tables=false", "--bridge=none",
            "--storage-driver=vfs", f"--data-root={root / 'data'}", f"--exec-root={root / 'exec'}",
            f"--pidfile={root / 'dockerd.pid'}", f"--host=unix://{sock}"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if (why := _await_engine(proc, sock, log)) is not None:
            _unavailable(f"dockerd cannot run here: {why}", required=True)
        engine = Engine(f"unix://{sock}", IMAGE, (str(cli), "--host", f"unix://{sock}"))
        engine.run_cli("import", str(busybox_image_tar(root / "busybox.tar")), IMAGE)
        yield engine
        leftover = engine.run_cli("ps", "--all", "--quiet", "--filter", "label=io.accelkit.agent")
        assert not leftover.split(), f"containers left behind by the tests: {leftover.split()}"
    finally:
        _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


_PODMAN_CONF = """\
[containers]
# the host's hard limits are below podman's defaults; the container cannot raise them
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
#: crun refuses a cgroup v1 hybrid host ("cgroups in hybrid mode not supported"); runc runs there
_PODMAN_RUNC = 'runtime = "runc"\n'


@pytest.fixture(scope="session")
def podman_service() -> Iterator[Engine]:
    """podman's Docker-compatible API service of this test session, with the test image."""
    binary = _preconditions("podman", required=True, require_env=REQUIRE_PODMAN)
    root = _engine_root("akp-")
    runc = _PODMAN_RUNC if shutil.which("runc") else ""
    (root / "containers.conf").write_text(_PODMAN_CONF + runc)
    env = {**os.environ, "CONTAINERS_CONF": str(root / "containers.conf")}
    cli = (binary, "--root", str(root / "storage"), "--runroot", str(root / "run"),
           "--storage-driver", "vfs", "--tmpdir", str(root / "tmp"))  # fmt: skip
    sock, log = root / "podman.sock", root / "podman.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*cli, "system", "service", "--time=0", f"unix://{sock}"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=env)  # fmt: skip
    engine = Engine(f"unix://{sock}", f"localhost/{IMAGE}", cli, env)
    try:
        if (why := _await_engine(proc, sock, log)) is not None:
            _unavailable(
                f"podman's service cannot run here: {why}",
                required=True,
                require_env=REQUIRE_PODMAN,
            )
        engine.run_cli("import", str(busybox_image_tar(root / "busybox.tar")), IMAGE)
        yield engine
    finally:
        subprocess.run([*cli, "rm", "--all", "--force"], capture_output=True, check=False, env=env)
        _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


_CONTAINERD_CONF = """\
version = 2
root = "{root}/containerd/root"
state = "{root}/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{root}/containerd/containerd.sock"
[ttrpc]
  address = "{root}/containerd/containerd.sock.ttrpc"
[debug]
  address = "{root}/containerd/debug.sock"
"""


def _unmount_under(root: Path) -> None:
    """Unmount what an engine left mounted under ``root`` (its data root), deepest first."""
    with open("/proc/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(f"{root}/")]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)


@attrs.define
class MortalEngine:
    """A dockerd of one test, to be killed (SIGKILL) and started again on the same data.

    It uses a containerd of its own, as Debian's docker.io uses the system's containerd
    service: killing dockerd leaves containerd and the containers running.
    """

    binary: str
    root: Path
    engine: Engine
    proc: subprocess.Popen[bytes] | None = None
    containerd: subprocess.Popen[bytes] | None = None

    def start_containerd(self) -> None:
        conf = self.root / "containerd.toml"
        conf.write_text(_CONTAINERD_CONF.format(root=self.root))
        sock, log = self.root / "containerd" / "containerd.sock", self.root / "containerd.log"
        with log.open("ab") as out:
            self.containerd = subprocess.Popen(
                ["containerd", "--config", str(conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + _START_S
        while not sock.exists():  # it listens once the socket exists
            if self.containerd.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:]
                _unavailable(f"containerd cannot run here:\n{tail}", required=True)
            time.sleep(0.1)

    def start(self) -> None:
        """Start dockerd (and, the first time, containerd); return once it answers."""
        if self.containerd is None:
            self.start_containerd()
        sock, log = self.root / "docker.sock", self.root / "dockerd.log"
        argv = [self.binary, "--iptables=false", "--ip6tables=false", "--bridge=none",
                "--storage-driver=vfs", f"--data-root={self.root / 'data'}",
                f"--exec-root={self.root / 'exec'}", f"--pidfile={self.root / 'dockerd.pid'}",
                f"--containerd={self.root / 'containerd' / 'containerd.sock'}",
                f"--host=unix://{sock}"]  # fmt: skip
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        if (why := _await_engine(self.proc, sock, log)) is not None:
            _unavailable(f"dockerd cannot run here: {why}", required=True)

    def kill(self) -> None:
        """SIGKILL dockerd alone, and wait until it is gone."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(30)

    def close(self) -> None:
        """Start dockerd again if it was killed, remove every container, stop everything."""
        try:
            if self.proc is None or self.proc.poll() is not None:
                self.start()
            listed = self.engine.run_cli("ps", "--all", "--quiet")
            if listed.split():
                self.engine.run_cli("rm", "--force", *listed.split())
        finally:
            if self.proc is not None:
                _stop(self.proc)
            if self.containerd is not None:
                _stop(self.containerd)
            _unmount_under(self.root)


@pytest.fixture
def mortal_dockerd() -> Iterator[MortalEngine]:
    """A dockerd of this test alone (the tests kill it), with the test image."""
    binary = _preconditions("dockerd", required=True)
    cli = shutil.which("docker")
    if cli is None or shutil.which("containerd") is None:
        _unavailable("no docker CLI or containerd (Debian: docker.io, containerd)", required=True)
    assert cli is not None
    root = _engine_root("akk-")
    sock = root / "docker.sock"
    engine = Engine(f"unix://{sock}", IMAGE, (cli, "--host", f"unix://{sock}"))
    mortal = MortalEngine(binary, root, engine)
    try:
        mortal.start()
        engine.run_cli("import", str(busybox_image_tar(root / "busybox.tar")), IMAGE)
        yield mortal
    finally:
        try:
            mortal.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
