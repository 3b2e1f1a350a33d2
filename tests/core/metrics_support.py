"""A mock node for the metrics tests: two agents over 8 cores, 32 GiB and 4 GPUs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEVICES = ROOT / "docs" / "examples" / "mock-devices.toml"


def write_node_config(directory: Path, *, mode: str = "auto-split", agents: int = 2) -> Path:
    """A host config over the installed mock plugin only; returns its path."""
    agent_tables = "".join(
        f'\n[[agents]]\n[agents.agent]\nid = "agent-{i + 1}"\n' for i in range(agents)
    )
    path = directory / "node.toml"
    path.write_text(
        f"""
[resource]
allocation-mode = "{mode}"
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{directory / "state"}"

[plugins]
allowed = ["mock"]
strict = true

[plugins.config.mock]
config-file = "{DEVICES}"
{agent_tables}"""
    )
    return path
