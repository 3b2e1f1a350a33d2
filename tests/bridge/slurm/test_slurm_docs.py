"""docs/slurm.md shows what the commands print for the demo node."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cluster import ACCELKIT

ROOT = Path(__file__).parents[3]
PAGE = (ROOT / "docs" / "slurm.md").read_text()


def shown_after(command: str) -> list[str]:
    """The lines of the first text block after the page shows ``command``."""
    at = PAGE.index(f"`{command}`")
    block = re.search(r"```text\n(.*?)```", PAGE[at:], re.DOTALL)
    assert block is not None
    return block.group(1).splitlines()


@pytest.mark.parametrize("sub", ["gres-conf", "node-line"])
def test_the_page_shows_what_the_command_prints(sub: str) -> None:
    command = f"accelkit slurm {sub} --config docs/examples/demo.toml --node-name demo"
    done = subprocess.run(
        [ACCELKIT, *command.split()[1:]], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert shown_after(command) == done.stdout.splitlines()


def test_the_page_names_every_key_of_bridge_slurm() -> None:
    from accelkit.config.model import SlurmBridgeConfig

    for field in SlurmBridgeConfig.__attrs_attrs__:
        assert f"\n{field.name.replace('_', '-')} = " in PAGE
