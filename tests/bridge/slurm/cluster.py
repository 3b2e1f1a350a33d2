"""A real one-node Slurm cluster in a temp dir: munged, slurmctld and slurmd, with accelkit's
prolog, epilog, the task prolog script of ``accelkit slurm task-prolog-script`` and a gres.conf
written by ``accelkit slurm gres-conf``.

The node has mock devices whose device nodes are character devices made with ``mknod`` in the
temp dir: four ``gpu`` (the mock ``cuda`` kind, ``SLURM_JOB_GPUS`` in the prolog) and two ``tpu``
(indices read from ``scontrol show job -d``). Daemons are stopped by their pids.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import attrs

ACCELKIT = str(Path(sys.executable).with_name("accelkit"))
NODE = "accelkit-test"
GPUS = 4
TPUS = 2
CPUS = os.cpu_count() or 1
BINARIES = ("munged", "slurmctld", "slurmd", "srun", "scontrol", "sinfo", "squeue", "scancel")
_MAJOR = 240  # "local/experimental use" char major: no driver behind the nodes


def missing() -> str | None:
    """Why a cluster cannot be started here, or ``None``."""
    if os.geteuid() != 0:
        return "a Slurm cluster needs root (SlurmUser=root, munged as the munge user, mknod)"
    absent = [b for b in BINARIES if shutil.which(b) is None]
    if absent:
        return f"Slurm binaries missing: {', '.join(absent)} (apt-get install slurm-wlm munge)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user (apt-get install munge)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def host_toml(root: Path) -> str:
    """The accelkit host config of the cluster's node."""
    gpus = "\n".join(
        f'[[plugins.config.mock.kinds.devices]]\nid = "cuda{i}"\nmodel = "Mock GPU 40G"\n'
        f'numa-node = 0\ndevice-node = "{root}/dev/gpu{i}"\n'
        for i in range(GPUS)
    )
    tpus = "\n".join(
        f'[[plugins.config.mock.kinds.devices]]\nid = "tpu{i}"\nmodel = "Acme"\n'
        f'device-node = "{root}/dev/tpu{i}"\n'
        for i in range(TPUS)
    )
    cores = "\n".join(
        f'[[plugins.config.mock.kinds.devices]]\nid = "{i}"\nnuma-node = 0\n' for i in range(CPUS)
    )
    return f"""[resource]
state-dir = "{root}/state"
reserved-cpu = 0

[plugins]
allowed = ["mock"]

[[plugins.config.mock.kinds]]
key = "cpu"
{cores}
[[plugins.config.mock.kinds]]
key = "cuda"
{gpus}
[[plugins.config.mock.kinds]]
key = "tpu"
{tpus}
[bridge.slurm]
gres-names = {{ cuda = "gpu" }}
"""


