"""Fixtures shared by every test folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

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


@pytest.fixture
def mock_node(tmp_path: Path) -> Callable[[str], Path]:
    """Write a node of mock devices (nothing reserved, its ledger under ``tmp_path``).

    Call it with the mock device file's TOML; it returns the host config's path.
    """

    def write(devices: str) -> Path:
        (tmp_path / "devices.toml").write_text(devices)
        config = tmp_path / "host.toml"
        config.write_text(_HOST.format(state=tmp_path / "state"))
        return config

    return write
