"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from accelkit.testing.cli_runner import run_accelkit

#: no test reads this machine's host config: the commands a test runs find no system-wide file
#: (this path never exists) and no ACCELKIT_CONFIG of the shell that runs pytest
_NO_SYSTEM_CONFIG = Path(__file__).resolve().parent / "no-system-config" / "host.toml"


def pytest_configure(config: pytest.Config) -> None:
    """Isolate every test, and every command it starts, from ``/etc/accelkit``."""
    os.environ.pop("ACCELKIT_CONFIG", None)
    os.environ["ACCELKIT_SYSTEM_CONFIG"] = str(_NO_SYSTEM_CONFIG)


_HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{state}"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
"""


def mock_devices(*, cpus: int = 0, mem: str | None = None, gpus: int = 0) -> str:
    """A mock device file: cores ``"0"…``, one memory ``root``, GPUs ``cuda0…``, NUMA node 0."""
    lines: list[str] = []
    if cpus:
        lines += ["[[kinds]]", 'key = "cpu"']
        for i in range(cpus):
            lines += ["[[kinds.devices]]", f'id = "{i}"', "numa-node = 0"]
    if mem is not None:
        lines += [
            "[[kinds]]",
            'key = "mem"',
            "[[kinds.devices]]",
            'id = "root"',
            f'memory = "{mem}"',
        ]
    if gpus:
        lines += ["[[kinds]]", 'key = "cuda"']
        for i in range(gpus):
            lines += ["[[kinds.devices]]", f'id = "cuda{i}"', "numa-node = 0"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def mock_node(tmp_path: Path) -> Callable[..., Path]:
    """Write a node of mock devices (nothing reserved, its ledger under ``tmp_path``).

    Call it with ``cpus=``, ``mem=`` and ``gpus=`` (see :func:`mock_devices`), or with the text
    of a mock device file as ``devices=``; it returns the host config's path.
    """

    def write(
        *, cpus: int = 0, mem: str | None = None, gpus: int = 0, devices: str | None = None
    ) -> Path:
        if devices is None:
            devices = mock_devices(cpus=cpus, mem=mem, gpus=gpus)
        (tmp_path / "devices.toml").write_text(devices)
        config = tmp_path / "host.toml"
        config.write_text(_HOST.format(state=tmp_path / "state"))
        return config

    return write


@pytest.fixture
def accelkit_cli() -> Callable[..., object]:
    """Run ``accelkit ARGS`` as its user does (:func:`~accelkit.testing.cli_runner.run_accelkit`):
    ``accelkit_cli("status", "--json", config=path, env={...})`` returns the finished process."""
    return run_accelkit