@attrs.define
class Cluster:
    """A started cluster; ``env`` reaches it (``SLURM_CONF``)."""

    root: Path
    config: Path
    env: dict[str, str]
    pids: dict[str, int] = attrs.field(factory=dict)

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, capture_output=True, text=True, env=self.env, timeout=timeout, check=False
        )

    def accelkit(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(ACCELKIT, *args, "--config", str(self.config))

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"

    def node_state(self) -> str:
        done = self.run("sinfo", "-h", "-N", "-n", NODE, "-o", "%T")
        return done.stdout.strip()

    def wait_job_over(self, job_id: str, timeout: float = 30) -> None:
        """Wait until Slurm calls the job COMPLETED (not COMPLETING: its epilog has run)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = self.run("scontrol", "show", "job", "-o", job_id)
            if "JobState=COMPLETED" in done.stdout or "Invalid job id" in done.stderr:
                return
            time.sleep(0.1)
        msg = f"job {job_id} not over after {timeout} s: {self.log('slurmd.log')}"
        raise AssertionError(msg)

    def stop(self) -> None:
        for name in ("serve", "slurmd", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            if pid is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                with contextlib.suppress(ChildProcessError):
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        break
                time.sleep(0.05)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _wrapper(root: Path, name: str, command: str, config: Path) -> Path:
    path = root / f"{name}.sh"
    path.write_text(
        "#!/bin/sh\n"
        f"export SLURM_CONF={root}/slurm.conf\n"
        f"export PATH={os.environ.get('PATH', '/usr/bin:/bin')}\n"
        f"exec {ACCELKIT} slurm {command} --config {config}\n"
    )
    path.chmod(0o755)
    return path


def _start_munged(root: Path) -> int:
    munge = pwd.getpwnam("munge")
    mdir = root / "munge"
    mdir.mkdir()
    mdir.chmod(0o755)  # the socket must be reachable by every user
    key = mdir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for path in (mdir, key):
        os.chown(path, munge.pw_uid, munge.pw_gid)
    argv = [
        "runuser", "-u", "munge", "--", "munged", "--foreground",
        f"--key-file={key}", f"--socket={mdir}/munge.socket", f"--pid-file={mdir}/munged.pid",
        f"--log-file={mdir}/munged.log", f"--seed-file={mdir}/munged.seed", "--num-threads=2",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if (mdir / "munge.socket").exists():
            return proc.pid
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    log_file = mdir / "munged.log"
    log = log_file.read_text(errors="replace") if log_file.exists() else ""
    proc.kill()
    msg = f"munged did not start: {log[-2000:]}"
    raise RuntimeError(msg)


def _slurm_conf(root: Path, gres: str, prolog: bool, proctrack: str = "linuxproc") -> str:
    hooks = ""
    if prolog:
        hooks = (
            f"Prolog={root}/prolog.sh\nTaskProlog={root}/task-prolog.sh\nEpilog={root}/epilog.sh\n"
        )
    host = socket.gethostname().split(".")[0]
    return f"""ClusterName=accelkit
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/{proctrack}
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=300
KillWait=2
GresTypes=gpu,tpu
{hooks}NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={CPUS} RealMemory=1000 {gres}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def _start_serve(cluster: Cluster) -> None:
    """``accelkit serve`` answering the prolog script; return once it listens."""
    log = cluster.root / "log" / "serve.log"
    proc = subprocess.Popen(
        [ACCELKIT, "serve", "--config", str(cluster.config), "--listen", "127.0.0.1:0",
         "--rediscover-interval", "30"],
        stdout=subprocess.DEVNULL, stderr=log.open("w"), env=cluster.env,
    )  # fmt: skip
    cluster.pids["serve"] = proc.pid
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if "serving http" in log.read_text():
            return
        time.sleep(0.1)
    msg = f"accelkit serve did not start: {log.read_text()[-2000:]}"
    raise RuntimeError(msg)


def start(
    root: Path, *, prolog: bool = True, serve: bool = False, proctrack: str = "linuxproc"
) -> Cluster:
    """Start munged, slurmctld and slurmd in ``root``; return once the node is idle.

    ``serve``: ``accelkit serve`` answers the prologs (``serve-prologs``) and the prolog is the
    script of ``accelkit slurm prolog-script``. ``proctrack``: Slurm's ``ProctrackType``
    (``cgroup``: on the host's cgroup v1 hierarchy)."""
    for sub in ("dev", "state", "ctld", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for i in range(GPUS):
        os.mknod(root / "dev" / f"gpu{i}", 0o666 | 0o020000, os.makedev(_MAJOR, i))
    for i in range(TPUS):
        os.mknod(root / "dev" / f"tpu{i}", 0o666 | 0o020000, os.makedev(_MAJOR, 16 + i))
    config = root / "host.toml"
    config.write_text(host_toml(root) + ("serve-prologs = true\n" if serve else ""))
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    cluster = Cluster(root, config, env)
    gres = subprocess.run(
        [ACCELKIT, "slurm", "gres-conf", "--config", str(config),
         "--output", str(root / "gres.conf")],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    if gres.returncode != 0:
        msg = f"accelkit slurm gres-conf failed: {gres.stderr}"
        raise RuntimeError(msg)
    line = cluster.accelkit("slurm", "node-line", "--node-name", NODE)
    gres_word = line.stdout.split()[1]  # Gres=...
    for command in ("prolog", "epilog"):
        _wrapper(root, command, command, config)
    if serve:
        script = root / "prolog-script.sh"
        made = cluster.accelkit("slurm", "prolog-script", "--output", str(script))
        if made.returncode != 0:
            msg = f"accelkit slurm prolog-script failed: {made.stderr}"
            raise RuntimeError(msg)
        (root / "prolog.sh").write_text(
            f"#!/bin/sh\nexport SLURM_CONF={root}/slurm.conf\nexec {script}\n"
        )
    task = cluster.accelkit("slurm", "task-prolog-script", "--output", str(root / "task-prolog.sh"))
    if task.returncode != 0:
        msg = f"accelkit slurm task-prolog-script failed: {task.stderr}"
        raise RuntimeError(msg)
    if proctrack == "cgroup":
        (root / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
        )
    (root / "slurm.conf").write_text(_slurm_conf(root, gres_word, prolog, proctrack))
    try:
        if serve:
            _start_serve(cluster)
        cluster.pids["munged"] = _start_munged(root)
        for daemon, extra in (("slurmctld", ["-i"]), ("slurmd", ["-N", NODE])):
            proc = subprocess.Popen(
                [daemon, "-D", "-f", str(root / "slurm.conf"), *extra],
                stdout=subprocess.DEVNULL, stderr=(root / "log" / f"{daemon}.err").open("w"),
                env=env,
            )  # fmt: skip
            cluster.pids[daemon] = proc.pid
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            state = cluster.node_state()
            if state == "idle":
                return cluster
            time.sleep(0.2)
        msg = (
            f"the node is {state!r}, not idle, after 60 s\n"
            f"slurmctld: {cluster.log('slurmctld.log')}\nslurmd: {cluster.log('slurmd.log')}"
        )
        raise RuntimeError(msg)
    except BaseException:
        cluster.stop()
        raise
