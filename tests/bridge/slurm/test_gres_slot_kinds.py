"""``gres-conf`` offers whole slots only; a divisible slot is named in a comment instead.

The regression: share slots were offered as whole devices, so a job given one GRES index of
``cuda.shares`` was booked every share of that GPU.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from accelkit.testing.cli_runner import ACCELKIT, cli_env

DEVICES = """\
[[kinds]]
key = "cuda"
allocation = "fractional"
quantum = "0.25"
[[kinds.devices]]
id = "cuda0"
model = "Mock GPU"
slot = "device"
divisible = false
[[kinds.devices]]
id = "cuda1"
model = "Mock GPU"
[[kinds.devices]]
id = "cuda2"
model = "Mock GPU"
mig-profile = "1g"
[[kinds]]
key = "npu"
allocation = "fractional"
[[kinds.devices]]
id = "npu0"
"""
HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{root}/state"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
"""


def accelkit(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (root / "devices.toml").write_text(DEVICES)
    (root / "host.toml").write_text(HOST.format(root=root))
    return subprocess.run(
        [*ACCELKIT, "slurm", *args, "--config", str(root / "host.toml"), "--node-name", "n1"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )


def test_gres_conf_offers_whole_slots_and_says_why_not_the_divisible_ones(
    tmp_path: Path,
) -> None:
    done = accelkit(tmp_path, "gres-conf")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "# cuda.shares (divisible, quantum 0.25) is not offered as GRES: Slurm cannot book "
        "shares of a device per GRES index; use whole-device slots in Slurm, or "
        "'accelkit run --slots' outside it",
        "# npu.shares (divisible, quantum 0.01) is not offered as GRES: Slurm cannot book "
        "shares of a device per GRES index; use whole-device slots in Slurm, or "
        "'accelkit run --slots' outside it",
        "Name=gpu Type=mock_gpu Count=1",
        "Name=gpu Type=mock_gpu Count=1",
    ]
    line = accelkit(tmp_path, "node-line")
    assert line.returncode == 0, line.stderr
    assert line.stdout.splitlines() == ["NodeName=n1 Gres=gpu:mock_gpu:2"]
